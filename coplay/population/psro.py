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

The first member comes from ``INITIAL_MEMBERS``: the untrained language model (lm) or
a uniform random bot (random).

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

import json
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import pyspiel
import yaml
from open_spiel.python import policy as os_policy
from pydantic import BaseModel, ConfigDict, Field, model_validator

from coplay.envs.probe import names_user_factory, resolve_factory
from coplay.eval.exact import ExploitabilityResult, to_openspiel_policy
from coplay.eval.metasolvers import META_SOLVERS, MetaSolution
from coplay.eval.mixture import CceGap, CeGap, joint_cce_gap, joint_ce_gap, tables_exploitability
from coplay.models.loading import build_policy, load_policy
from coplay.policies.scripted import RandomPolicy, TablePolicy
from coplay.population.metagame import (
    check_meta_solver,
    exact_best_response,
    exact_game,
    exact_payoffs,
    freeze,
    meta_opponent,
    opponent_distributions,
    sampled_payoffs,
    solve,
)
from coplay.population.oracles import ORACLES, Target, member_folder
from coplay.report import atomic, sinks
from coplay.report.loggers import Loggers, Opening, open_loggers
from coplay.train.checkpoints import rundir
from coplay.train.checkpoints.safe_tree import save_tree
from coplay.train.checkpoints.state import STATE_DIR, StateError, read_state, restoring
from coplay.train.config import ConfigError, RunConfig, check_seat_weights
from coplay.train.settings import load_yaml, validate
from coplay.train.trainer import check_weights, game_text
from coplay.types import Policy

PSRO_STATE = "psro"
"""The outer loop's state: ``out/state/psro.json`` and ``psro.safetensors``."""

UNTRAINED_ORACLES = frozenset({"exact"})
"""Oracles that train no language model: the LM response settings (``restarts``,
``seat_weights``, ``warm_start``) would be ignored, so the config refuses them."""

CONDITIONAL_SOLVERS = frozenset({"ce", "mwce"})
"""Solvers whose best responses train against the conditional distribution (JPSRO(CE));
every other solver's responses face the opponent's marginal (PSRO, JPSRO(CCE))."""


class PsroConfig(BaseModel):
    """A PSRO run: the trainer config of every best response plus the outer loop."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)

    run: RunConfig = Field(default_factory=RunConfig)
    """Trainer config of each best response; ``run.train.iterations`` per response."""
    iterations: int = Field(8, gt=0)
    """PSRO iterations, i.e. best responses added to the population."""
    meta_solver: str = "nash"
    """Meta-solver (coplay.eval.metasolvers): nash, uniform, prd, alpharank, ce, cce, ..."""
    initial: str = "lm"
    """First member (``INITIAL_MEMBERS``): lm, the untrained language model, or random,
    a uniform random bot."""
    warm_start: bool = True
    """Start each best response from the previous one's weights (saves compute)."""
    crossplay_episodes: int = Field(200, gt=0)
    """Games per pairing for the sampled meta-game of games without exact evaluation
    (and for judging ``restarts`` there)."""
    oracle: str = "lm"
    """Best-response oracle (``ORACLES``): lm, the language-model trainer, or exact,
    OpenSpiel's exact best response to the mixture (games with exact evaluation; a
    control for the LM oracle)."""
    seat_weights: list[float] | None = None
    """Share of each response's game groups per seat (see train.opponent.seat_weights),
    one non-negative weight per seat, not all 0; each group's opponent is drawn from
    the meta-strategy of the seat it faces. None rotates seats evenly. LM oracle only."""
    restarts: int = Field(1, gt=0)
    """LM responses trained per iteration, each with its own seed; the one with the
    highest value against the meta-strategy (exact where the game allows, else sampled
    cross-play) joins the population. LM oracle only."""

    @model_validator(mode="after")
    def _check(self) -> PsroConfig:
        for key, registry in (
            ("meta_solver", META_SOLVERS),
            ("oracle", ORACLES),
            ("initial", INITIAL_MEMBERS),
        ):
            if getattr(self, key) not in registry:
                raise ValueError(
                    f"unknown {key} {getattr(self, key)!r}; available: {', '.join(registry)}"
                )
        check_seat_weights(self.seat_weights)
        _check_oracle_settings(self)
        if not names_user_factory(self.run.game.name):
            check_game_fits(self)  # a user's game is imported only when run_psro builds it
        return self


