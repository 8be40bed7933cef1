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
     per game, the opponent of the learner's seat from the meta-strategy;
  4. the response is saved and reloaded as a frozen member (never trained again).

Logged per iteration (``psro.jsonl``): meta-game size, the exploitability of the
meta-strategy's mixture (exact games; ``coplay.eval.mixture``) and wall time.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import numpy as np
import pyspiel
from open_spiel.python import policy as os_policy
from open_spiel.python.algorithms import expected_game_score
from pydantic import BaseModel, ConfigDict, Field, model_validator

from coplay.envs.registry import make_env
from coplay.eval.crossplay import cross_play
from coplay.eval.exact import to_openspiel_policy
from coplay.eval.metasolvers import META_SOLVERS, MetaSolution, solve_meta_game
from coplay.eval.mixture import tables_exploitability
from coplay.models.loading import build_policy, load_policy, save_policy
from coplay.policies.scripted import RandomPolicy
from coplay.report import sinks
from coplay.train.config import RunConfig
from coplay.train.opponents import OpponentPool
from coplay.train.trainer import collect, final_policy, game_text, learn, setup
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

    @model_validator(mode="after")
    def _check(self) -> PsroConfig:
        if self.meta_solver not in META_SOLVERS:
            raise ValueError(
                f"unknown meta_solver {self.meta_solver!r}; available: {', '.join(META_SOLVERS)}"
            )
        players = make_env(self.run.game.name, **self.run.game.params).spec.num_players
        if players != 2:
            raise ValueError(
                f"PSRO here supports 2-player games; {self.run.game.name!r} has {players}"
            )
        return self


@dataclass(frozen=True)
class PsroStep:
    """What one PSRO iteration measured (before its best response was added)."""

    iteration: int
    members: int
    exploitability: float
    """Of the meta-strategy's mixture; NaN for games without exact evaluation."""
    nash_conv: float
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
    learner sits in seat s. The trainer draws one opponent per group of games and
    seats the learner in seat ``g % n`` of group g (``trainer.seatings``), so group g's
    opponent is drawn from ``by_seat[g % n]``.
    """

    by_seat: tuple[np.ndarray, ...] = field(default_factory=tuple)

    def sample(self, rng: np.random.Generator, n: int) -> list[Policy | None]:
        k = len(self.by_seat)
        if not self.members or k == 0:
            raise ValueError("a seated pool needs members and one distribution per seat")
        picks = [rng.choice(len(self.members), p=self.by_seat[i % k]) for i in range(n)]
        return [self.members[i] for i in picks]


def opponent_distributions(
    solution: MetaSolution, *, conditional: bool
) -> tuple[np.ndarray, np.ndarray]:
    """Distribution over members of the opponent when the learner sits in seat 0 and 1.

    PSRO and JPSRO(CCE): the other player's marginal. JPSRO(CE) (``conditional`` with a
    correlated joint): the other player's distribution conditioned on the learner's
    seat being recommended its most likely strategy. JPSRO trains one response per
    recommended strategy; training one keeps PSRO's cost of one response per iteration.
    """
    if solution.joint.ndim != 2:
        raise ValueError(f"opponent distributions need a 2-player joint, got {solution.joint.ndim}")
    m0, m1 = solution.marginals
    if not (conditional and solution.correlated):
        return m1, m0
    row = solution.joint[int(np.argmax(m0))]
    col = solution.joint[:, int(np.argmax(m1))]
    return row / row.sum(), col / col.sum()


# --- meta-games --------------------------------------------------------------------


def exact_payoffs(
    game: pyspiel.Game,
    tables: Sequence[os_policy.Policy],
    previous: tuple[np.ndarray, np.ndarray] | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Exact 2-player meta-game of ``tables``; entries of ``previous`` (the meta-game of
    the first members) are reused and only new rows and columns are computed."""
    k = len(tables)
    done = 0 if previous is None else previous[0].shape[0]
    out = np.zeros((2, k, k))
    if previous is not None:
        out[:, :done, :done] = previous
    root = game.new_initial_state()
    for i in range(k):
        for j in range(k):
            if i >= done or j >= done:
                out[:, i, j] = expected_game_score.policy_value(root, [tables[i], tables[j]])
    return out[0], out[1]


def sampled_payoffs(
    members: Sequence[Policy], cfg: RunConfig, *, episodes: int, seed: int
) -> tuple[np.ndarray, np.ndarray]:
    """Cross-play meta-game (mean returns, seats alternating) of any 2-player game."""
    res = cross_play(
        cfg.game.name,
        {m.policy_id: m for m in members},
        episodes=episodes,
        seed=seed,
        params=cfg.game.params,
        invalid=cfg.game.invalid,
    )
    return res.meta_game


def exact_game(cfg: RunConfig) -> pyspiel.Game | None:
    """The OpenSpiel game when exact evaluation applies (imperfect-information
    OpenSpiel games, as the trainer decides), else None."""
    env = make_env(cfg.game.name, **cfg.game.params)
    if env.spec.openspiel_name is None or env.spec.perfect_information:
        return None
    return getattr(env, "game", None)


