"""Who sits across the table: scripted bots by name or frozen checkpoints by path."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from coplay.models.loading import load_policy
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
        policy = load_policy(spec, seed=seed)
        policy.model.requires_grad_(False)
        policy.policy_id = f"frozen:{Path(spec).name}"
        return policy
    raise ValueError(
        f"unknown opponent {spec!r}: use one of {', '.join(SCRIPTED_NAMES)} or a checkpoint path"
    )
