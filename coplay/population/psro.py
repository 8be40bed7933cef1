"""PSRO and JPSRO with a language-model best-response oracle (two-player games).

Policy-Space Response Oracles (Lanctot et al. 2017, "A Unified Game-Theoretic Approach
to Multiagent Reinforcement Learning"); JPSRO (Marris et al. 2021) when the meta-solver
returns a correlated joint distribution. One population serves both seats: every
member is a frozen policy that can sit in either. Each PSRO iteration:

  1. meta-game ``payoffs = (P0, P1)`` in OpenSpiel's two-population layout, one of two
     kinds. Exact for games OpenSpiel can evaluate (each member's tabular policy,
     ``expected_game_score.policy_value``): ``payoffs[p][i, j]`` is player p's expected
     return when member i sits in seat 0 and member j in seat 1. Else sampled
     cross-play with seats alternating (``sampled_payoffs``): ``P0[i, j]`` is member i's
     mean return against j over both seats and ``P1 = P0.T``, a symmetric meta-game
     whose two players are not game seats (its diagonal is 0 in a zero-sum game);
  2. meta-strategy: a solver from ``coplay.eval.metasolvers`` (Nash by default);
  3. best response: an oracle of ``ORACLES`` (``coplay.population.oracles``): by
     default the one training loop against the meta-strategy, the opponent of each
     game group drawn for the learner's seat (rotating, or by ``seat_weights``), the
     best of ``restarts`` seeds; ``exact``, OpenSpiel's exact best response to the
     mixture (games with exact evaluation), is the control that shows how far PSRO
     gets when its oracle is perfect, so a shortfall of the LM oracle can be told from
     one of PSRO;
  4. the response is saved and reloaded as a frozen member (never trained again).

The first member comes from ``INITIAL_MEMBERS`` (``coplay.population.psro_members``):
the untrained language model (lm) or a uniform random bot (random).

Logged per iteration (``psro.jsonl``): meta-game size; in exact games the CCE gap of
the meta-strategy's joint in the full game (``coplay.eval.mixture.joint_cce_gap``:
``psro/cce_gap``, summed over seats like NashConv, and ``psro/cce_gap_seat<s>``), the
measure JPSRO converges in (Marris et al. 2021), and the exploitability of the mixture
of each seat's marginal (``psro/exploitability``, ``psro/nash_conv``). For PSRO's
solvers the joint is the product of the marginals and its CCE gap is the mixture's
NashConv, taken from it rather than computed again. A correlated joint is not the
product of its marginals, whose exploitability can stay high while the joint converges.
(In a two-player zero-sum game both give the seats values that sum to 0, so the summed
gap is the marginals' NashConv unless a seat's gain is clipped at 0; the seats' own
gaps differ.) With a CE solver (``CONDITIONAL_SOLVERS``, JPSRO(CE)) also the joint's CE
gap (``joint_ce_gap``: ``psro/ce_gap``, ``psro/ce_gap_seat<s>``), whose deviations know
their recommendation: a CCE that is no CE has CCE gap 0, CE gap above 0. Then the value
of the new response against the meta-strategy next to the exact best response's value
(their difference is the oracle's shortfall) and wall time. The population is saved
after every iteration and each response saves its own state like any run, so a stopped
run continues (``coplay psro --resume DIR``, with the settings saved in ``psro.yaml``).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyspiel
from open_spiel.python import policy as os_policy

from coplay.eval.exact import ExploitabilityResult, to_openspiel_policy
from coplay.eval.meta_solution import MetaSolution
from coplay.eval.mixture import CceGap, CeGap, joint_cce_gap, joint_ce_gap, tables_exploitability
from coplay.population.metagame import (
    exact_best_response,
    exact_game,
    exact_payoffs,
    meta_opponent,
    opponent_distributions,
    sampled_payoffs,
    solve,
)
from coplay.population.oracles import ORACLES, Target
from coplay.population.psro_config import (
    CONDITIONAL_SOLVERS,
    PsroConfig,
    check_game_fits,
    settings_yaml,
)
from coplay.population.psro_members import initial_member
from coplay.population.psro_state import Outer, PsroStep, load_outer, save_outer
from coplay.report import atomic, sinks
from coplay.report.loggers import Loggers, Opening, open_loggers
from coplay.train.checkpoints import rundir
from coplay.train.config import ConfigError, RunConfig
from coplay.train.settings import load_yaml, validate
from coplay.types import Policy


@dataclass(frozen=True)
class PsroResult:
    """The final population, its meta-game and solution, and the per-iteration log."""

    members: tuple[str, ...]
    """Member ids; LM members are saved under ``out/members/<index>``."""
    payoffs: tuple[np.ndarray, np.ndarray]
    solution: MetaSolution
    steps: tuple[PsroStep, ...]


def run_psro(
    cfg: PsroConfig,
    out: str | Path,
    *,
    progress: Callable[[PsroStep], None] | None = None,
    resume: bool = False,
    stop_after: int | None = None,
) -> PsroResult:
    """Grow a population by best responses to its meta-strategy; see the module docstring.

    The state is saved after every iteration and each response is a run that saves
    its own, so ``resume`` continues a killed run into the same result as one that
    never stopped. ``stop_after`` ends after that iteration, as a job with a time limit
    would."""
    check_game_fits(cfg)
    out = Path(out)
    game = exact_game(cfg.run)
    if resume:
        rundir.check_resume(cfg.run, out)  # before anything is written
        _check_same_metagame(cfg.run, out, exact=game is not None)
        rundir.repair(out, ["psro.jsonl"])  # a line a kill tore during its append
        outer = load_outer(cfg, out)
        # The responses from here on train with this resume's overrides: record them.
        rundir.write_config(out, cfg.run)
        sinks.keep_until(out / "psro.jsonl", len(outer.steps) - 1)
    else:
        out.mkdir(parents=True, exist_ok=True)
        rundir.write_config(out, cfg.run)
        atomic.write_text(out / "psro.yaml", settings_yaml(cfg))
        (out / "psro.jsonl").write_text("")
        outer = Outer([initial_member(cfg, out)], None, [])
        save_outer(out, outer)  # a run stopped during its first response resumes too
    opening = Opening(out, "psro.jsonl", len(outer.steps), cfg.model_dump(mode="json"))
    loggers = open_loggers(cfg.run.train.loggers, opening)
    try:
        return _outer_loop(cfg, out, outer, game, loggers, progress, stop_after)
    finally:
        loggers.close()


def _check_same_metagame(cfg: RunConfig, out: Path, *, exact: bool) -> None:
    """Refuse a resume whose overrides (``train.exact``, ``model.mode``) would switch
    between the exact meta-game and the sampled one: the two have different layouts
    (module docstring), and one run's rows and payoffs would mix them."""
    saved = out / "config.yaml"
    if not saved.is_file():
        return  # no run there: loading its state says what is missing
    was = exact_game(validate(load_yaml(saved))) is not None
    if was != exact:
        kinds = {True: "exact", False: "sampled"}
        raise ConfigError(
            f"cannot resume {out}: its meta-game is {kinds[was]} and the new config's "
            f"would be {kinds[exact]} (train.exact, model.mode); start a new run instead"
        )