def solve(name: str, payoffs: tuple[np.ndarray, np.ndarray]) -> MetaSolution:
    """``solve_meta_game``, with a one-member population answered directly: some (C)CE
    programs have no deviation constraints to build when nobody can deviate."""
    if payoffs[0].shape == (1, 1):
        one = np.ones(1)
        return MetaSolution(marginals=(one, one), joint=np.ones((1, 1)), correlated=False)
    return solve_meta_game(name, list(payoffs))


# --- members -----------------------------------------------------------------------


def freeze(policy: Policy, folder: Path, policy_id: str, *, seed: int = 0) -> Policy:
    """Save ``policy`` to ``folder`` and reload it as a frozen copy named ``policy_id``.

    The copy shares nothing with the original: later training cannot change it.
    """
    save_policy(policy, folder)
    frozen = load_policy(folder, seed=seed)
    frozen.model.requires_grad_(False)
    frozen.policy_id = policy_id
    return frozen


def initial_member(cfg: PsroConfig, out: Path) -> Policy:
    """The first member: the untrained tiny/local LM of ``cfg.run``, or a random bot."""
    seed = cfg.run.train.seed
    if cfg.initial == "random":
        return RandomPolicy(seed=seed, policy_id="psro:00")
    game = cfg.run.game
    text = game_text(lambda: make_env(game.name, **game.params), seed=seed)
    policy = build_policy(cfg.run.model, corpus=text.texts, actions=text.actions, seed=seed)
    return freeze(policy, out / "members" / "00", "psro:00", seed=seed)


def response_config(cfg: PsroConfig, index: int, warm: Path | None) -> RunConfig:
    """Trainer config of best response ``index``: its own seed, warm-started if asked."""
    run = cfg.run
    update: dict = {"train": run.train.model_copy(update={"seed": run.train.seed + index})}
    if warm is not None:
        update["model"] = run.model.model_copy(update={"path": str(warm)})
    return run.model_copy(update=update)


def train_response(cfg: RunConfig, out: Path, pool: OpponentPool) -> Policy:
    """Run the trainer's collect -> learn loop against ``pool``; return what the trainer
    would save (``train.final_policy``: the learner, or its magnet)."""
    run = setup(cfg, out)
    run.pool = pool
    for it in range(1, cfg.train.iterations + 1):
        episodes, metrics = collect(run, it)
        metrics |= learn(run, episodes)
        sinks.append_metrics(out / "metrics.jsonl", it, metrics)
    return final_policy(run)


# --- the loop ----------------------------------------------------------------------


def run_psro(
    cfg: PsroConfig, out: str | Path, *, progress: Callable[[PsroStep], None] | None = None
) -> PsroResult:
    """Grow a population by best responses to its meta-strategy; see the module docstring."""
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
        solution = solve(cfg.meta_solver, payoffs)
        res = tables_exploitability(game, tables, solution.marginals) if game else None
        meta_s = time.perf_counter() - t0
        train_s = 0.0
        if k < cfg.iterations:
            t1 = time.perf_counter()
            members.append(_respond(cfg, out, k + 1, members, solution))
            train_s = time.perf_counter() - t1
        step = PsroStep(
            iteration=k,
            members=len(solution.marginals[0]),
            exploitability=res.exploitability if res else float("nan"),
            nash_conv=res.nash_conv if res else float("nan"),
            marginals=tuple(tuple(float(x) for x in m) for m in solution.marginals),
            meta_s=meta_s,
            train_s=train_s,
            elapsed_s=time.perf_counter() - start,
        )
        steps.append(step)
        sinks.append_metrics(out / "psro.jsonl", k, _step_metrics(step))
        if progress:
            progress(step)
    result = PsroResult(tuple(m.policy_id for m in members), payoffs, solution, tuple(steps))
    sinks.write_summary(out / "summary.json", _summary(result))
    return result


def _respond(
    cfg: PsroConfig, out: Path, index: int, members: list[Policy], solution: MetaSolution
) -> Policy:
    """Train, freeze and name best response ``index`` against the meta-strategy."""
    by_seat = opponent_distributions(solution, conditional=cfg.meta_solver in CONDITIONAL_SOLVERS)
    prev = out / "members" / f"{index - 1:02d}"
    warm = prev if cfg.warm_start and (prev / "config.json").is_file() else None
    run_cfg = response_config(cfg, index, warm)
    pool = SeatedPool(members=list(members), by_seat=by_seat)
    learner = train_response(run_cfg, out / "responses" / f"{index:02d}", pool)
    folder = out / "members" / f"{index:02d}"
    return freeze(learner, folder, f"psro:{index:02d}", seed=run_cfg.train.seed)


def _step_metrics(step: PsroStep) -> dict[str, float]:
    return {
        "psro/members": step.members,
        "psro/exploitability": step.exploitability,
        "psro/nash_conv": step.nash_conv,
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
