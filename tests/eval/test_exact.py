"""Exact evaluation against values known from the literature."""

import pyspiel
import pytest

from coplay.eval.exact import exploitability, to_openspiel_policy, tree_size
from coplay.policies.scripted import NashPolicy, RandomPolicy


def test_uniform_kuhn_exploitability_is_11_over_24():
    res = exploitability(RandomPolicy(), "kuhn_poker")
    assert res.exploitability == pytest.approx(11 / 24)
    assert res.nash_conv == pytest.approx(11 / 12)
    assert res.num_info_states == 12


def test_uniform_kuhn_best_response_values():
    res = exploitability(RandomPolicy(), "kuhn_poker")
    # Uniform self-play in Kuhn is a fair game per seat pair: values sum to zero.
    assert sum(res.on_policy_values) == pytest.approx(0.0)
    improvements = [
        b - v for b, v in zip(res.best_response_values, res.on_policy_values, strict=True)
    ]
    assert sum(improvements) == pytest.approx(res.nash_conv)


def test_nash_player_is_unexploitable_and_has_game_value():
    res = exploitability(NashPolicy("kuhn_poker"), "kuhn_poker")
    assert res.exploitability < 1e-3
    # Kuhn poker's value for the first player is -1/18 (Kuhn, 1950).
    assert res.on_policy_values[0] == pytest.approx(-1 / 18, abs=1e-3)


def test_uniform_leduc_exploitability():
    res = exploitability(RandomPolicy(), "leduc_poker")
    assert res.exploitability == pytest.approx(2.373611, abs=1e-5)


def test_tabular_policy_rows_match_queried_distribution():
    tab = to_openspiel_policy(RandomPolicy(), "kuhn_poker")
    assert tab.action_probability_array.shape == (12, 2)
    assert (tab.action_probability_array == 0.5).all()


def test_three_player_kuhn_nash_conv():
    res = exploitability(RandomPolicy(), "kuhn_poker", params={"players": 3})
    assert res.nash_conv > 0 and len(res.best_response_values) == 3


class Broken:
    policy_id = "broken"
    version = 0

    def action_probs(self, observations):
        return [{a: 0.9 for a in o.legal_actions} for o in observations]


def test_probabilities_that_do_not_sum_to_one_are_rejected():
    with pytest.raises(ValueError, match="sum to"):
        to_openspiel_policy(Broken(), "kuhn_poker")


def test_game_without_openspiel_backend_is_rejected():
    with pytest.raises(ValueError, match="unknown game"):
        exploitability(RandomPolicy(), "no_such_game")


def test_tree_size_counts_histories_and_stops_at_the_cap():
    kuhn = pyspiel.load_game("kuhn_poker")
    assert tree_size(kuhn, 1000) == 58  # root + 3 + 6 deals + 48 betting histories
    assert tree_size(kuhn, 57) is None
    assert tree_size(pyspiel.load_game("leduc_poker"), 100_000) == 9457


def test_decide_exact_by_mode_and_game():
    from coplay.envs.registry import make_env
    from coplay.eval.exact import decide_exact

    kuhn, ttt = make_env("kuhn_poker").spec, make_env("tic_tac_toe").spec
    assert decide_exact("auto", kuhn, "kuhn_poker", {}) is True
    assert decide_exact(False, kuhn, "kuhn_poker", {}) is False
    assert decide_exact("auto", ttt, "tic_tac_toe", {}) is False  # perfect information
    with pytest.raises(ValueError, match="imperfect-information"):
        decide_exact(True, ttt, "tic_tac_toe", {})


def test_probabilities_that_are_not_finite_are_one_line_naming_the_cause():
    # Diverged weights (optim.lr=3) gave NaN rows, which the sum check let through:
    # the run failed deep in OpenSpiel with "iteration over a 0-d array".
    class Diverged(RandomPolicy):
        def action_probs(self, observations):
            return [{a: float("nan") for a in o.legal_actions} for o in observations]

    with pytest.raises(ValueError, match=r"^policy probabilities are not finite .* optim.lr"):
        exploitability(Diverged(), "kuhn_poker")