def _check_oracle_settings(cfg: PsroConfig) -> None:
    """Refuse LM response settings that an oracle training no LM would silently ignore."""
    if cfg.oracle not in UNTRAINED_ORACLES:
        return
    given = {
        "restarts": cfg.restarts != 1,
        "seat_weights": cfg.seat_weights is not None,
        "warm_start": not cfg.warm_start,
    }
    ignored = [key for key, changed in given.items() if changed]
    if ignored:
        raise ValueError(
            f"oracle={cfg.oracle} trains no language model: {ignored[0]}="
            f"{getattr(cfg, ignored[0])} would have no effect; drop it or use oracle=lm"
        )


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


def check_game_fits(cfg: PsroConfig) -> None:
    """Two players, one seat weight per seat, and a game with exact evaluation for an
    oracle that needs one."""
    game = cfg.run.game
    spec = resolve_factory(game.name, game.params)().spec
    if spec.num_players != 2:
        raise ValueError(f"PSRO here supports 2-player games; {game.name!r} has {spec.num_players}")
    check_weights(cfg.seat_weights, spec)
    check_meta_solver(cfg.meta_solver, spec)
    if ORACLES[cfg.oracle].needs_exact and exact_game(cfg.run) is None:
        raise ValueError(
            f"oracle={cfg.oracle} needs an exact meta-game: a turn-based OpenSpiel game "
            f"with exact evaluation and choice-mode members; {game.name!r} with "
            f"model.mode={cfg.run.model.mode} has none"
        )


@dataclass(frozen=True)
class PsroStep:
    """What one PSRO iteration measured (before its best response was added)."""

    iteration: int
    members: int
    exploitability: float
    """Of the mixture of each seat's marginal of the meta-strategy (the product of its
    marginals, which a correlated joint is not); NaN for games without exact evaluation."""
    nash_conv: float
    """NashConv of the same mixture."""
    response_value: float
    """The new response's value against the meta-strategy (mean over seats); NaN on
    the last iteration, which trains none."""
    best_value: float
    """The exact best response's value against it (NaN where not exact or none trained)."""
    marginals: tuple[tuple[float, ...], ...]
    meta_s: float
    train_s: float
    elapsed_s: float
    cce_gap: float = float("nan")
    """The CCE gap of the meta-strategy's joint in the full game, summed over seats
    (``CceGap.gap``); NaN for games without exact evaluation, and in the steps of a run
    saved before it was measured."""
    cce_gaps: tuple[float, ...] = ()
    """The same per seat."""
    correlated: bool = False
    """Whether the meta-solver chose a joint (JPSRO), not only marginals."""
    ce_gap: float = float("nan")
    """The CE gap of the joint (``CeGap.gap``), measured for the CE solvers in games with
    exact evaluation; NaN otherwise, and in the steps of a run saved before it was."""
    ce_gaps: tuple[float, ...] = ()
    """The same per seat; empty where not measured."""


@dataclass(frozen=True)
class PsroResult:
    """The final population, its meta-game and solution, and the per-iteration log."""

    members: tuple[str, ...]
    """Member ids; LM members are saved under ``out/members/<index>``."""
    payoffs: tuple[np.ndarray, np.ndarray]
    solution: MetaSolution
    steps: tuple[PsroStep, ...]


# --- members -----------------------------------------------------------------------


@dataclass(frozen=True)
class InitialMember:
    """How PSRO's first member is made for a new run, and made again on resume."""

    build: Callable[[PsroConfig, Path], Policy]
    """Member 0 of a run in ``out`` (saved under ``out/members/00`` where it has weights)."""
    reload: Callable[[PsroConfig, Path], Policy]
    """The same member again when the run in ``out`` resumes."""


def _random_member(cfg: PsroConfig, out: Path) -> Policy:
    return RandomPolicy(seed=cfg.run.train.seed, policy_id="psro:00")


def _lm_member(cfg: PsroConfig, out: Path) -> Policy:
    """The untrained tiny/local LM of ``cfg.run``, frozen under ``out/members/00``."""
    seed, game = cfg.run.train.seed, cfg.run.game
    text = game_text(resolve_factory(game.name, game.params), seed=seed)
    policy = build_policy(cfg.run.model, corpus=text.texts, actions=text.actions, seed=seed)
    return freeze(policy, member_folder(out, 0), "psro:00", seed=seed, game=game.played())


def _reload_lm_member(cfg: PsroConfig, out: Path) -> Policy:
    return _reload_frozen(
        member_folder(out, 0), "psro:00", seed=cfg.run.train.seed, device=cfg.run.model.device
    )


INITIAL_MEMBERS: dict[str, InitialMember] = {
    "lm": InitialMember(build=_lm_member, reload=_reload_lm_member),
    "random": InitialMember(build=_random_member, reload=_random_member),
}


