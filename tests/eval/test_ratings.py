"""Ratings: analytic Elo gaps, symmetric results, OpenSkill order, α-rank mass, bad input."""

import math

import numpy as np
import pytest

from coplay.eval.ratings import (
    PairOutcome,
    alpharank_ratings,
    check_results,
    elo_ratings,
    openskill_ratings,
    outcome_matrices,
    rate,
    replay_order,
)

ELO_75 = 400 * math.log10(3)  # a 75% score: odds 3 = 10**(gap / 400), about 190.8 points
TRANSITIVE = np.array([[0, 300, 360], [100, 0, 300], [40, 100, 0]])
"""A beats B and B beats C 75% of the time, A beats C 90% (odds 9): a perfect Elo fit."""


def test_a_75_percent_score_is_worth_191_elo():
    r = elo_ratings([[0, 300], [100, 0]])
    assert r[0] - r[1] == pytest.approx(ELO_75, abs=0.5)
    assert min(r) == 0.0


def test_transitive_results_give_consistent_gaps():
    r = elo_ratings(TRANSITIVE)
    assert r[0] > r[1] > r[2]
    assert r[0] - r[1] == pytest.approx(ELO_75, abs=1.0)
    assert r[1] - r[2] == pytest.approx(ELO_75, abs=1.0)


def test_draws_count_half_and_symmetric_results_rate_equally():
    # 200 wins and 200 draws against 0 wins: a score of 300 out of 400, 75%.
    r = elo_ratings([[0, 200], [0, 0]], [[0, 200], [200, 0]])
    assert r[0] - r[1] == pytest.approx(ELO_75, abs=1.0)
    np.testing.assert_allclose(elo_ratings([[0, 50, 50], [50, 0, 50], [50, 50, 0]]), 0, atol=1e-6)


def test_self_play_counts_on_the_diagonal_are_ignored():
    with_diag = elo_ratings([[40, 300], [100, 7]])
    np.testing.assert_allclose(with_diag, elo_ratings([[0, 300], [100, 0]]))


def test_openskill_orders_a_transitive_population():
    r = openskill_ratings(TRANSITIVE)
    assert r[0].mu > r[1].mu > r[2].mu
    for s in r:
        assert s.ordinal == pytest.approx(s.mu - 3 * s.sigma)
        assert s.sigma < 25 / 3  # every game shrinks the starting uncertainty


def test_openskill_of_symmetric_results_is_equal_within_uncertainty():
    a, b = openskill_ratings([[0, 40], [40, 0]])
    assert abs(a.mu - b.mu) < min(a.sigma, b.sigma)
    a, b = openskill_ratings(np.zeros((2, 2)), [[0, 30], [30, 0]])  # only draws: exact
    assert a == b


def test_replay_order_spreads_each_pairs_results():
    order = replay_order(np.array([[0, 3], [1, 0]]), np.zeros((2, 2), np.int64))
    assert [score for _, _, score in order] == [1.0, 0.0, 1.0, 1.0]


def test_alpharank_puts_the_mass_on_the_top_of_a_transitive_game_and_spreads_on_a_cycle():
    transitive = np.array([[0, 0.5, 0.8], [-0.5, 0, 0.5], [-0.8, -0.5, 0]])
    np.testing.assert_allclose(alpharank_ratings(transitive), [1, 0, 0], atol=1e-6)
    cycle = np.array([[0, -1, 1], [1, 0, -1], [-1, 1, 0]])
    np.testing.assert_allclose(alpharank_ratings(cycle), np.full(3, 1 / 3), atol=1e-6)


def test_outcome_records_become_matrices():
    outcomes = [
        PairOutcome("a", "b", 1.0),
        PairOutcome("b", "a", 1.0),
        PairOutcome("a", "b", 1.0),
        PairOutcome("c", "a", 0.5),
    ]
    wins, draws = outcome_matrices(outcomes, ["a", "b", "c"])
    np.testing.assert_array_equal(wins, [[0, 2, 0], [1, 0, 0], [0, 0, 0]])
    np.testing.assert_array_equal(draws, [[0, 0, 1], [0, 0, 0], [1, 0, 0]])


def test_rate_puts_every_rating_in_name_order():
    payoff = np.array([[0, 0.5, 0.8], [-0.5, 0, 0.5], [-0.8, -0.5, 0]])
    ratings = rate(["a", "b", "c"], TRANSITIVE, None, payoff)
    assert ratings.names == ("a", "b", "c")
    assert ratings.elo[0] > ratings.elo[1] > ratings.elo[2]
    assert sum(ratings.alpharank) == pytest.approx(1.0)
    with pytest.raises(ValueError, match="same players"):
        rate(["a", "b"], TRANSITIVE, None, payoff)


