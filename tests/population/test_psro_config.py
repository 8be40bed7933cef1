"""PSRO's settings: what the config refuses, before anything is trained."""

import pytest

from coplay.population.oracles import ORACLES
from coplay.population.psro_config import PsroConfig
from coplay.train.settings import build_config
from tests.population.psro_runs import TINY, tiny_psro


@pytest.mark.parametrize(
    "kwargs,match",
    [
        ({"meta_solver": "best"}, "unknown meta_solver 'best'"),
        ({"iterations": 0}, "greater than 0"),
        ({"oracle": "best"}, "unknown oracle 'best'; available: lm, exact"),
        ({"initial": "nash"}, "unknown initial 'nash'; available: lm, random"),
        ({"seat_weights": [-1, 3]}, r"seat_weights must be >= 0 and not all 0, got \[-1.0, 3.0\]"),
        ({"seat_weights": [0, 0]}, "seat_weights must be >= 0 and not all 0"),
        ({"seat_weights": [1, 1, 1]}, "seat_weights has 3 weights; kuhn_poker has 2 seats"),
        # The exact oracle trains no LM: these were accepted and silently ignored.
        ({"oracle": "exact", "restarts": 2}, "oracle=exact trains no language model: restarts=2"),
        (
            {"oracle": "exact", "warm_start": False},
            "oracle=exact trains no language model: warm_start=False",
        ),
        (
            {"oracle": "exact", "seat_weights": [1, 3]},
            r"oracle=exact trains no language model: seat_weights=\[1.0, 3.0\]",
        ),
        (
            {"recommendations": "all", "meta_solver": "ce"},
            "unknown recommendations 'all'; available: likeliest, each",
        ),
        # A solver that recommends nothing: its responses face the marginal regardless.
        (
            {"recommendations": "each"},
            "recommendations=each answers the members a conditional meta-solver "
            "recommends; meta_solver=nash recommends none",
        ),
        ({"recommendations": "each", "meta_solver": "cce"}, "use meta_solver ce or mwce"),
    ],
)
def test_bad_psro_settings_are_refused(kwargs, match):
    with pytest.raises(ValueError, match=match):
        tiny_psro(**kwargs)


def test_psro_refuses_games_that_are_not_two_player():
    with pytest.raises(ValueError, match="2-player games"):
        PsroConfig(run=build_config(overrides=["game.params={players: 3}"]))


@pytest.mark.parametrize(
    "overrides",
    [
        ["--preset", "tictactoe-selfplay"],
        ["game.name=openspiel:matrix_rps"],  # simultaneous: its tables were read on the
        ["model.mode=text"],  # transform; a text member has no exact choice distribution
    ],
)
def test_exact_oracle_needs_an_exact_meta_game(overrides):
    # Both failed with a traceback only after a first response was trained.
    assert ORACLES["exact"].needs_exact and not ORACLES["lm"].needs_exact
    preset = overrides[1] if overrides[0] == "--preset" else "kuhn-selfplay"
    over = [*TINY, *(o for o in overrides if "=" in o), "train.eval_opponents=[]"]
    with pytest.raises(ValueError, match="oracle=exact needs an exact meta-game"):
        PsroConfig(run=build_config(preset=preset, overrides=over), oracle="exact")


def test_nash_is_refused_for_a_general_sum_game_before_anything_trains():
    # The meta-solver refused the meta-game only after the first response was trained.
    over = [*TINY, "game.name=dilemma", "train.eval_opponents=[]"]
    run = build_config(preset="kuhn-selfplay", overrides=over)
    with pytest.raises(ValueError, match="meta_solver=nash needs a zero-sum game, but 'dilemma'"):
        PsroConfig(run=run)
    assert PsroConfig(run=run, meta_solver="ce").meta_solver == "ce"


def test_each_recommendation_goes_with_the_conditional_solvers():
    for solver in ("ce", "mwce"):
        cfg = tiny_psro(meta_solver=solver, recommendations="each", oracle="exact")
        assert cfg.recommendations == "each"
    assert tiny_psro().recommendations == "likeliest"  # the default: one response
