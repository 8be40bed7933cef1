"""Forfeit returns and treatment config validation."""

from dataclasses import replace

import pytest
from pydantic import ValidationError

from coplay.rollout.invalid import InvalidActionConfig, forfeit_returns
from coplay.types import GameKind, GameSpec


def _spec(n, kind):
    return GameSpec(
        name="g",
        num_players=n,
        kind=kind,
        max_turns=10,
        perfect_information=False,
        min_return=-2.0,
        max_return=2.0,
    )


def test_zero_sum_forfeit_stays_zero_sum():
    assert forfeit_returns(_spec(2, GameKind.ZERO_SUM), 0) == [-2.0, 2.0]
    out = forfeit_returns(_spec(3, GameKind.ZERO_SUM), 1)
    assert out == [1.0, -2.0, 1.0] and sum(out) == 0


@pytest.mark.parametrize("kind", [GameKind.GENERAL_SUM, GameKind.COOPERATIVE])
def test_other_games_give_others_nothing(kind):
    assert forfeit_returns(_spec(3, kind), 2) == [0.0, 0.0, -2.0]


def test_several_offenders_are_each_charged():
    # Forfeits in one round of simultaneous moves: no offender is paid for another's.
    # The one left is paid 4, above max_return 2: a zero-sum game keeps its sum.
    assert forfeit_returns(_spec(3, GameKind.ZERO_SUM), 0, 2) == [-2.0, 4.0, -2.0]
    assert forfeit_returns(_spec(2, GameKind.ZERO_SUM), 1, 0) == [-2.0, -2.0]
    assert forfeit_returns(_spec(3, GameKind.GENERAL_SUM), 2, 0) == [-2.0, 0.0, -2.0]


def test_a_forfeit_needs_an_offender():
    with pytest.raises(ValueError, match="at least one offender"):
        forfeit_returns(_spec(2, GameKind.ZERO_SUM))


@pytest.mark.parametrize(
    "bad", [{"retries": -1}, {"penalty": 0.5}, {"on_fail": "ignore"}, {"typo": 1}]
)
def test_bad_treatments_are_rejected(bad):
    with pytest.raises(ValidationError):
        InvalidActionConfig(**bad)


def test_an_infinite_penalty_is_refused():
    # -inf passed le=0: the offender's return was -inf, which the engine's check of the
    # game's own returns does not see, and every advantage of its group NaN.
    with pytest.raises(ValidationError, match="penalty\n  Input should be a finite number"):
        InvalidActionConfig(on_fail="penalty", penalty=float("-inf"))


def test_a_forfeit_pays_the_others_within_the_games_bounds():
    # A dilemma whose worst outcome still pays 2 a round: the others' 0 was below
    # anything the game gives, and below the offender's own minimum.
    spec = GameSpec(
        name="g", num_players=2, kind=GameKind.GENERAL_SUM, max_turns=4,
        perfect_information=False, min_return=2.0, max_return=10.0,
    )  # fmt: skip
    assert forfeit_returns(spec, 0) == [2.0, 2.0]
    below = replace(spec, min_return=-10.0, max_return=-1.0)
    assert forfeit_returns(below, 1) == [-1.0, -10.0]
    assert forfeit_returns(_spec(2, GameKind.GENERAL_SUM), 0) == [-2.0, 0.0]


def test_the_default_treatment_is_a_forfeit_and_retries_stop_at_16():
    cfg = InvalidActionConfig()
    assert (cfg.retries, cfg.on_fail, cfg.penalty) == (0, "forfeit", -1.0)
    assert InvalidActionConfig(retries=16).retries == 16
    with pytest.raises(ValidationError, match="less than or equal to 16"):
        InvalidActionConfig(retries=17)


def test_an_offender_named_twice_is_charged_once():
    spec = _spec(3, GameKind.ZERO_SUM)
    assert forfeit_returns(spec, 1, 1) == forfeit_returns(spec, 1) == [1.0, -2.0, 1.0]
