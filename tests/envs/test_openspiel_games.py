"""Loading OpenSpiel games: one-line errors for names and parameters, parameters that
break or crash a game refused once per game, the cache."""

import os
import signal

import numpy as np
import pytest

from coplay.envs import make_env
from coplay.envs.openspiel_games import load_openspiel_game


def test_bad_parameters_are_one_line_without_openspiels_own_print(capfd):

    with pytest.raises(ValueError) as err:
        load_openspiel_game("kuhn_poker", {"players": 99})
    assert str(err.value) == (
        "bad parameters for game 'kuhn_poker': num_players_ <= kGameType.max_num_players "
        "(num_players_ = 99, kGameType.max_num_players = 10)"
    )
    assert "OpenSpiel exception" not in capfd.readouterr().err  # C++ printed it before


@pytest.mark.parametrize(
    ("game", "params", "why"),
    [
        ("goofspiel", {"num_cards": -1}, "the game would have no moves"),
        ("goofspiel", {"num_cards": 0}, "the game would have no moves"),
        ("goofspiel", {"players": 1}, "would have 1 player; OpenSpiel plays it with 2 to 10"),
        ("yacht", {"dice_sides": 0}, "a chance node has no outcomes before the first move"),
        ("catch", {"columns": -1}, "fails before the first move: ValueError: vector::reserve"),
        ("liars_dice", {"numdice": 0}, "fails before the first move: num_dice_rolled_"),
        ("pig", {"winscore": 0}, "the game ends before anyone moves"),
        ("dark_hex", {"num_cols": 1}, "player 1 has no legal move after 6 moves"),
        ("python_liars_poker", {"num_digits": 0}, "ZeroDivisionError: float division by zero"),
        # A probability out of [0, 1] lists a negative one: the dilemma stopped after
        # every round (2.0) or never (-0.5).
        (
            "python_iterated_prisoners_dilemma",
            {"termination_probability": 2.0},
            "a chance node's probabilities [-1.0, 2.0] are no distribution after 1 move",
        ),
        (
            "python_iterated_prisoners_dilemma",
            {"termination_probability": -0.5},
            "a chance node's probabilities [1.5, -0.5] are no distribution after 1 move",
        ),
    ],
)
def test_parameters_that_break_the_game_are_refused_at_load_in_one_line(game, params, why):
    # OpenSpiel loads these, and they failed at the first reset (goofspiel of -1 cards:
    # "vector::reserve") or later in play: inside a run, or as a defect in check-env.
    with pytest.raises(ValueError) as err:
        make_env(f"openspiel:{game}", **params)
    (key, value), message = next(iter(params.items())), str(err.value)
    assert message.startswith(f"bad parameters for game {game!r}, {key}={value} (default ")
    assert why in message and "\n" not in message


@pytest.mark.parametrize("stage_game", ["", "()", "  ", {}])
def test_a_game_valued_parameter_must_name_a_game(stage_game):
    with pytest.raises(
        ValueError, match="^parameter 'stage_game' of game 'repeated_game' must name a game"
    ):
        make_env("openspiel:repeated_game", stage_game=stage_game, num_repetitions=2)


@pytest.mark.parametrize("players", [[2], (2,), None, np.int64(2)])
def test_a_value_openspiel_cannot_take_is_one_line_naming_it(players):
    with pytest.raises(
        ValueError, match="^parameter 'players' of game 'kuhn_poker' must be an int"
    ):
        make_env("kuhn_poker", players=players)


def test_a_game_valued_parameter_may_be_a_string_or_parameters():
    for stage_game in ("matrix_pd", {"name": "matrix_pd"}):
        env = make_env("openspiel:repeated_game", stage_game=stage_game, num_repetitions=2)
        assert env.spec.num_players == 2 and env.spec.simultaneous


