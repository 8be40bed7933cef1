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
     one of PSRO. A response faces the opponent's marginal, but with a CE solver
     (``CONDITIONAL_SOLVERS``, JPSRO(CE)) the conditionals that ``recommendations``
     picks (``RECOMMENDATIONS``): by default one response, in each seat against the
     opponent given that seat's likeliest recommendation; with ``each`` JPSRO(CE)'s
     CE best responses (Marris et al. 2021), one per member recommended in either seat,
     against the opponent given it and trained in the seats that recommend it;
  4. each response is saved and reloaded as a frozen member (never trained again),
     numbered after the population in the order the responses were trained (with
     ``each``, an exact best response that a member plays already adds no copy).

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
(their difference is the oracle's shortfall; the means over the iteration's responses
where it trained several, each one's in ``PsroStep.response_values``) and wall time.
The population is saved after every iteration and each response saves its own state
like any run, so a stopped run continues (``coplay psro --resume DIR``, with the
settings saved in ``psro.yaml``), between two responses of one iteration too.
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
from coplay.policies.solvers import named_table
from coplay.population.metagame import (
    RECOMMENDATIONS,
    Recommendation,
    Recommender,
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
from coplay.population.psro_state import (
    Outer,
    PsroStep,
    load_outer,
    save_outer,
    step_metrics,
    summary,
)
from coplay.report import atomic, sinks
from coplay.report.loggers import Loggers, Opening, closed_after, open_loggers
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
    with closed_after(loggers):
        return _outer_loop(cfg, out, outer, game, loggers, progress, stop_after)


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
        added = len(members) - 1  # with recommendations=each, several an iteration
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
        train_s, answers = 0.0, []
        if k < cfg.iterations:
            t1 = time.perf_counter()
            answers = _responses(cfg, out, k, members, tables, game, solution)
            members += [a.member for a in answers if a.member is not None]
            train_s = time.perf_counter() - t1
        step = PsroStep(
            iteration=k,
            members=len(solution.marginals[0]),
            exploitability=res.exploitability if res else float("nan"),
            nash_conv=res.nash_conv if res else float("nan"),
            response_value=_mean([a.value for a in answers]),
            best_value=_mean([a.best for a in answers]),
            marginals=tuple(tuple(float(x) for x in m) for m in solution.marginals),
            meta_s=meta_s,
            train_s=train_s,
            elapsed_s=time.perf_counter() - start,
            cce_gap=gap.gap if gap else float("nan"),
            cce_gaps=gap.per_player if gap else (),
            correlated=solution.correlated,
            ce_gap=ce.gap if ce else float("nan"),
            ce_gaps=ce.per_player if ce else (),
            response_values=tuple(a.value for a in answers),
            best_values=tuple(a.best for a in answers),
        )
        steps.append(step)
        fallback = {"psro/meta_fallback": meta.level}  # 1: max-welfare CE, 2: uniform
        loggers.log(k, step_metrics(step, members) | fallback)
        # The members the payoffs cover: the response just added joins the next ones.
        solved = [m.policy_id for m in members[: step.members]]
        sinks.write_metagame(out / "metagame.json", solved, payoffs)
        save_outer(out, Outer(members, payoffs, steps))
        if progress:
            progress(step)
    result = PsroResult(tuple(m.policy_id for m in members), payoffs, solution, tuple(steps))
    if len(steps) == cfg.iterations + 1:
        sinks.write_summary(out / "summary.json", summary(result.members, result.steps))
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


@dataclass(frozen=True)
class _Response:
    """A best response as it joins: the member, its value against what it answers and
    the exact best response's value (NaN where unknown). No member where it would be a
    copy of one (``_responses``)."""

    member: Policy | None
    value: float
    best: float


def _responses(
    cfg: PsroConfig,
    out: Path,
    k: int,
    members: list[Policy],
    tables: list[os_policy.Policy],
    game: pyspiel.Game | None,
    solution: MetaSolution,
) -> list[_Response]:
    """Iteration ``k``'s best responses, one per recommendation, each answering the
    population as the iteration solved it; the new members are numbered after the
    population in order.

    With ``recommendations=each`` (``Recommender.distinct``) an oracle whose member
    plays the exact best response (``Oracle.plays_best``) is not asked for one that a
    member plays already; its value still counts in the step's. The copies joined and
    multiplied: on Kuhn 8 iterations made 86 members, 72 of them copies.

    Only the iteration's end saves the outer state: a run stopped between two responses
    answers the finished ones again on resume, from their saved runs (the LM oracle's
    response runs hold their end state and train nothing more; the exact oracle's
    answer is recomputed), so they join as the uninterrupted run's did."""
    population, oracle = tuple(members), ORACLES[cfg.oracle]
    distinct = oracle.plays_best and _recommender(cfg).distinct
    played = [named_table(game, t) for t in tables] if distinct else []
    answers: list[_Response] = []
    for rec in _recommendations(cfg, solution):
        index = len(population) + sum(a.member is not None for a in answers)
        target = _target(cfg, out, index, population, tables, game, rec)
        if distinct:
            if target.best_table in played:
                answers.append(_Response(None, target.best, target.best))
                continue
            played.append(target.best_table)
        try:
            member, value = oracle.respond(target)
        except rundir.RunInterrupted:
            # The response saved its own state and the outer loop its own before it.
            raise KeyboardInterrupt(
                f"interrupted during PSRO iteration {k}; continue with: coplay psro --resume {out}"
            ) from None
        answers.append(_Response(member, value, target.best))
    return answers


def _recommender(cfg: PsroConfig) -> Recommender:
    """The opponent's marginal (PSRO, JPSRO(CCE)), else what ``cfg.recommendations``
    picks of the conditionals (JPSRO(CE))."""
    if cfg.meta_solver not in CONDITIONAL_SOLVERS:
        return _MARGINAL
    return RECOMMENDATIONS[cfg.recommendations]


def _marginal(solution: MetaSolution) -> tuple[Recommendation, ...]:
    """One response, in each seat against the opponent's marginal."""
    return (Recommendation(opponent_distributions(solution, conditional=False)),)


_MARGINAL = Recommender(_marginal, distinct=False)


def _recommendations(cfg: PsroConfig, solution: MetaSolution) -> tuple[Recommendation, ...]:
    """What the iteration's responses answer (``_recommender``)."""
    weights = cfg.seat_weights or (1.0,) * len(solution.marginals)
    # A member recommended only in seats given no games has no game to answer it in.
    return tuple(
        r for r in _recommender(cfg).pick(solution) if any(weights[s] > 0 for s in r.seats)
    )


def _target(
    cfg: PsroConfig,
    out: Path,
    index: int,
    members: tuple[Policy, ...],
    tables: list[os_policy.Policy],
    game: pyspiel.Game | None,
    rec: Recommendation,
) -> Target:
    """What best response ``index`` answers: ``rec``, with the mixture it faces and the
    exact best response to it where the game allows."""
    opponent = meta_opponent(game, tables, rec.by_seat) if game is not None else None
    table, best = (
        exact_best_response(game, opponent, rec.seats) if opponent is not None else ({}, np.nan)
    )
    return Target(cfg, out, index, members, rec.by_seat, opponent, table, best, rec.seats)


def _mean(values: list[float]) -> float:
    """The mean of the responses' values (one alone: itself, to the bit); NaN for none."""
    return float(np.mean(values)) if values else float("nan")
