"""PSRO and JPSRO with a language-model best-response oracle (two-player games).

Policy-Space Response Oracles (Lanctot et al. 2017, "A Unified Game-Theoretic Approach
to Multiagent Reinforcement Learning"); JPSRO (Marris et al. 2021) when the meta-solver
returns a correlated joint distribution. One population serves both seats: every
member is a frozen policy that can sit in either. Each PSRO iteration:

  1. meta-game: ``payoffs[p][i, j]`` = player p's expected return when member i sits
     in seat 0 and member j in seat 1 (OpenSpiel's layout). Exact for games OpenSpiel
     can evaluate (each member's tabular policy, ``expected_game_score.policy_value``),
     else sampled cross-play;
  2. meta-strategy: a solver from ``coplay.eval.metasolvers`` (Nash by default);
  3. best response: the normal trainer (collect -> learn) with ``run.pool`` drawing,
     per game, the opponent of the learner's seat from the meta-strategy. With
     ``restarts`` > 1 several responses (different seeds) are trained and the one with
     the highest value against the meta-strategy joins: an RL oracle is a noisy
     optimiser, and one that collapses early to a deterministic policy never recovers;
  4. the response is saved and reloaded as a frozen member (never trained again).

``oracle: exact`` replaces step 3 by OpenSpiel's exact best response to the mixture
(games with exact evaluation): the control that shows how far PSRO gets when its
oracle is perfect, so a shortfall of the LM oracle can be told from one of PSRO.

Logged per iteration (``psro.jsonl``): meta-game size, the exploitability of the
meta-strategy's mixture (exact games; ``coplay.eval.mixture``), the value of the new
response against the meta-strategy next to the exact best response's value (their
difference is the oracle's shortfall) and wall time.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import numpy as np
import pyspiel
from open_spiel.python import policy as os_policy
from pydantic import BaseModel, ConfigDict, Field, model_validator

from coplay.envs.probe import names_user_factory, resolve_factory
from coplay.eval.exact import to_openspiel_policy
from coplay.eval.metasolvers import (
    META_SOLVERS,
    MetaSolution,
)
from coplay.eval.mixture import tables_exploitability
from coplay.models.loading import build_policy
from coplay.policies.scripted import RandomPolicy, TablePolicy
from coplay.population.metagame import (
    exact_best_response,
    exact_game,
    exact_payoffs,
    freeze,
    meta_opponent,
    opponent_distributions,
    sampled_payoffs,
    solve,
    value_against,
)
from coplay.population.opponents import OpponentPool
from coplay.report import atomic, sinks
from coplay.train.config import RunConfig
from coplay.train.evaluate import final_policy
from coplay.train.hooks import Log
from coplay.train.loop import run_loop
from coplay.train.parts.seating import FromPool
from coplay.train.trainer import check_weights, game_text, setup
from coplay.types import Policy

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
    initial: Literal["lm", "random"] = "lm"
    """First member: the untrained language model, or a uniform random bot."""
    warm_start: bool = True
    """Start each best response from the previous one's weights (saves compute)."""
    crossplay_episodes: int = Field(200, gt=0)
    """Games per pairing for the sampled meta-game of games without exact evaluation."""
    oracle: Literal["lm", "exact"] = "lm"
    """Best-response oracle: the language-model trainer, or OpenSpiel's exact best
    response to the mixture (games with exact evaluation; a control for the LM oracle)."""
    seat_weights: list[float] | None = None
    """Share of each response's game groups per seat (see train.opponent.seat_weights);
    each group's opponent is drawn from the meta-strategy of the seat it faces. None
    rotates seats evenly."""
    restarts: int = Field(1, gt=0)
    """LM responses trained per iteration, each with its own seed; the one with the
    highest value against the meta-strategy (exact where the game allows, else sampled
    cross-play) joins the population."""

    @model_validator(mode="after")
    def _check(self) -> PsroConfig:
        if self.meta_solver not in META_SOLVERS:
            raise ValueError(
                f"unknown meta_solver {self.meta_solver!r}; available: {', '.join(META_SOLVERS)}"
            )
        if not names_user_factory(self.run.game.name):
            check_game_fits(self)  # a user's game is imported only when run_psro builds it
        return self


def check_game_fits(cfg: PsroConfig) -> None:
    """Two players, and a game with exact evaluation for the exact oracle."""
    game = cfg.run.game
    players = resolve_factory(game.name, game.params)().spec.num_players
    if players != 2:
        raise ValueError(f"PSRO here supports 2-player games; {game.name!r} has {players}")
    if cfg.oracle == "exact" and exact_game(cfg.run) is None:
        raise ValueError(f"oracle=exact needs a game with exact evaluation; {game.name!r} has none")


