"""Game registry: listing, building, and errors that say what is known."""

import pytest

from coplay.envs import registry
from coplay.envs.registry import (
    GameInfo,
    UnknownGameError,
    game_metrics,
    list_games,
    make_env,
    register_game,
    same_game,
)
from coplay.types import Env, GameKind


def test_list_games_has_the_hand_rendered_games():
    games = {g.name: g for g in list_games()}
    assert {"kuhn_poker", "leduc_poker", "tic_tac_toe"} <= set(games)
    assert games["kuhn_poker"] == GameInfo(
        "kuhn_poker", games["kuhn_poker"].description, 2, GameKind.ZERO_SUM
    )
    assert all(g.description for g in games.values())


def test_unknown_game_message_lists_known_names_in_one_line():
    with pytest.raises(UnknownGameError) as err:
        make_env("foo")
    msg = str(err.value)
    assert msg.startswith("unknown game 'foo'; known games: kuhn_poker, leduc_poker, tic_tac_toe")
    assert "\n" not in msg
    assert all(g.name in msg for g in list_games())
    assert "(or any OpenSpiel game as 'openspiel:<name>')" in msg
    assert isinstance(err.value, ValueError)


def test_unknown_prefix_and_unknown_openspiel_game():
    with pytest.raises(UnknownGameError, match="known games"):
        make_env("nope:foo")
    with pytest.raises(UnknownGameError, match="unknown OpenSpiel game 'nope'"):
        make_env("openspiel:nope")


def test_openspiel_family_builds_any_game():
    env = make_env("openspiel:liars_dice")
    assert isinstance(env, Env)
    assert env.spec.name == "openspiel:liars_dice"
    assert env.spec.openspiel_name == "liars_dice"


def test_params_pass_through_and_bad_params_are_clear():
    assert make_env("kuhn_poker", players=3).spec.num_players == 3
    with pytest.raises(ValueError, match="unknown parameter.*foo.*available: players"):
        make_env("kuhn_poker", foo=1)
    with pytest.raises(ValueError, match="bad parameters for game 'kuhn_poker'"):
        make_env("kuhn_poker", players="three")


def test_register_game(monkeypatch):
    monkeypatch.setattr(registry, "_GAMES", dict(registry._GAMES))
    register_game("tiny_ttt", lambda: make_env("tic_tac_toe"), "a test entry")
    assert make_env("tiny_ttt").spec.openspiel_name == "tic_tac_toe"
    assert "tiny_ttt" in [g.name for g in list_games()]
    with pytest.raises(ValueError, match="must not contain ':'"):
        register_game("a:b", lambda: make_env("tic_tac_toe"), "bad")


def test_games_can_register_their_own_episode_metrics():
    assert game_metrics("kuhn_poker") is None
    assert game_metrics("no_such_game") is None
    from coplay.policies.scripted import RandomPolicy
    from coplay.rollout.engine import play_episodes

    bot = RandomPolicy(seed=0)
    eps = play_episodes(lambda: make_env("signalling"), [[bot, bot]] * 40, range(40))
    scores = game_metrics("signalling")(eps)
    assert scores["success_rate"] == pytest.approx(sum(e.returns[0] > 0 for e in eps) / 40)


def test_one_game_under_its_registered_and_its_family_name():
    assert same_game("openspiel:kuhn_poker", "kuhn_poker")
    assert same_game("tic_tac_toe", "openspiel:tic_tac_toe")
    assert not same_game("kuhn_poker", "openspiel:leduc_poker")
    assert not same_game("openspiel:liars_dice", "liars_dice")  # no such registered game
    assert not same_game("kuhn_poker", "tests.nowhere:kuhn_poker")  # not imported to compare
