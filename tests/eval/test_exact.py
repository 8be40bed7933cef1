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


def test_three_player_exploitability_is_nash_conv_over_three_as_openspiel_has_it():
    from open_spiel.python import policy as os_policy
    from open_spiel.python.algorithms import exploitability as os_exploitability

    game = pyspiel.load_game("kuhn_poker", {"players": 3})
    reference = os_exploitability.nash_conv(game, os_policy.UniformRandomPolicy(game))
    res = exploitability(RandomPolicy(), "kuhn_poker", params={"players": 3})
    assert res.nash_conv == pytest.approx(reference)
    assert res.exploitability == pytest.approx(reference / 3)


def test_best_responses_against_nash_get_the_game_value_in_each_seat():
    # Values, not gains: an unexploitable policy leaves a best responder -1/18 and 1/18.
    res = exploitability(NashPolicy("kuhn_poker"), "kuhn_poker")
    assert res.best_response_values == pytest.approx((-1 / 18, 1 / 18), abs=1e-3)


def test_tree_size_counts_a_tree_of_exactly_the_cap():
    assert tree_size(pyspiel.load_game("kuhn_poker"), 58) == 58


def test_exact_on_is_obeyed_whatever_the_trees_size(monkeypatch):
    from coplay.envs.registry import make_env
    from coplay.eval import exact

    monkeypatch.setattr(exact, "AUTO_MAX_HISTORIES", 1000)  # Leduc's 9,457 are over it
    leduc = make_env("leduc_poker").spec
    assert exact.decide_exact(True, leduc, "leduc_poker", {}) is True
    assert exact.decide_exact("auto", leduc, "leduc_poker", {}) is False


def test_a_game_without_openspiel_backend_is_never_exact():
    from coplay.envs.registry import make_env
    from coplay.eval.exact import decide_exact

    talk = make_env("signalling").spec  # imperfect information, no OpenSpiel game
    assert decide_exact("auto", talk, "signalling", {}) is False
    with pytest.raises(ValueError, match="imperfect-information OpenSpiel game"):
        decide_exact(True, talk, "signalling", {})


@pytest.mark.parametrize("weight", [0.45, 0.4995, 0.9])
def test_rows_off_one_either_way_are_rejected(weight):
    # Rows of 0.9, 0.999 and 1.8: short of one is as wrong as over it.
    class Off(RandomPolicy):
        def action_probs(self, observations):
            return [dict.fromkeys(o.legal_actions, weight) for o in observations]

    with pytest.raises(ValueError, match=f"sum to {2 * weight:.6f}"):
        to_openspiel_policy(Off(), "kuhn_poker")


def test_actions_a_policy_leaves_out_get_probability_zero():
    class AlwaysPass(RandomPolicy):
        def action_probs(self, observations):
            return [{"[Pass]": 1.0} for _ in observations]

    tab = to_openspiel_policy(AlwaysPass(), "kuhn_poker")
    assert (tab.action_probability_array == [1.0, 0.0]).all()


def test_a_simultaneous_game_is_asked_what_the_env_shows():
    from coplay.envs.registry import make_env

    class Recording(RandomPolicy):
        def __init__(self):
            super().__init__()
            self.asked = []

        def action_probs(self, observations):
            self.asked += observations
            return super().action_probs(observations)

    policy, env = Recording(), make_env("openspiel:matrix_rps")
    assert exploitability(policy, "openspiel:matrix_rps").nash_conv == pytest.approx(0.0)
    env.reset(0)
    assert policy.asked == [env.observe(0), env.observe(1)]


class Answering(RandomPolicy):
    """Gives every information state the same answer, whatever its legal actions."""

    def __init__(self, answer):
        super().__init__()
        self.answer = answer

    def action_probs(self, observations):
        return [dict(self.answer) for _ in observations]


def test_a_negative_probability_is_refused_not_evaluated():
    # 1.5 and -0.5 sum to 1: the sum check passed them, and OpenSpiel returned a
    # NashConv of 3.75 for a "policy" no player can play.
    with pytest.raises(ValueError, match=r"negative probability \(-0.5\) .* info state '0'"):
        exploitability(Answering({"[Pass]": 1.5, "[Bet]": -0.5}), "kuhn_poker")


def test_mass_on_an_action_that_is_not_legal_names_it_and_the_state():
    # It was a bare KeyError, printed as "'[Raise]'".
    with pytest.raises(ValueError, match=r"'\[Raise\]', not a legal action at info state '0'"):
        exploitability(Answering({"[Raise]": 1.0}), "kuhn_poker")


def test_an_illegal_action_of_probability_zero_is_left_out():
    tab = to_openspiel_policy(Answering({"[Pass]": 1.0, "[Raise]": 0.0}), "kuhn_poker")
    assert (tab.action_probability_array == [1.0, 0.0]).all()


def test_a_policy_that_leaves_states_unanswered_says_so():
    # It was "zip() argument 2 is shorter than argument 1".
    class Short(RandomPolicy):
        def action_probs(self, observations):
            return super().action_probs(observations)[:-1]

    with pytest.raises(ValueError, match="answered 11 of the 12 information states"):
        exploitability(Short(), "kuhn_poker")
