"""PSRO's best-response oracles (registry ``ORACLES``) and the LM oracle's training.

An oracle answers one ``Target`` of a PSRO iteration (the population, the
meta-strategy's opponent per seat, the seats that recommend what it answers and, in
games with exact evaluation, the mixture and its exact best response) with the member
that joins the population and its value against the meta-strategy. An iteration has
one target, or with JPSRO(CE) one per recommended member (``RECOMMENDATIONS``):

  lm     the training loop (``coplay.train.loop``) with a ``FromPool`` seating over a
         ``SeatedPool``: each game group's opponent is drawn from the meta-strategy of
         the seat the learner takes (seats rotate, or follow ``seat_weights``; only
         the target's recommended seats get game groups). With
         ``restarts`` > 1 several responses (different seeds) are trained and the one
         with the highest value joins: an RL oracle is a noisy optimiser, and one that
         collapses early to a deterministic policy never recovers;
  exact  OpenSpiel's exact best response to the mixture, saved as a table: the control
         that shows how far PSRO gets when its oracle is perfect.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
from open_spiel.python import policy as os_policy

from coplay.eval.exact import to_openspiel_policy
from coplay.policies.scripted import TablePolicy
from coplay.population.metagame import freeze, sampled_payoffs, value_against
from coplay.population.opponents import OpponentPool
from coplay.report import atomic, sinks
from coplay.train.checkpoints import rundir
from coplay.train.checkpoints.state import RUN_STATE, STATE_DIR
from coplay.train.config import RunConfig
from coplay.train.evaluate import final_policy
from coplay.train.parts.seating import FromPool
from coplay.train.trainer import check_weights, drive, setup
from coplay.types import Policy

if TYPE_CHECKING:
    from coplay.population.psro_config import PsroConfig


def member_folder(out: Path, index: int) -> Path:
    return out / "members" / f"{index:02d}"


# --- the LM oracle: seat-aware opponents and training ------------------------------


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
    cfg: RunConfig,
    out: Path,
    pool: OpponentPool,
    seat_weights: Sequence[float] | None = None,
) -> Policy:
    """Train a best response against ``pool`` in the run directory ``out`` with the
    training loop, saving its state like any run; a response whose state ``out``
    already holds (a PSRO run killed during it) continues from there. Returns what the
    trainer would save (``magnet.final``: the learner's magnet, else the learner)."""
    resume = (out / STATE_DIR / f"{RUN_STATE}.json").is_file()
    if resume:
        rundir.check_resume(cfg, out)
    elif rundir.holds_run(out):
        # Killed before its first save: nothing to continue, and this folder is PSRO's
        # own, so the response starts again in it (a new run refuses a folder in use).
        shutil.rmtree(out)
    run = setup(cfg, out, fresh=not resume)
    run.policies.update({m.policy_id: m for m in pool.members})
    weights = check_weights(seat_weights, run.spec)
    run.seating = FromPool(run.trainees[0].name, pool, run.spec.num_players, weights)
    # PSRO judges a response by its value against the meta-strategy, measured after
    # it is trained: no evaluation hook, and no checkpoint but the frozen member.
    drive(
        run,
        evaluate=lambda run: {},
        save=None,
        final=lambda run, folder: None,
        progress=None,
        resume=resume,
        stop_after=None,
    )
    return final_policy(run)


# --- best-response oracles ---------------------------------------------------------


@dataclass(frozen=True)
class Target:
    """What a best-response oracle answers: the meta-strategy of one PSRO iteration."""

    cfg: PsroConfig
    out: Path
    index: int
    """The new member's index; it is saved under ``member_folder(out, index)``."""
    members: Sequence[Policy]
    by_seat: tuple[np.ndarray, ...]
    """The opponent's distribution over ``members`` for each seat of the learner."""
    opponent: os_policy.Policy | None
    """The meta-strategy's mixture as one OpenSpiel policy (exact games, else None)."""
    best_table: dict[str, dict[str, float]]
    """The exact best response to ``opponent`` ({} where not exact)."""
    best: float
    """Its value against the meta-strategy (NaN where not exact)."""
    seats: tuple[int, ...] = (0, 1)
    """The learner's seats that recommend what it answers (``Recommendation.seats``):
    the values are means over them, and the LM oracle trains in them only."""


@dataclass(frozen=True)
class Oracle:
    """A best-response oracle: ``respond`` returns the new member, frozen and named,
    with its value against the meta-strategy (NaN where unknown)."""

    respond: Callable[[Target], tuple[Policy, float]]
    needs_exact: bool = False
    """Reads ``Target.best_table``: only games with exact evaluation."""
    plays_best: bool = False
    """Its member plays ``Target.best_table`` itself, so a table that a member plays
    already would join as a copy: PSRO does not ask for it (``psro._responses``)."""


def exact_oracle(t: Target) -> tuple[Policy, float]:
    """OpenSpiel's exact best response, saved as a table (``table.json``)."""
    folder = member_folder(t.out, t.index)
    folder.mkdir(parents=True, exist_ok=True)
    atomic.write_text(folder / "table.json", json.dumps(t.best_table, indent=1, sort_keys=True))
    return TablePolicy(t.best_table, policy_id=f"psro:{t.index:02d}"), t.best


def lm_oracle(t: Target) -> tuple[Policy, float]:
    """``restarts`` LM responses trained against the meta-strategy; the one with the
    highest value against it joins, frozen."""
    cfg, out, index = t.cfg, t.out, t.index
    prev = member_folder(out, index - 1)
    warm = prev if cfg.warm_start and (prev / "config.json").is_file() else None
    pool = SeatedPool(members=list(t.members), by_seat=t.by_seat)
    weights = recommended_weights(cfg.seat_weights, t.seats)
    tries, values = [], []
    for r in range(cfg.restarts):
        run_cfg = response_config(cfg, index, warm, restart=r)
        sub = out / "responses" / (f"{index:02d}" if cfg.restarts == 1 else f"{index:02d}-r{r}")
        tries.append(train_response(run_cfg, sub, pool, weights))
        values.append(_response_value(cfg, tries[-1], t))
        sinks.write_summary(sub / "summary.json", {"value": values[-1], "best": t.best})
    pick = int(np.nanargmax(values)) if np.isfinite(values).any() else 0
    seed, played = cfg.run.train.seed + index, cfg.run.game.played()
    folder = member_folder(out, index)
    return freeze(tries[pick], folder, f"psro:{index:02d}", seed=seed, game=played), values[pick]


ORACLES: dict[str, Oracle] = {
    "lm": Oracle(lm_oracle),
    "exact": Oracle(exact_oracle, needs_exact=True, plays_best=True),
}


def recommended_weights(
    weights: Sequence[float] | None, seats: Sequence[int], players: int = 2
) -> Sequence[float] | None:
    """The user's seat weights (None: even) with 0 in the seats that recommend nothing
    to answer, where a game group would train against an opponent the meta-strategy
    never pairs with the recommended member. All seats recommended: the user's, as given.

    >>> recommended_weights(None, (1,)), recommended_weights([1.0, 3.0], (0,))
    ([0.0, 1.0], [1.0, 0.0])
    """
    if len(seats) == players:
        return weights
    given = weights if weights is not None else [1.0] * players
    return [float(w) if s in seats else 0.0 for s, w in enumerate(given)]


def _response_value(cfg: PsroConfig, response: Policy, t: Target) -> float:
    """The response's value against the meta-strategy in the target's seats: exact
    where the game allows; else sampled cross-play, measured only when there are
    restarts to choose from."""
    game = cfg.run.game
    if t.opponent is not None:
        table = to_openspiel_policy(response, game.name, params=game.params)
        return value_against(t.opponent.game, table, t.opponent, t.seats)
    if cfg.restarts == 1:
        return float("nan")
    payoffs = sampled_payoffs(
        [*t.members, response], cfg.run, episodes=cfg.crossplay_episodes, seed=0
    )
    k = len(t.members)
    by_seat = (
        float(payoffs[0][k, :k] @ t.by_seat[0]),
        float(payoffs[1][:k, k] @ t.by_seat[1]),
    )
    return sum(by_seat[s] for s in t.seats) / len(t.seats)
