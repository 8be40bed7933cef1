"""Mixture policies: reach-weighted aggregation, exact exploitability, per-episode draws."""

import numpy as np
import pyspiel
import pytest
from open_spiel.python import policy as os_policy
from open_spiel.python.algorithms.policy_aggregator import PolicyAggregator

from coplay.eval.exact import to_openspiel_policy
from coplay.eval.mixture import (
    MixturePolicy,
    aggregate_tables,
    mixture_exploitability,
    seat_weights,
    seatings,
    tables_exploitability,
)
from coplay.policies.scripted import NashPolicy, RandomPolicy

PASS, BET = 0, 1


@pytest.fixture(scope="module")
def kuhn():
    return pyspiel.load_game("kuhn_poker")


def random_table(game, seed):
    tab = os_policy.TabularPolicy(game)
    rng = np.random.default_rng(seed)
    tab.action_probability_array[:] = rng.dirichlet([1.0, 1.0], size=len(tab.states))
    return tab


def opener(game, first: int, after_bet: int):
    """Player 0 opens with ``first`` and, after pass-bet, answers ``after_bet``."""
    tab = os_policy.TabularPolicy(game)
    for card in "012":
        tab.policy_for_key(card)[:] = np.eye(2)[first]
        tab.policy_for_key(card + "pb")[:] = np.eye(2)[after_bet]
    return tab


def test_hand_built_kuhn_reach_weighting_differs_from_naive_average(kuhn):
    # A always bets first, so never reaches "0pb"; B always passes and folds there.
    # Naive average at "0pb": call 0.5. Reach-weighted: only B gets there -> call 0.
    a, b = opener(kuhn, BET, BET), opener(kuhn, PASS, PASS)
    mix = aggregate_tables(kuhn, [a, b], [0.5, 0.5])
    assert mix.policy_for_key("0pb")[BET] == pytest.approx(0.0)
    naive = 0.5 * a.policy_for_key("0pb") + 0.5 * b.policy_for_key("0pb")
    assert naive[BET] == pytest.approx(0.5)
    # At the root both members get there, so the mixture is the plain average.
    np.testing.assert_allclose(mix.policy_for_key("1"), [0.5, 0.5])


def test_matches_openspiel_policy_aggregator(kuhn):
    tables = [random_table(kuhn, s) for s in range(3)]
    weights = [[0.2, 0.5, 0.3], [0.6, 0.1, 0.3]]
    ours = aggregate_tables(kuhn, tables, weights)
    theirs = PolicyAggregator(kuhn).aggregate([0, 1], [tables, tables], weights)
    for state in ours.states:
        p = state.current_player()
        want = theirs.policy[p][state.information_state_string(p)]
        np.testing.assert_allclose(
            ours.policy_for_key(state.information_state_string(p)),
            [want[a] for a in (PASS, BET)],
            atol=1e-9,
        )


def test_mixture_of_a_policy_with_itself_is_the_policy(kuhn):
    t = random_table(kuhn, 7)
    mix = aggregate_tables(kuhn, [t, t], [0.3, 0.7])
    np.testing.assert_allclose(mix.action_probability_array, t.action_probability_array)


def test_zero_weighted_members_leave_nash_unchanged(kuhn):
    nash = to_openspiel_policy(NashPolicy("kuhn_poker"), "kuhn_poker")
    other = opener(kuhn, BET, PASS)
    mix = aggregate_tables(kuhn, [nash, other], [1.0, 0.0])
    np.testing.assert_allclose(mix.action_probability_array, nash.action_probability_array)
    assert tables_exploitability(kuhn, [nash, other], [1.0, 0.0]).exploitability < 1e-3


def test_uniform_mixture_of_random_players_has_known_exploitability():
    members = [RandomPolicy(seed=0), RandomPolicy(seed=1)]
    res = mixture_exploitability(members, [0.5, 0.5], "kuhn_poker")
    assert res.exploitability == pytest.approx(11 / 24)
    assert res.nash_conv == pytest.approx(11 / 12)


@pytest.mark.parametrize(
    "weights,match",
    [
        ([1.0], "2 entries"),
        ([[1.0, 0.0]] * 3, "shape"),
        ([-1.0, 2.0], "non-negative"),
        ([0.0, 0.0], "positive weight"),
        ([1.0, float("nan")], "finite"),
        ([[1.0], [1.0, 2.0]], "ragged"),
    ],
)
def test_bad_weights_are_one_line_errors(weights, match):
    with pytest.raises(ValueError, match=match):
        seat_weights(weights, 2, 2)


def test_empty_mixture_is_refused(kuhn):
    with pytest.raises(ValueError, match="at least one member"):
        aggregate_tables(kuhn, [], [])


def test_mixture_policy_draws_one_member_per_episode_by_weight():
    a, b = RandomPolicy(policy_id="a"), RandomPolicy(policy_id="b")
    mix = MixturePolicy((a, b), (3.0, 1.0))
    draws = mix.draw(np.random.default_rng(0), 20_000)
    assert sum(d is a for d in draws) / 20_000 == pytest.approx(0.75, abs=0.015)
    seats = seatings([mix, MixturePolicy((b,), (1.0,))], 5, np.random.default_rng(0))
    assert len(seats) == 5 and all(s[1] is b and s[0] in (a, b) for s in seats)
    with pytest.raises(ValueError, match="non-negative"):
        MixturePolicy((a, b), (1.0, -1.0))
