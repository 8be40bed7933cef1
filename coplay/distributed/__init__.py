"""Episodes from Ray workers: the one package that imports ``ray``.

``episode_source`` picks the run's ``EpisodeSource`` from its config: the batched
engine of this process (``rollout.workers: 0``, the default) or ``RaySource``, whose
rollout workers are Ray actors (``rollout.workers: N``). Only the modules that need
Ray import it, when they are used, so the rest of coplay imports without it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from coplay.distributed.config import RayConfig, require_ray
from coplay.rollout.source import EpisodeSource, LocalSource

if TYPE_CHECKING:
    from coplay.envs.gameref import GameRef
    from coplay.rollout.invalid import InvalidActionConfig

__all__ = ["RayConfig", "episode_source", "require_ray"]


def episode_source(
    game: GameRef,
    *,
    workers: int,
    max_staleness: int,
    ray: RayConfig,
    invalid: InvalidActionConfig | None,
    max_turns: int | None,
) -> EpisodeSource:
    """The local engine for ``workers == 0``, else ``workers`` Ray rollout workers."""
    if workers == 0:
        return LocalSource(game, invalid=invalid, max_turns=max_turns)
    require_ray(f"rollout.workers={workers}")
    from coplay.distributed.source import RaySource

    return RaySource(
        game,
        workers=workers,
        max_staleness=max_staleness,
        ray_config=ray,
        invalid=invalid,
        max_turns=max_turns,
    )
