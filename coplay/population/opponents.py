"""Who sits across the table: scripted bots by name or frozen checkpoints by path."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from coplay.models.checkpoints import find_policy
from coplay.policies.scripted import make_scripted
from coplay.types import Policy

SCRIPTED_NAMES = ("random", "nash", "perfect", "optimal")


def build_opponent(
    spec: str, game_name: str, *, seed: int = 0, params: Mapping[str, object] | None = None
) -> Policy:
    """A scripted policy (``random``, ``nash``, ``perfect``, ``optimal``) or a checkpoint.

    A checkpoint opponent is frozen: it is loaded once and never trained. The solved
    players know only the games' standard two-player forms, so game parameters that
    change the game rule them out here rather than mid-game.
    """
    if spec in SCRIPTED_NAMES:
        if spec != "random" and params:
            raise ValueError(
                f"opponent {spec!r} is solved for the standard {game_name!r} only; "
                f"the game parameters {dict(params)} change it (use 'random' or a checkpoint)"
            )
        return make_scripted(spec, game_name, seed)
    if Path(spec).exists():
        policy = find_policy(spec).load(seed=seed)
        policy.model.requires_grad_(False)
        policy.policy_id = f"frozen:{Path(spec).name}"
        return policy
    raise ValueError(
        f"unknown opponent {spec!r}: use one of {', '.join(SCRIPTED_NAMES)} or a checkpoint path"
    )


@dataclass
class OpponentPool:
    """Opponents drawn per game: a league of snapshots, a PSRO meta-strategy, bots.

    Each game draws one member with probability ``probs`` (uniform when None); the
    drawn member fills every seat but the learner's. With probability ``self_play`` a
    game is plain shared-weight self-play instead. Callers (league, PSRO) replace
    ``members`` and ``probs`` between iterations; a member is never modified here.
    """

    members: list[Policy] = field(default_factory=list)
    probs: Sequence[float] | None = None
    self_play: float = 0.0

    def __post_init__(self) -> None:
        if not 0.0 <= self.self_play <= 1.0:
            raise ValueError(f"self_play must be in [0, 1], got {self.self_play}")

    def distribution(self) -> np.ndarray:
        """Probabilities of the members (validated, summing to 1)."""
        if not self.members:
            raise ValueError("the opponent pool is empty")
        if self.probs is None:
            return np.full(len(self.members), 1.0 / len(self.members))
        p = np.asarray(self.probs, dtype=np.float64)
        if p.shape != (len(self.members),) or (p < 0).any() or not np.isfinite(p).all():
            raise ValueError(
                f"probs must be {len(self.members)} non-negative numbers, got {list(self.probs)}"
            )
        if p.sum() <= 0:
            raise ValueError("probs must not all be zero")
        return p / p.sum()

    def sample(self, rng: np.random.Generator, seats: Sequence[int]) -> list[Policy | None]:
        """One opponent per group, whose learner sits in ``seats[g]``; None marks a
        self-play group."""
        n = len(seats)
        if self.self_play >= 1.0 or not self.members:
            if not self.members and self.self_play < 1.0:
                raise ValueError("the opponent pool is empty")
            return [None] * n
        p = self.distribution()
        picks = rng.choice(len(self.members), size=n, p=p)
        selfplay = rng.random(n) < self.self_play
        return [None if sp else self.members[i] for i, sp in zip(picks, selfplay, strict=True)]