@dataclass(frozen=True)
class PsroStep:
    """What one PSRO iteration measured (before its best response was added)."""

    iteration: int
    members: int
    exploitability: float
    """Of the meta-strategy's mixture; NaN for games without exact evaluation."""
    nash_conv: float
    response_value: float
    """The new response's value against the meta-strategy (mean over seats); NaN on
    the last iteration, which trains none."""
    best_value: float
    """The exact best response's value against it (NaN where not exact or none trained)."""
    marginals: tuple[tuple[float, ...], ...]
    meta_s: float
    train_s: float
    elapsed_s: float


@dataclass(frozen=True)
class PsroResult:
    """The final population, its meta-game and solution, and the per-iteration log."""

    members: tuple[str, ...]
    """Member ids; LM members are saved under ``out/members/<index>``."""
    payoffs: tuple[np.ndarray, np.ndarray]
    solution: MetaSolution
    steps: tuple[PsroStep, ...]


# --- seat-aware opponents ----------------------------------------------------------


@dataclass
class SeatedPool(OpponentPool):
    """An opponent pool whose distribution depends on the learner's seat.

    ``by_seat[s]`` is the distribution over ``members`` of the opponent when the
    learner sits in seat s; the seating decides the seat first (evenly or by seat
    weights) and draws the opponent for it.
    """

    by_seat: tuple[np.ndarray, ...] = field(default_factory=tuple)

    def sample(self, rng: np.random.Generator, seats: Sequence[int]) -> list[Policy | None]:
        if not self.members or not self.by_seat:
            raise ValueError("a seated pool needs members and one distribution per seat")
        picks = [rng.choice(len(self.members), p=self.by_seat[s]) for s in seats]
        return [self.members[i] for i in picks]


# --- members -----------------------------------------------------------------------


def initial_member(cfg: PsroConfig, out: Path) -> Policy:
    """The first member: the untrained tiny/local LM of ``cfg.run``, or a random bot."""
    seed = cfg.run.train.seed
    if cfg.initial == "random":
        return RandomPolicy(seed=seed, policy_id="psro:00")
    game = cfg.run.game
    text = game_text(resolve_factory(game.name, game.params), seed=seed)
    policy = build_policy(cfg.run.model, corpus=text.texts, actions=text.actions, seed=seed)
    return freeze(policy, out / "members" / "00", "psro:00", seed=seed, game=game.played())


def response_config(cfg: PsroConfig, index: int, warm: Path | None, restart: int = 0) -> RunConfig:
    """Trainer config of best response ``index`` (try ``restart``): its own seed,
    warm-started if asked."""
    run = cfg.run
    seed = run.train.seed + index * cfg.restarts + restart
    update: dict = {"train": run.train.model_copy(update={"seed": seed})}
    if warm is not None:
        update["model"] = run.model.model_copy(update={"path": str(warm)})
    return run.model_copy(update=update)


def train_response(
    cfg: RunConfig, out: Path, pool: OpponentPool, seat_weights: Sequence[float] | None = None
) -> Policy:
    """Train a best response against ``pool`` with the training loop; return what the
    trainer would save (``magnet.final``: the learner's magnet, else the learner)."""
    run = setup(cfg, out)
    run.policies.update({m.policy_id: m for m in pool.members})
    weights = check_weights(seat_weights, run.spec)
    run.seating = FromPool(run.trainees[0].name, pool, run.spec.num_players, weights)
    run_loop(run, [Log()], start=0, end=cfg.train.iterations)
    return final_policy(run)


# --- the loop ----------------------------------------------------------------------


def run_psro(
    cfg: PsroConfig, out: str | Path, *, progress: Callable[[PsroStep], None] | None = None
) -> PsroResult:
    """Grow a population by best responses to its meta-strategy; see the module docstring."""
    check_game_fits(cfg)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "psro.jsonl").write_text("")
    game = exact_game(cfg.run)
    members = [initial_member(cfg, out)]
    tables: list[os_policy.Policy] = []
    payoffs = None
    steps: list[PsroStep] = []
    start = time.perf_counter()
    for k in range(cfg.iterations + 1):
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
        res = tables_exploitability(game, tables, solution.marginals) if game else None
        meta_s = time.perf_counter() - t0
        train_s, value, best = 0.0, float("nan"), float("nan")
        if k < cfg.iterations:
            t1 = time.perf_counter()
            member, value, best = _respond(cfg, out, k + 1, members, tables, game, solution)
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
        )
        steps.append(step)
        fallback = {"psro/meta_fallback": meta.level}  # 1: max-welfare CE, 2: uniform
        sinks.append_metrics(out / "psro.jsonl", k, _step_metrics(step) | fallback)
        if progress:
            progress(step)
    result = PsroResult(tuple(m.policy_id for m in members), payoffs, solution, tuple(steps))
    sinks.write_summary(out / "summary.json", _summary(result))
    return result