def _outer_loop(
    cfg: PsroConfig,
    out: Path,
    outer: Outer,
    game: pyspiel.Game | None,
    loggers: Loggers,
    progress: Callable[[PsroStep], None] | None,
    stop_after: int | None,
) -> PsroResult:
    """PSRO iterations from where ``outer`` stands to the last (or ``stop_after``)."""
    members, steps, payoffs = outer.members, outer.steps, outer.payoffs
    tables: list[os_policy.Policy] = []
    start = time.perf_counter() - (steps[-1].elapsed_s if steps else 0.0)
    last = cfg.iterations if stop_after is None else min(stop_after, cfg.iterations)
    if len(steps) > last:
        # Iterations 0..iterations: all but the last add a response, the last solves
        # the final population's meta-game.
        added = min(len(steps), cfg.iterations)
        final = ", and the final meta-game solved" if len(steps) > cfg.iterations else ""
        raise ValueError(
            f"{out} has already run PSRO iterations 0..{len(steps) - 1} ({added} best "
            f"response{'s' * (added != 1)} added{final}); nothing is left to resume"
        )
    for k in range(len(steps), last + 1):
        t0 = time.perf_counter()
        if game is not None:
            tables += [
                to_openspiel_policy(m, cfg.run.game.name, params=cfg.run.game.params)
                for m in members[len(tables) :]
            ]
            payoffs = exact_payoffs(game, tables, payoffs)
        else:
            payoffs = sampled_payoffs(members, cfg.run, episodes=cfg.crossplay_episodes, seed=k)
        meta = solve(cfg.meta_solver, payoffs)
        solution = meta.solution
        res, gap = _measure(game, tables, payoffs, solution)
        ce = _ce_gap(cfg, game, tables, payoffs, solution)
        meta_s = time.perf_counter() - t0
        train_s, value, best = 0.0, float("nan"), float("nan")
        if k < cfg.iterations:
            t1 = time.perf_counter()
            try:
                member, value, best = _respond(cfg, out, k + 1, members, tables, game, solution)
            except rundir.RunInterrupted:
                # The response saved its own state and the outer loop its own before it.
                raise KeyboardInterrupt(
                    f"interrupted during PSRO iteration {k}; continue with: "
                    f"coplay psro --resume {out}"
                ) from None
            members.append(member)
            train_s = time.perf_counter() - t1
        step = PsroStep(
            iteration=k,
            members=len(solution.marginals[0]),
            exploitability=res.exploitability if res else float("nan"),
            nash_conv=res.nash_conv if res else float("nan"),
            response_value=value,
            best_value=best,
            marginals=tuple(tuple(float(x) for x in m) for m in solution.marginals),
            meta_s=meta_s,
            train_s=train_s,
            elapsed_s=time.perf_counter() - start,
            cce_gap=gap.gap if gap else float("nan"),
            cce_gaps=gap.per_player if gap else (),
            correlated=solution.correlated,
            ce_gap=ce.gap if ce else float("nan"),
            ce_gaps=ce.per_player if ce else (),
        )
        steps.append(step)
        fallback = {"psro/meta_fallback": meta.level}  # 1: max-welfare CE, 2: uniform
        loggers.log(k, _step_metrics(step, members) | fallback)
        # The members the payoffs cover: the response just added joins the next ones.
        solved = [m.policy_id for m in members[: step.members]]
        sinks.write_metagame(out / "metagame.json", solved, payoffs)
        save_outer(out, Outer(members, payoffs, steps))
        if progress:
            progress(step)
    result = PsroResult(tuple(m.policy_id for m in members), payoffs, solution, tuple(steps))
    if len(steps) == cfg.iterations + 1:
        sinks.write_summary(out / "summary.json", _summary(result))
    return result


