"""Text games: the registry, the OpenSpiel adapter, renderers and action parsing."""

from coplay.envs.actions import bracket, parse_action
from coplay.envs.gameref import GameRef
from coplay.envs.openspiel_env import (
    OpenSpielEnv,
    game_spec,
    info_key,
    observation_for_state,
)
from coplay.envs.openspiel_games import UnknownGameError
from coplay.envs.registry import (
    GameInfo,
    list_games,
    make_env,
    register_family,
    register_game,
)
from coplay.envs.renderers import RENDERERS, Rendered, Renderer, render, renderer_for

__all__ = [
    "RENDERERS",
    "GameInfo",
    "GameRef",
    "OpenSpielEnv",
    "Rendered",
    "Renderer",
    "UnknownGameError",
    "bracket",
    "game_spec",
    "info_key",
    "list_games",
    "make_env",
    "observation_for_state",
    "parse_action",
    "register_family",
    "register_game",
    "render",
    "renderer_for",
]
