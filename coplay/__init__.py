"""coplay: multi-agent, multi-turn RL for language-model agents, measured exactly.

The public API is flat: build a config, train, load a policy, evaluate it.
"""

from coplay.envs.registry import list_games, make_env
from coplay.eval.exact import exploitability, to_openspiel_policy
from coplay.eval.matches import play_match
from coplay.models.loading import load_policy, save_policy
from coplay.rollout.engine import play_episodes
from coplay.train.config import RunConfig
from coplay.train.settings import build_config
from coplay.train.trainer import train
from coplay.types import Decision, Env, Episode, GameSpec, Observation, Policy, Trajectory, Turn

__all__ = [
    "Decision",
    "Env",
    "Episode",
    "GameSpec",
    "Observation",
    "Policy",
    "RunConfig",
    "Trajectory",
    "Turn",
    "build_config",
    "exploitability",
    "list_games",
    "load_policy",
    "make_env",
    "play_episodes",
    "play_match",
    "save_policy",
    "to_openspiel_policy",
    "train",
]
__version__ = "0.1.0"
