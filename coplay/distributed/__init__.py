"""Episodes from Ray workers: the one package that imports ``ray``.

``episode_source`` picks the run's ``EpisodeSource`` from its config: the batched
engine of this process (``rollout.workers: 0``, the default) or ``RaySource``, whose
rollout workers are Ray actors (``rollout.workers: N``). Only the modules that need
Ray import it, when they are used, so the rest of coplay imports without it.

``evaluation_source`` does the same for evaluation (cross-play, tournaments, PSRO's
sampled meta-game): None, the in-process default, or Ray workers for the duration of
one evaluation.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

from coplay.distributed.config import RayConfig, require_ray
from coplay.rollout.source import EpisodeSource, LocalSource

if TYPE_CHECKING:
    from coplay.envs.gameref import GameRef
    from coplay.rollout.invalid import InvalidActionConfig

__all__ = ["RayConfig", "episode_source", "evaluation_source", "require_ray"]


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


@contextmanager
def evaluation_source(
    game: GameRef,
    *,
    workers: int,
    ray: RayConfig,
    invalid: InvalidActionConfig | None = None,
    asked_by: str = "rollout.workers",
    max_turns: int | None = None,
) -> Iterator[EpisodeSource | None]:
    """None for ``workers == 0`` (evaluation plays in this process, as it always has),
    else a ``RaySource`` on ``workers`` new Ray workers, stopped on exit so that a
    training run that follows (a PSRO response) finds their CPUs free. ``asked_by``
    names the setting in the error when Ray is missing; the workers play ``invalid``'s
    treatment and truncate at ``max_turns``, as the evaluation asks."""
    if workers == 0:
        yield None
        return
    require_ray(f"{asked_by}={workers}")
    from coplay.distributed.source import RaySource

    source = RaySource(game, workers=workers, ray_config=ray, invalid=invalid, max_turns=max_turns)
    try:
        yield source
    finally:
        source.close()
