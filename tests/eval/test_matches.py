"""Match statistics: intervals, outcomes, seat rotation."""

import math

import numpy as np
import pytest

from coplay.envs.registry import make_env
from coplay.eval.matches import mean_interval, outcome, play_match, wilson
from coplay.policies.scripted import NashPolicy, PerfectPlayer, RandomPolicy
from coplay.rollout.invalid import InvalidActionConfig
from coplay.types import Decision


def test_wilson_known_values():
    iv = wilson(5, 10)
    assert (round(iv.low, 3), round(iv.high, 3)) == (0.237, 0.763)
    assert wilson(0, 20).low == 0.0 and wilson(20, 20).high == 1.0


def test_mean_interval_contains_mean_and_shrinks():
    small, big = mean_interval([0, 1] * 10), mean_interval([0, 1] * 1000)
    assert small.low < 0.5 < small.high
    assert (big.high - big.low) < (small.high - small.low)


@pytest.mark.parametrize(
    ("returns", "seat", "expected"),
    [((1, -1), 0, 1), ((1, -1), 1, -1), ((0, 0), 0, 0), ((2, 2, -4), 0, 0), ((-1, 3, -2), 2, -1)],
)
def test_outcome(returns, seat, expected):
    assert outcome(returns, seat) == expected


def test_perfect_player_never_loses_to_random():
    make = lambda: make_env("tic_tac_toe")  # noqa: E731
    res = play_match(make, PerfectPlayer(seed=0), [RandomPolicy(seed=1)], episodes=40)
    assert res.loss.value == 0.0 and res.win.value > 0.5


def test_nash_vs_random_in_kuhn_wins_on_average():
    make = lambda: make_env("kuhn_poker")  # noqa: E731
    res = play_match(make, NashPolicy("kuhn_poker"), [RandomPolicy(seed=1)], episodes=2000)
    assert res.mean_return.low > 0
    assert res.episodes == 2000 and len(res.mean_return_by_seat) == 2


def test_opponent_count_must_match_seats():
    with pytest.raises(ValueError, match="need 1 opponents"):
        play_match(lambda: make_env("kuhn_poker"), RandomPolicy(), [], episodes=2)


def test_loss_by_seat_splits_the_overall_loss():
    make = lambda: make_env("tic_tac_toe")  # noqa: E731
    res = play_match(make, RandomPolicy(seed=0), [PerfectPlayer()], episodes=40)
    assert len(res.loss_by_seat) == 2
    assert (res.loss_by_seat[0].value + res.loss_by_seat[1].value) / 2 == pytest.approx(
        res.loss.value
    )
    # Random loses more often moving second against perfect play than moving first.
    assert res.loss_by_seat[1].value >= res.loss_by_seat[0].value


class _NeverLegal:
    """Answers nothing legal: with a penalty, the engine plays a random move for it."""

    policy_id = "never-legal"

    def act(self, observations):
        return [Decision("pass?", None, self.policy_id) for _ in observations]


def test_a_penalty_is_not_a_loss_on_the_board():
    # The penalty is a training signal: the exact values leave it out, so must the
    # match. It used to decide the game: every game read as lost, at a return near -5.
    make = lambda: make_env("tic_tac_toe")  # noqa: E731
    invalid = InvalidActionConfig(on_fail="penalty", penalty=-5.0)
    res = play_match(make, _NeverLegal(), [RandomPolicy(seed=1)], episodes=60, invalid=invalid)
    assert res.invalid_rate == 1.0
    assert res.win.value > 0.2 and res.loss.value < 0.8
    assert res.mean_return.low >= -1.0 and res.mean_return.high <= 1.0


def _coverage(n: int, p: float) -> float:
    """Probability that the return interval of n games of a coin (+1 with probability
    p, else -1) holds its mean 2p - 1, summed exactly over the number of wins."""
    covered = 0.0
    for w in range(n + 1):
        iv = mean_interval([1.0] * w + [-1.0] * (n - w), bounds=(-1.0, 1.0))
        if iv.low <= 2 * p - 1 <= iv.high:
            covered += math.comb(n, w) * p**w * (1 - p) ** (n - w)
    return covered


@pytest.mark.parametrize("n", [10, 20, 50])
def test_the_return_interval_of_a_coin_holds_its_mean_as_often_as_it_claims(n):
    # The normal interval held a 9:1 coin's mean in 65% of 10-game matches, a 97:3
    # coin's in 27%, and any coin's only 79% of the time on average over p.
    coverages = [_coverage(n, p) for p in np.linspace(0.01, 0.99, 99)]
    assert min(coverages) >= 0.92
    assert np.mean(coverages) >= 0.95


def test_a_match_of_draws_alone_is_no_certainty():
    # Perfect play draws every game; 20 of them left the interval the point 0.
    make = lambda: make_env("tic_tac_toe")  # noqa: E731
    res = play_match(make, PerfectPlayer(seed=0), [PerfectPlayer(seed=1)], episodes=20)
    assert res.draw.value == 1.0 and res.mean_return.value == 0.0
    assert res.mean_return.low < -0.1 and res.mean_return.high > 0.1
    assert res.mean_return.high - res.mean_return.low < 0.4


def test_one_game_has_a_return_interval_within_the_games_bounds():
    # It was [-inf, inf], for a game whose returns lie in [-1, 1].
    make = lambda: make_env("tic_tac_toe")  # noqa: E731
    res = play_match(make, PerfectPlayer(seed=0), [RandomPolicy(seed=1)], episodes=1)
    iv = res.mean_return
    assert -1.0 <= iv.low < iv.value <= iv.high <= 1.0