def initial_member(cfg: PsroConfig, out: Path) -> Policy:
    """The first member, as ``cfg.initial`` names it."""
    return INITIAL_MEMBERS[cfg.initial].build(cfg, out)


# --- the outer state ---------------------------------------------------------------


@dataclass
class _Outer:
    """What the PSRO loop holds between iterations: the population, its meta-game and
    what each iteration measured. Saved after every iteration (``save_outer``)."""

    members: list[Policy]
    payoffs: tuple[np.ndarray, np.ndarray] | None
    steps: list[PsroStep]


def save_outer(out: Path, outer: _Outer) -> None:
    """The population's ids and sampling generators, the meta-game and the steps, in
    renames (``atomic_dir``): a kill leaves the previous iteration's state whole."""
    tree = {
        "members": [m.policy_id for m in outer.members],
        "samplers": {m.policy_id: m.sampler_state() for m in outer.members},
        "payoffs": list(outer.payoffs) if outer.payoffs is not None else None,
        "steps": [asdict(s) for s in outer.steps],
    }
    with atomic.atomic_dir(out / STATE_DIR) as tmp:
        save_tree(tree, tmp, PSRO_STATE, records={})


def load_outer(cfg: PsroConfig, out: Path) -> _Outer:
    """The state ``save_outer`` wrote, its members reloaded from their folders."""
    atomic.recover_dir(out / STATE_DIR)  # a state a kill cut off while replacing it
    tree = read_state(out, PSRO_STATE, ("members", "samplers", "payoffs", "steps"))
    source = out / STATE_DIR / f"{PSRO_STATE}.json"
    with restoring(source):
        members = [_reload_member(cfg, out, i) for i in range(len(tree["members"]))]
        if [m.policy_id for m in members] != list(tree["members"]):
            raise StateError(f"{source} lists members {tree['members']}, which {out} lacks")
        for m in members:
            m.load_sampler_state(tree["samplers"][m.policy_id])
        steps = [_step(d) for d in tree["steps"]]
        payoffs = tree["payoffs"]
    return _Outer(members, tuple(np.asarray(p) for p in payoffs) if payoffs else None, steps)


def _step(d: dict) -> PsroStep:
    marginals = tuple(tuple(float(x) for x in m) for m in d["marginals"])
    gaps = {key: tuple(float(x) for x in d.get(key, ())) for key in ("cce_gaps", "ce_gaps")}
    return PsroStep(**{**d, "marginals": marginals, **gaps})


def _reload_member(cfg: PsroConfig, out: Path, index: int) -> Policy:
    """Member ``index`` as it joined: the first member as ``cfg.initial`` makes it
    again, an exact oracle's table, or a frozen LM reloaded from its folder with the
    seed ``freeze`` gave it."""
    if index == 0:
        return INITIAL_MEMBERS[cfg.initial].reload(cfg, out)
    name, folder = f"psro:{index:02d}", member_folder(out, index)
    if (folder / "table.json").is_file():
        return TablePolicy(json.loads((folder / "table.json").read_text()), policy_id=name)
    return _reload_frozen(
        folder, name, seed=cfg.run.train.seed + index, device=cfg.run.model.device
    )


def _reload_frozen(folder: Path, name: str, *, seed: int, device: str) -> Policy:
    # As ``freeze`` made it: in the dtype it was saved in (the learner's) on the
    # run's device.
    frozen = load_policy(folder, seed=seed, device=device)
    frozen.model.requires_grad_(False)
    frozen.policy_id = name
    return frozen


# --- the loop ----------------------------------------------------------------------


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
        atomic.write_text(out / "psro.yaml", _settings_yaml(cfg))
        (out / "psro.jsonl").write_text("")
        outer = _Outer([initial_member(cfg, out)], None, [])
        save_outer(out, outer)  # a run stopped during its first response resumes too
    opening = Opening(out, "psro.jsonl", len(outer.steps), cfg.model_dump(mode="json"))
    loggers = open_loggers(cfg.run.train.loggers, opening)
    try:
        return _outer_loop(cfg, out, outer, game, loggers, progress, stop_after)
    finally:
        loggers.close()


def _outer_loop(
    cfg: PsroConfig,
    out: Path,
    outer: _Outer,
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
        save_outer(out, _Outer(members, payoffs, steps))
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


def _settings_yaml(cfg: PsroConfig) -> str:
    """The outer loop's settings (``psro.yaml``); the trainer's are in ``config.yaml``."""
    return yaml.safe_dump(cfg.model_dump(mode="json", exclude={"run"}), sort_keys=False)


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