def _measure(
    game: pyspiel.Game | None,
    tables: list[os_policy.Policy],
    payoffs: tuple[np.ndarray, np.ndarray],
    solution: MetaSolution,
) -> tuple[ExploitabilityResult | None, CceGap | None]:
    """The exploitability of the marginals' mixture and the CCE gap of the joint, in
    games with exact evaluation, whose exact meta-game holds the joint's profile values
    (None in the others).

    A seat's best deviation, fixed before the draw, faces the other seats' part of the
    joint. With two seats that is the other seat's marginal, whose best response the
    mixture's exploitability has just computed: the joint needs only its own value."""
    if game is None:
        return None, None
    res = tables_exploitability(game, tables, solution.marginals)
    if solution.correlated and game.num_players() > 2:
        return res, joint_cce_gap(game, tables, solution.joint, payoffs=payoffs)
    br, on = res.best_response_values, res.on_policy_values
    if solution.correlated:
        on = tuple(float(np.sum(solution.joint * p)) for p in payoffs)
    per = tuple(max(0.0, b - v) for b, v in zip(br, on, strict=True))
    # A product joint's gap is the mixture's NashConv, to the bit.
    gap = sum(per) if solution.correlated else res.nash_conv
    return res, CceGap(gap=gap, per_player=per, on_policy_values=on, best_response_values=br)


