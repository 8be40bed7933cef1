"""Exploitability with forfeits equals OpenSpiel's where nobody forfeits, and takes
analytic values where someone does."""

import numpy as np
import pytest

from coplay.envs.registry import make_env
from coplay.eval.exact import solvable_game, tabular_exploitability, to_table
from coplay.eval.forfeits import forfeit_exploitability, forfeit_share, has_forfeits
from coplay.policies.scripted import NashPolicy, RandomPolicy


class Skewed:
    """A fixed, state-dependent, non-uniform policy (no forfeits)."""

    def action_probs(self, observations):
        out = []
        for obs in observations:
            w = np.arange(1, len(obs.legal_actions) + 1, dtype=float) + len(obs.text) % 3
            out.append(dict(zip(obs.legal_actions, w / w.sum(), strict=True)))
        return out


class Forfeits:
    """Names no legal action anywhere (every row sums to 0)."""

    def action_probs(self, observations):
        return [dict.fromkeys(o.legal_actions, 0.0) for o in observations]


@pytest.mark.parametrize("policy", [RandomPolicy(), NashPolicy("kuhn_poker"), Skewed()])
def test_equals_openspiel_without_forfeits(policy):
    _, game = solvable_game("kuhn_poker", None)
    tab = to_table(policy, "kuhn_poker")
    assert not has_forfeits(tab)
    ours = forfeit_exploitability(game, tab, make_env("kuhn_poker").spec)
    ref = tabular_exploitability(game, tab)
    assert ours.nash_conv == pytest.approx(ref.nash_conv, abs=1e-9)
    assert ours.on_policy_values == pytest.approx(ref.on_policy_values, abs=1e-9)
    assert ours.best_response_values == pytest.approx(ref.best_response_values, abs=1e-9)


def test_uniform_kuhn_nash_conv_is_11_over_12():
    _, game = solvable_game("kuhn_poker", None)
    res = forfeit_exploitability(
        game, to_table(RandomPolicy(), "kuhn_poker"), make_env("kuhn_poker").spec
    )
    assert res.nash_conv == pytest.approx(11 / 12)


def test_a_policy_that_always_forfeits():
    # Seat 0 forfeits at once (-2, the minimum; seat 1 gets +2). A best responder gets
    # +2 in either seat: the other forfeits at its first turn. NashConv = 4 + 0.
    _, game = solvable_game("kuhn_poker", None)
    tab = to_table(Forfeits(), "kuhn_poker")
    assert has_forfeits(tab)
    res = forfeit_exploitability(game, tab, make_env("kuhn_poker").spec)
    assert res.on_policy_values == pytest.approx((-2.0, 2.0))
    assert res.best_response_values == pytest.approx((2.0, 2.0))
    assert res.nash_conv == pytest.approx(4.0)
    assert res.exploitability == pytest.approx(2.0)


def test_forfeit_share():
    assert forfeit_share({"a": 0.25, "b": 0.5}) == pytest.approx(0.25)
    assert forfeit_share({"a": 0.5, "b": 0.5 - 1e-12}) == 0.0


class HalfForfeits:
    """Forfeits half the time, else plays uniformly (each row sums to 1/2)."""

    def action_probs(self, observations):
        return [dict.fromkeys(o.legal_actions, 0.5 / len(o.legal_actions)) for o in observations]


def test_players_forfeiting_in_one_simultaneous_round_are_each_charged():
    # Rock-paper-scissors (zero-sum, minimum -1). Both forfeit with probability 1/4 and
    # each gets -1; one alone with 1/4 each (-1 to it, +1 to the other); otherwise 0.
    # So each seat gets -1/4. A best responder never forfeits: it wins the half where
    # the other forfeits and draws on average otherwise, 1/2. NashConv = 2 * 3/4.
    name = "openspiel:matrix_rps"
    _, game = solvable_game(name, None)
    tab = to_table(HalfForfeits(), name)
    res = forfeit_exploitability(game, tab, make_env(name).spec)
    assert res.on_policy_values == pytest.approx((-0.25, -0.25))
    assert res.best_response_values == pytest.approx((0.5, 0.5))
    assert res.nash_conv == pytest.approx(1.5)


def test_three_players_equal_openspiel_and_divide_nash_conv_by_three():
    _, game = solvable_game("kuhn_poker", {"players": 3})
    tab = to_table(RandomPolicy(), "kuhn_poker", params={"players": 3})
    ours = forfeit_exploitability(game, tab, make_env("kuhn_poker", players=3).spec)
    ref = tabular_exploitability(game, tab)
    assert ours.nash_conv == pytest.approx(ref.nash_conv, abs=1e-9)
    assert ours.exploitability == pytest.approx(ref.nash_conv / 3, abs=1e-9)


def test_a_rounding_deficit_is_no_forfeit():
    tab = to_table(RandomPolicy(), "kuhn_poker")
    tab.action_probability_array[0, 0] -= 1e-12
    assert not has_forfeits(tab)
    tab.action_probability_array[0, 0] -= 0.1
    assert has_forfeits(tab)
