"""Welfare, fairness and cooperation rate against hand-computed values."""

import math

import pytest

from coplay.envs.registry import make_env
from coplay.eval.matches import Z95
from coplay.eval.welfare import (
    cooperation_rate,
    fairness,
    jain_index,
    min_max_ratio,
    return_matrix,
    returns_by_seat,
    social_welfare,
    welfare_report,
)
from coplay.policies.scripted import RandomPolicy
from coplay.rollout.engine import play_episodes
from coplay.types import Decision, Episode, Observation, Trajectory, Turn


def episode(returns, seed=0):
    trajs = tuple(Trajectory(p, "pol", ret=r) for p, r in enumerate(returns))
    return Episode("g", seed, seed, ("pol",) * len(returns), trajs, tuple(returns))


def test_returns_by_seat_and_welfare_by_hand():
    eps = [episode((1.0, 3.0)), episode((3.0, 3.0)), episode((2.0, 0.0))]
    seat0, seat1 = returns_by_seat(eps)
    assert (seat0.value, seat1.value) == (2.0, 2.0)
    # seat 0: sample std of (1, 3, 2) is 1, so the half width is z / sqrt(3).
    assert seat0.high - seat0.value == pytest.approx(Z95 / math.sqrt(3))
    welfare = social_welfare(eps)
    assert welfare.value == pytest.approx((4 + 6 + 2) / 3)


def test_with_the_games_bounds_the_intervals_hold_one_game_and_equal_returns():
    # The plain interval was unbounded for one game and a point for equal returns.
    one = [episode((1.0, -1.0))]
    seat0, _ = returns_by_seat(one, bounds=(-1.0, 1.0))
    assert -1.0 <= seat0.low < seat0.value == 1.0 == seat0.high
    same = [episode((0.0, 0.0), seed=i) for i in range(20)]
    welfare = social_welfare(same, bounds=(-1.0, 1.0))
    assert welfare.value == 0.0 and -2.0 <= welfare.low < 0.0 < welfare.high <= 2.0
    report = welfare_report(same, min_return=-1.0, max_return=1.0)
    assert report.welfare == welfare and report.returns_by_seat[0].high > 0.0


def test_jain_and_min_max_by_hand():
    assert jain_index([1.0, 1.0]) == 1.0
    assert jain_index([1.0, 0.0]) == 0.5
    # (1 + 2 + 3)^2 / (3 * (1 + 4 + 9)) = 36 / 42
    assert jain_index([1.0, 2.0, 3.0]) == pytest.approx(6 / 7)
    assert min_max_ratio([1.0, 2.0, 3.0]) == pytest.approx(1 / 3)
    assert jain_index([0.0, 0.0]) == 1.0 and min_max_ratio([0.0, 0.0]) == 1.0


def test_jain_is_scale_invariant_and_bounded():
    xs = [0.5, 4.0, 2.0, 0.0]
    assert jain_index([10 * x for x in xs]) == pytest.approx(jain_index(xs))
    assert 1 / len(xs) <= jain_index(xs) <= 1.0


@pytest.mark.parametrize("bad", [[], [1.0, -0.5], [math.nan]])
def test_fairness_rejects_negative_empty_or_nan(bad):
    with pytest.raises(ValueError, match="amounts"):
        jain_index(bad)


def test_fairness_shifts_by_the_game_minimum():
    # Zero-sum, min return -2: means (1, -1) shift to (3, 1).
    eps = [episode((2.0, -2.0)), episode((0.0, 0.0))]
    f = fairness(eps, min_return=-2.0)
    assert f.jain == pytest.approx(16 / (2 * 10))
    assert f.min_max_ratio == pytest.approx(1 / 3)


def test_fairness_floor_drops_below_min_return_after_penalties():
    # A penalised seat averaged -3 although the game's minimum is -1: floor is -3.
    f = fairness([episode((1.0, -3.0))], min_return=-1.0)
    assert f.min_max_ratio == 0.0 and f.jain == pytest.approx(0.5)


def test_mismatched_or_missing_episodes_are_named():
    with pytest.raises(ValueError, match="at least one"):
        return_matrix([])
    with pytest.raises(ValueError, match="numbers of seats"):
        return_matrix([episode((1.0, 1.0)), episode((1.0, 1.0, 1.0))])


def turn(played, legal, step=0, player=0):
    obs = Observation("g", player, "", legal_actions=legal)
    return Turn(player, obs, Decision("", played, "pol"), step=step, played_action=played)


def test_cooperation_rate_counts_only_dilemma_choices():
    pd = ("[COOPERATE]", "[DEFECT]")
    talk = ("[Say I will cooperate]", "[Say I will defect]")
    trajs = (
        Trajectory(0, "pol", [turn("[Say I will cooperate]", talk), turn("[COOPERATE]", pd, 1)]),
        Trajectory(1, "pol", [turn("[DEFECT]", pd, 1, 1), turn("[COOPERATE]", pd, 2, 1)]),
    )
    ep = Episode("g", 0, 0, ("pol", "pol"), trajs, (0.0, 0.0))
    assert cooperation_rate([ep]) == pytest.approx(2 / 3)
    assert cooperation_rate([ep], cooperate="[Defect]", defect="cooperate") == pytest.approx(1 / 3)
    assert cooperation_rate([episode((1.0, 1.0))]) is None


def test_report_on_random_prisoners_dilemma():
    make = lambda: make_env("openspiel:matrix_pd")  # noqa: E731
    bot = RandomPolicy(seed=3)
    eps = play_episodes(make, [[bot, bot]] * 400, range(400))
    rep = welfare_report(eps, min_return=make().spec.min_return)
    # Uniform play: each seat expects (5 + 0 + 10 + 1) / 4 = 4, welfare 8, half cooperate.
    assert rep.welfare.low < 8.0 < rep.welfare.high
    assert all(r.low < 4.0 < r.high for r in rep.returns_by_seat)
    assert rep.cooperation_rate == pytest.approx(0.5, abs=0.06)
    assert rep.fairness.jain > 0.95 and rep.episodes == 400


def test_doctests():
    import doctest

    from coplay.eval import welfare

    result = doctest.testmod(welfare)
    assert result.attempted > 0 and result.failed == 0


def test_what_the_game_paid_is_read_not_the_shaped_returns():
    # Seat 0's return 1 includes a -1 penalty (shaping): the game paid it 2.
    trajs = (Trajectory(0, "pol", ret=1.0, shaping=-1.0), Trajectory(1, "pol", ret=0.0))
    shaped = Episode("g", 0, 0, ("pol", "pol"), trajs, (1.0, 0.0))
    assert [r.value for r in returns_by_seat([shaped])] == [2.0, 0.0]
    assert social_welfare([shaped]).value == 2.0


def test_fairness_refuses_amounts_that_are_not_a_flat_list():
    with pytest.raises(ValueError, match="non-empty list of amounts"):
        jain_index([[1.0, 2.0]])


def test_a_decision_without_a_defect_action_is_no_dilemma_choice():
    only = ("[COOPERATE]", "[Pass]")
    dilemma = ("[COOPERATE]", "[DEFECT]")
    trajs = (
        Trajectory(0, "pol", [turn("[COOPERATE]", only), turn("[DEFECT]", dilemma, 1)]),
        Trajectory(1, "pol", []),
    )
    ep = Episode("g", 0, 0, ("pol", "pol"), trajs, (0.0, 0.0))
    assert cooperation_rate([ep]) == 0.0