def _load_in_child(game: str, params: dict) -> str:
    """``load_openspiel_game`` in a forked child: "loaded", its error, or the signal that
    ended it (the settings tried here crash or hang the process once OpenSpiel has them)."""

    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: say what happened, then leave without pytest's teardown
        os.close(read)
        signal.alarm(60)
        try:
            load_openspiel_game(game, params)
            said = "loaded"
        except BaseException as err:  # noqa: BLE001 - any outcome is reported
            said = str(err)
        os.write(write, said.encode())
        os._exit(0)
    os.close(write)
    with os.fdopen(read) as pipe:
        said = pipe.read()
    _, status = os.waitpid(pid, 0)
    return said if os.WIFEXITED(status) else signal.Signals(os.WTERMSIG(status)).name


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
@pytest.mark.parametrize(
    ("game", "refused", "why", "played"),
    [
        ("blotto", {"fields": -1}, "fields must be at least 1", {"fields": 1}),
        ("connect_four", {"rows": 0}, "rows must be at least 1", {"rows": 1}),
        ("go_fish", {"initial_cards": 0}, "at least 1", {"initial_cards": -1}),
        ("havannah", {"board_size": -1}, "board_size must be at least 1", {"board_size": 2}),
        ("y", {"board_size": -1}, "board_size must be at least 1", {"board_size": 1}),
        ("sheriff", {"max_bribe": -1}, "max_bribe must be at least 0", {"max_bribe": 0}),
        ("hanabi", {"players": 0}, "players must be 2 to 5, got 0", {"players": 5}),
        ("hanabi", {"colors": 6}, "colors must be 1 to 5", {"colors": 1, "hand_size": 2}),
        ("hanabi", {"hand_size": 0}, "hand_size must be at least 1", {"hand_size": 1}),
        (
            "hanabi",
            {"players": 5, "hand_size": 11},
            "5 hands of 11 cards need 55 cards; the deck has 50",
            {"players": 5, "hand_size": 10},
        ),
        (
            "universal_poker",
            {"numPlayers": 3},
            "blind lists 2 numbers; 3 are needed",
            {"numPlayers": 3, "blind": "50 100 0", "stack": "500 500 500"},
        ),
        ("universal_poker", {"numRanks": 14}, "numRanks must be 1 to 13", {"numRanks": 13}),
        ("universal_poker", {"stack": "1 1"}, "blind is larger than", {"stack": "100 101"}),
        (
            "universal_poker",
            {"stack": "100 100"},
            "some stack must be larger",
            {"stack": "101 100"},
        ),
        (
            "universal_poker",
            {"betting": "limit", "raiseSize": "100"},
            "raiseSize lists 1 numbers; 2 are needed",
            {"betting": "limit", "raiseSize": "100 200"},
        ),
        (
            "universal_poker",
            {"numHoleCards": 3, "numRanks": 1},
            "hole and board cards come to 7; the deck has 4",
            {"numHoleCards": 3, "numRanks": 2},
        ),
    ],
)
def test_parameters_that_crash_openspiel_are_refused_before_it_sees_them(
    game, refused, why, played
):
    # These ended the process (SIGSEGV, SIGABRT), or hung it, where no except could
    # catch them; the setting beside each shows the limit is where OpenSpiel's is.
    said = _load_in_child(game, refused)
    assert said.startswith(f"bad parameters for game {game!r}, ") and why in said, said
    assert _load_in_child(game, played) == "loaded"


def test_a_game_valued_parameter_is_loaded_and_checked_once():

    params = {"stage_game": {"name": "matrix_pd"}, "num_repetitions": 2}
    assert load_openspiel_game("repeated_game", params) is load_openspiel_game(
        "repeated_game", dict(params)
    )


@pytest.mark.parametrize(
    ("game", "params"),
    [
        ("negotiation", {}),
        ("negotiation", {"num_items": 0}),  # refused before its first deal, which never ends
        ("tarok", {}),
        ("bridge_uncontested_bidding", {}),
        ("stones_and_gems", {}),
        ("misere", {"game": "negotiation"}),
        ("zerosum", {"game": "tarok"}),
    ],
)
def test_games_that_draw_chance_from_their_own_generator_are_refused_at_load(game, params):
    # Their chance nodes list one outcome of probability 1 and deal from a generator
    # inside the game object, which every env shares: reset(7) twice dealt two hands.
    with pytest.raises(ValueError) as err:
        load_openspiel_game(game, params)
    message = str(err.value)
    assert message.startswith(f"OpenSpiel game {game!r} cannot be played here: ")
    assert "own generator" in message and "\n" not in message


@pytest.mark.parametrize(
    ("game", "params"),
    [("mfg_crowd_modelling", {}), ("mfg_garnet", {}), ("misere", {"game": "mfg_crowd_modelling"})],
)
def test_mean_field_games_are_refused_at_load(game, params):
    # They loaded, then the engine met the mean-field node (player -5) after one move
    # and failed with an IndexError.
    with pytest.raises(ValueError) as err:
        make_env(f"openspiel:{game}", **params)
    message = str(err.value)
    assert message.startswith(f"OpenSpiel game {game!r} cannot be played here: ")
    assert "mean-field" in message and "\n" not in message


def test_a_wrapper_of_a_game_with_explicit_chance_deals_by_the_seed():
    # Wrappers are registered as sampled-chance games; the loaded game tells the truth.
    deals = []
    for _ in range(2):
        env = make_env("openspiel:misere", game="kuhn_poker")
        env.reset(7)
        deals.append(env.observe(0).info_key)
    assert deals[0] == deals[1]