@pytest.mark.parametrize(
    ("wins", "draws", "message"),
    [
        ([[0, 1, 2], [1, 0]], None, "ragged"),
        ([[0, 1]], None, "square"),
        ([[0, -1], [1, 0]], None, "non-negative whole"),
        ([[0, 1.5], [1, 0]], None, "non-negative whole"),
        ([[0, 1], [1, 0]], [[0, 1], [2, 0]], "symmetric"),
        ([[0, 1], [1, 0]], np.zeros((3, 3)), "shape"),
    ],
)
def test_bad_results_give_clear_errors(wins, draws, message):
    with pytest.raises(ValueError, match=message):
        check_results(wins, draws)


def test_bad_outcomes_give_clear_errors():
    with pytest.raises(ValueError, match="unknown player 'z'"):
        outcome_matrices([PairOutcome("a", "z", 1.0)], ["a", "b"])
    with pytest.raises(ValueError, match="1.0, 0.5 or 0.0"):
        outcome_matrices([PairOutcome("a", "b", 2.0)], ["a", "b"])
    with pytest.raises(ValueError, match="distinct"):
        outcome_matrices([], ["a", "a"])


def test_a_player_without_games_gets_no_elo_and_the_others_keep_theirs():
    # Player 2 (a snapshot added at the end) never played.
    wins = [[0, 300, 0], [100, 0, 0], [0, 0, 0]]
    r = elo_ratings(wins, np.zeros((3, 3)))
    assert math.isnan(r[2])
    np.testing.assert_allclose(r[:2], elo_ratings([[0, 300], [100, 0]]))
    assert np.isnan(elo_ratings([[0, 0], [0, 0]])).all()


def test_openskill_rates_equal_records_equally_whatever_the_players_order():
    # Replayed once, a tie in time went to the lower-numbered player: 10 wins each read
    # 25.70 against 24.30.
    two = openskill_ratings([[0, 10], [10, 0]])
    assert two[0].mu == pytest.approx(two[1].mu)
    three = openskill_ratings([[0, 5, 5], [5, 0, 5], [5, 5, 0]])
    assert max(r.mu for r in three) - min(r.mu for r in three) < 1e-3  # 1.88 replayed once
    wins = np.array([[0, 3, 1], [2, 0, 4], [5, 1, 0]])
    forward = openskill_ratings(wins)
    backward = openskill_ratings(wins[::-1, ::-1])[::-1]
    assert [r.mu for r in forward] == pytest.approx([r.mu for r in backward])


def test_rate_without_a_payoff_matrix_leaves_alpharank_out_and_the_rest_alone():
    # Cross-play of more than 2 players has no two-player payoff matrix to rank.
    payoff = np.array([[0, 0.5, 0.8], [-0.5, 0, 0.5], [-0.8, -0.5, 0]])
    without = rate(["a", "b", "c"], TRANSITIVE, None, None)
    with_payoff = rate(["a", "b", "c"], TRANSITIVE, None, payoff)
    assert np.isnan(without.alpharank).all() and len(without.alpharank) == 3
    assert without.elo == with_payoff.elo and without.openskill == with_payoff.openskill


@pytest.mark.parametrize(
    ("wins", "draws"),
    [
        ([[0, 300, 0], [100, 0, 0], [0, 0, 40]], None),
        ([[0, 300, 0], [100, 0, 0], [0, 0, 0]], [[0, 0, 0], [0, 0, 0], [0, 0, 10]]),
    ],
)
def test_a_player_with_self_play_games_only_gets_no_elo(wins, draws):
    # Player 2 has only games against itself, won or drawn: nothing places it.
    r = elo_ratings(wins, draws)
    assert math.isnan(r[2])
    np.testing.assert_allclose(r[:2], elo_ratings([[0, 300], [100, 0]]))


def test_a_player_who_only_lost_is_rated_below_the_winner():
    r = elo_ratings([[0, 0], [3, 0]])
    assert not np.isnan(r).any() and r[1] > r[0] == 0.0


def test_one_player_is_no_result_matrix():
    with pytest.raises(ValueError, match="at least 2 players"):
        check_results([[0]])


def test_a_symmetric_general_sum_population_is_ranked_as_one_population():
    # Hawk-dove-like payoffs, not zero-sum: payoff.T is not -payoff. OpenSpiel's
    # single-population alpha-rank of the payoff matrix is the reference.
    from open_spiel.python.egt import alpharank as os_alpharank

    payoff = np.array([[1.0, 3.0], [2.0, 0.0]])
    reference = os_alpharank.sweep_pi_vs_epsilon([payoff])
    np.testing.assert_allclose(alpharank_ratings(payoff), reference, atol=1e-6)
    np.testing.assert_allclose(reference, [1.0, 0.0], atol=1e-6)


def test_rate_refuses_a_payoff_matrix_of_other_players():
    with pytest.raises(ValueError, match="same players"):
        rate(["a", "b", "c"], TRANSITIVE, None, np.zeros((2, 2)))


def test_a_score_of_zero_is_a_win_of_the_second_player():
    wins, draws = outcome_matrices([PairOutcome("a", "b", 0.0)], ["a", "b"])
    np.testing.assert_array_equal(wins, [[0, 0], [1, 0]])
    assert draws.sum() == 0