def _respond(
    cfg: PsroConfig,
    out: Path,
    index: int,
    members: list[Policy],
    tables: list[os_policy.Policy],
    game: pyspiel.Game | None,
    solution: MetaSolution,
) -> tuple[Policy, float, float]:
    """Best response ``index`` to the meta-strategy, frozen and named, with its value
    against the meta-strategy and the exact best response's value (NaN where unknown)."""
    by_seat = opponent_distributions(solution, conditional=cfg.meta_solver in CONDITIONAL_SOLVERS)
    folder = out / "members" / f"{index:02d}"
    opponent = meta_opponent(game, tables, by_seat) if game is not None else None
    table, best = exact_best_response(game, opponent) if opponent is not None else ({}, np.nan)
    if cfg.oracle == "exact":
        folder.mkdir(parents=True, exist_ok=True)
        atomic.write_text(folder / "table.json", json.dumps(table, indent=1, sort_keys=True))
        return TablePolicy(table, policy_id=f"psro:{index:02d}"), best, best
    prev = out / "members" / f"{index - 1:02d}"
    warm = prev if cfg.warm_start and (prev / "config.json").is_file() else None
    pool = SeatedPool(members=list(members), by_seat=by_seat)
    tries, values = [], []
    for r in range(cfg.restarts):
        run_cfg = response_config(cfg, index, warm, restart=r)
        sub = out / "responses" / (f"{index:02d}" if cfg.restarts == 1 else f"{index:02d}-r{r}")
        tries.append(train_response(run_cfg, sub, pool, cfg.seat_weights))
        values.append(_response_value(cfg, tries[-1], members, by_seat, opponent))
        sinks.write_summary(
            sub / "summary.json", {"value": _finite(values[-1]), "best": _finite(best)}
        )
    pick = int(np.nanargmax(values)) if np.isfinite(values).any() else 0
    seed, played = cfg.run.train.seed + index, cfg.run.game.played()
    member = freeze(tries[pick], folder, f"psro:{index:02d}", seed=seed, game=played)
    return member, values[pick], best


def _response_value(
    cfg: PsroConfig,
    response: Policy,
    members: list[Policy],
    by_seat: Sequence[np.ndarray],
    opponent: os_policy.Policy | None,
) -> float:
    """The response's value against the meta-strategy: exact where the game allows;
    else sampled cross-play, measured only when there are restarts to choose from."""
    game = cfg.run.game
    if opponent is not None:
        table = to_openspiel_policy(response, game.name, params=game.params)
        return value_against(opponent.game, table, opponent)
    if cfg.restarts == 1:
        return float("nan")
    payoffs = sampled_payoffs(
        [*members, response], cfg.run, episodes=cfg.crossplay_episodes, seed=0
    )
    k = len(members)
    v0 = float(payoffs[0][k, :k] @ by_seat[0])
    v1 = float(payoffs[1][:k, k] @ by_seat[1])
    return (v0 + v1) / 2


def _step_metrics(step: PsroStep) -> dict[str, float]:
    return {
        "psro/members": step.members,
        "psro/exploitability": step.exploitability,
        "psro/nash_conv": step.nash_conv,
        "psro/response_value": step.response_value,
        "psro/best_response_value": step.best_value,
        "perf/meta_s": step.meta_s,
        "perf/train_s": step.train_s,
        "perf/elapsed_s": step.elapsed_s,
    }


def _finite(x: float) -> float | None:
    return x if np.isfinite(x) else None  # JSON has no NaN


def _summary(result: PsroResult) -> dict:
    last = result.steps[-1]
    return {
        "members": list(result.members),
        "final/exploitability": last.exploitability,
        "final/nash_conv": last.nash_conv,
        "final/marginals": [list(m) for m in last.marginals],
        "exploitability": [_finite(s.exploitability) for s in result.steps],
        "wall_s": last.elapsed_s,
    }
