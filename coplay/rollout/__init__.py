"""Batched multi-game rollout."""

from coplay.rollout.engine import play_episodes
from coplay.rollout.invalid import InvalidActionConfig, forfeit_returns

__all__ = ["InvalidActionConfig", "forfeit_returns", "play_episodes"]
