"""The run config's ``train`` section: how long a run goes, whom the learner plays, and
how it is evaluated, saved and logged.

``check_seat_weights`` is shared by ``train.opponent`` and the league's and PSRO's
configs.
"""

from __future__ import annotations

import math
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from coplay.report.loggers import check_logger
from coplay.types import MAX_SEED


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)


class OpponentConfig(_Strict):
    name: str
    """A scripted bot (random, nash, perfect, optimal) or a checkpoint path."""
    seat_weights: list[float] | None = None
    """Share of the learner's game groups per seat, e.g. [1, 3]: a quarter of the
    groups in seat 0, three quarters in seat 1 (a seat it has already mastered teaches
    nothing: every return there is the same). None rotates seats evenly. One
    non-negative weight per seat, not all 0."""

    @model_validator(mode="before")
    @classmethod
    def _from_name(cls, data: Any) -> Any:
        # ``train.opponent=random`` names the opponent alone: the common case.
        return {"name": data} if isinstance(data, str) else data

    @model_validator(mode="after")
    def _seat_weights_valid(self) -> OpponentConfig:
        check_seat_weights(self.seat_weights)
        return self


def check_seat_weights(weights: list[float] | None) -> None:
    """Seat weights are shares: non-negative and not all 0 (their count is checked
    against the game's seats when it is built, ``trainer.check_weights``). Shared by
    ``train.opponent`` and the league's and PSRO's configs."""
    if weights is None:
        return
    # NaN passes every comparison as False: it would seat every group in seat 0.
    if not all(map(math.isfinite, weights)):
        raise ValueError(f"seat_weights must be finite numbers, got {weights}")
    if any(x < 0 for x in weights) or sum(weights) <= 0:
        raise ValueError(f"seat_weights must be >= 0 and not all 0, got {weights}")


class TrainConfig(_Strict):
    iterations: int = Field(100, gt=0)
    """Training iterations (collect, learn, maybe evaluate)."""
    seed: int = Field(0, ge=0, le=MAX_SEED)
    """Seeds the model initialisation, game deals and sampling (episode seeds are
    derived from it by multiplying, within the generators' integers)."""
    opponent: OpponentConfig | None = None
    """None (unset) for shared-weight self-play; else the fixed opponent the learner
    trains against: a name (``train.opponent=perfect``) or a section with seat weights
    (``{name: perfect, seat_weights: [1, 3]}``)."""
    eval_every: int = Field(10, gt=0)
    """Iterations between evaluations (exploitability where exact, matches otherwise)."""
    eval_episodes: int = Field(200, gt=0)
    """Games per evaluation opponent."""
    eval_opponents: list[str] = Field(default_factory=lambda: ["random"])
    """Opponents for evaluation matches."""
    save_every: int = Field(50, ge=0)
    """Iterations between saved states (for --resume) and intermediate checkpoints;
    0 saves only at the end."""
    exact: bool | Literal["auto"] = "auto"
    """Exact exploitability at each evaluation: 'auto' for imperfect-information
    OpenSpiel games whose tree has at most 100,000 histories (Kuhn, Leduc, small
    bargaining; not Liar's dice), true (or on) for any such game however large,
    false (or off) never."""
    exact_matches: bool | Literal["auto"] = "auto"
    """Exact win / loss probabilities and mean return against evaluation opponents, by
    walking the game tree with both sides' action probabilities
    (coplay.eval.exact_match): 'auto' against the optimal bots (nash, perfect) where
    exact exploitability is on and in perfect-information OpenSpiel games of at most
    1,000,000 histories (tic-tac-toe); true (or on) against every opponent that
    reports probabilities (scripted bots, checkpoints) in any OpenSpiel game; false
    (or off) never. Logged next to the sampled match as eval/<opponent>/exact_loss_seat<i>
    (and greedy_loss_seat<i>, the argmax policy, in perfect-information games)."""
    transcripts: int = Field(4, ge=0)
    """Sample episodes written as JSONL transcripts at each evaluation."""
    eval_samples: int = Field(32, gt=0)
    """Text mode: answers sampled per information state to estimate the policy's action
    distribution for exploitability and exact matches (coplay.eval.sampled), logged
    under *_sampled keys with a bootstrap interval; choice mode is evaluated exactly."""
    eval_bootstrap: int = Field(100, ge=0)
    """Text mode: bootstrap replicates for the interval of each sampled estimate (each
    replicate repeats the exact computation on resampled answers)."""
    loggers: list[str] = Field(default_factory=lambda: ["jsonl"])
    """Metric sinks (coplay.report.loggers): jsonl (metrics.jsonl, always on), tensorboard
    (event files in <run>/tensorboard), wandb (an offline run in <run>/wandb); each
    receives the same namespaced keys. tensorboard and wandb are optional extras."""
    report: bool = False
    """Write the HTML report (coplay report) to <run>/report.html at each evaluation and
    at the end; `coplay train --report` sets it."""

    @field_validator("loggers")
    @classmethod
    def _loggers_installed(cls, names: list[str]) -> list[str]:
        return [check_logger(n) for n in names]