def _ce_gap(
    cfg: PsroConfig,
    game: pyspiel.Game | None,
    tables: list[os_policy.Policy],
    payoffs: tuple[np.ndarray, np.ndarray],
    solution: MetaSolution,
) -> CeGap | None:
    """The joint's CE gap for a CE solver, whose responses face the conditionals it
    measures, in games with exact evaluation (None otherwise)."""
    if game is None or cfg.meta_solver not in CONDITIONAL_SOLVERS:
        return None
    return joint_ce_gap(game, tables, solution.joint, payoffs=payoffs)


def _respond(
    cfg: PsroConfig,
    out: Path,
    index: int,
    members: list[Policy],
    tables: list[os_policy.Policy],
    game: pyspiel.Game | None,
    solution: MetaSolution,
) -> tuple[Policy, float, float]:
    """Best response ``index`` to the meta-strategy from ``cfg.oracle``, with its value
    against the meta-strategy and the exact best response's value (NaN where unknown)."""
    by_seat = opponent_distributions(solution, conditional=cfg.meta_solver in CONDITIONAL_SOLVERS)
    opponent = meta_opponent(game, tables, by_seat) if game is not None else None
    table, best = exact_best_response(game, opponent) if opponent is not None else ({}, np.nan)
    target = Target(cfg, out, index, tuple(members), by_seat, opponent, table, best)
    member, value = ORACLES[cfg.oracle].respond(target)
    return member, value, best


def _step_metrics(step: PsroStep, members: list[Policy]) -> dict[str, float]:
    """The step's numbers, with each member's weight in the meta-strategy per seat
    (``psro/weight_seat0/psro:01``; a member that joined after it was solved has none),
    the CCE gap per seat (``psro/cce_gap_seat0``; none where not measured) and the CE
    gap where measured (``psro/ce_gap``, ``psro/ce_gap_seat0``)."""
    weights = {
        f"psro/weight_seat{seat}/{m.policy_id}": w
        for seat, marginal in enumerate(step.marginals)
        for m, w in zip(members, marginal, strict=False)
    }
    gaps = {f"psro/cce_gap_seat{seat}": g for seat, g in enumerate(step.cce_gaps)}
    gaps |= {"psro/ce_gap": step.ce_gap} if step.ce_gaps else {}
    gaps |= {f"psro/ce_gap_seat{seat}": g for seat, g in enumerate(step.ce_gaps)}
    numbers = {
        "psro/members": step.members,
        "psro/cce_gap": step.cce_gap,
        "psro/exploitability": step.exploitability,
        "psro/nash_conv": step.nash_conv,
        "psro/response_value": step.response_value,
        "psro/best_response_value": step.best_value,
        "perf/meta_s": step.meta_s,
        "perf/train_s": step.train_s,
        "perf/elapsed_s": step.elapsed_s,
    }
    return weights | gaps | numbers


def _finite(x: float) -> float | None:
    return x if np.isfinite(x) else None  # JSON has no NaN


def _summary(result: PsroResult) -> dict:
    last = result.steps[-1]
    ce = {"final/ce_gap": last.ce_gap, "ce_gap": [_finite(s.ce_gap) for s in result.steps]}
    return {
        "members": list(result.members),
        "final/cce_gap": last.cce_gap,
        "final/exploitability": last.exploitability,
        "final/nash_conv": last.nash_conv,
        "final/marginals": [list(m) for m in last.marginals],
        "cce_gap": [_finite(s.cce_gap) for s in result.steps],
        "exploitability": [_finite(s.exploitability) for s in result.steps],
        "wall_s": last.elapsed_s,
    } | (ce if last.ce_gaps else {})
