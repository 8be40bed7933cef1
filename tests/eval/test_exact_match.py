"""Exact matches: hand-computed outcomes, OpenSpiel's policy values, pruning, sharing."""

import pytest
from open_spiel.python.algorithms import expected_game_score

from coplay.envs.registry import make_env
from coplay.eval.exact import solvable_game, to_openspiel_policy
from coplay.eval.exact_match import (
    exact_match_opponents,
    exact_outcomes,
    sampled_and_greedy_outcomes,
)
from coplay.policies.scripted import NashPolicy, PerfectPlayer, RandomPolicy


class Counting(RandomPolicy):
    """Uniform play that counts the observations it is asked about."""

    def __init__(self, key=None):
        super().__init__(seed=0)
        self.asked = 0
        if key is not None:
            self.observation_key = key

    def action_probs(self, observations):
        self.asked += len(observations)
        return super().action_probs(observations)


def test_greedy_first_action_against_uniform_kuhn_by_hand():
    # Always [Pass] from seat 0 against a uniform opponent: it passes back (1/2) and the
    # higher card wins 1 (a fair coin over deals), or it bets (1/2) and seat 0 folds.
    first, _ = exact_outcomes(RandomPolicy(), RandomPolicy(), "kuhn_poker", greedy=True)
    assert first.mean_return == pytest.approx(-0.5)
    assert first.win == pytest.approx(0.25)
    assert first.loss == pytest.approx(0.75)
    assert first.draw == pytest.approx(0.0)


@pytest.mark.parametrize("game", ["kuhn_poker", "leduc_poker"])
def test_mean_returns_equal_openspiels_policy_value(game):
    me, opp = NashPolicy(game), RandomPolicy()
    _, os_game = solvable_game(game, None)
    mine, theirs = to_openspiel_policy(me, game), to_openspiel_policy(opp, game)
    for o in exact_outcomes(me, opp, game):
        seats = [mine if s == o.seat else theirs for s in range(2)]
        value = expected_game_score.policy_value(os_game.new_initial_state(), seats)
        assert o.mean_return == pytest.approx(value[o.seat])
        assert o.win + o.draw + o.loss == pytest.approx(1.0)


def test_perfect_tic_tac_toe_never_loses_and_draws_itself():
    perfect = PerfectPlayer()
    for o in exact_outcomes(perfect, perfect, "tic_tac_toe"):
        assert o.draw == pytest.approx(1.0)
    x, o = exact_outcomes(RandomPolicy(), perfect, "tic_tac_toe")
    assert x.win == o.win == 0.0
    assert 0.7 < x.loss < 0.8 and 0.95 < o.loss < 0.99
    # what the perfect player wins from each seat is what random play loses there
    px, po = exact_outcomes(perfect, RandomPolicy(), "tic_tac_toe")
    assert px.win == pytest.approx(o.loss) and po.win == pytest.approx(x.loss)
    assert px.loss == po.loss == 0.0


def test_answers_are_shared_by_observation_key():
    plain, keyed = Counting(), Counting(key=lambda obs: (obs.text, obs.legal_actions))
    a = exact_outcomes(plain, PerfectPlayer(), "tic_tac_toe")
    b = exact_outcomes(keyed, PerfectPlayer(), "tic_tac_toe")
    assert [o.loss for o in a] == pytest.approx([o.loss for o in b])
    # tic-tac-toe's observation carries the move history; the board alone recurs
    assert keyed.asked < plain.asked / 3


def test_walk_stops_past_its_node_budget():
    with pytest.raises(ValueError, match="over 100 histories"):
        exact_outcomes(RandomPolicy(), RandomPolicy(), "tic_tac_toe", max_nodes=100)


def test_policies_must_report_probabilities():
    with pytest.raises(TypeError, match="cannot report action probabilities"):
        exact_outcomes(object(), RandomPolicy(), "kuhn_poker")


def test_which_opponents_are_matched_exactly():
    bots = {"random": RandomPolicy(), "perfect": PerfectPlayer(), "text": object()}
    spec = make_env("tic_tac_toe").spec
    assert exact_match_opponents("auto", spec, "tic_tac_toe", None, bots, exact=False) == (
        "perfect",
    )
    assert exact_match_opponents(True, spec, "tic_tac_toe", None, bots, exact=False) == (
        "random",
        "perfect",
    )
    assert exact_match_opponents(False, spec, "tic_tac_toe", None, bots, exact=False) == ()
    kuhn = make_env("kuhn_poker").spec
    nash = {"nash": NashPolicy()}
    assert exact_match_opponents("auto", kuhn, "kuhn_poker", None, nash, exact=True) == ("nash",)
    assert exact_match_opponents("auto", kuhn, "kuhn_poker", None, nash, exact=False) == ()
    talk = make_env("signalling").spec
    assert exact_match_opponents("auto", talk, "signalling", None, bots, exact=False) == ()
    with pytest.raises(ValueError, match="needs an OpenSpiel game"):
        exact_match_opponents(True, talk, "signalling", None, bots, exact=False)


def test_simultaneous_moves_walk_the_turn_based_transform():
    # uniform rock-paper-scissors: a third each, whatever the other plays
    for o in exact_outcomes(RandomPolicy(), RandomPolicy(), "openspiel:matrix_rps"):
        assert (o.win, o.draw, o.loss) == pytest.approx((1 / 3, 1 / 3, 1 / 3))
        assert o.mean_return == pytest.approx(0.0)


def test_three_players_each_seat_against_two_opponents():
    outs = exact_outcomes(RandomPolicy(), RandomPolicy(), "kuhn_poker", params={"players": 3})
    assert len(outs) == 3
    # uniform play everywhere: one game seen from three seats, zero-sum
    assert sum(o.mean_return for o in outs) == pytest.approx(0.0)
    assert sum(o.win for o in outs) == pytest.approx(1.0)  # one strict winner per deal


def test_sampled_and_greedy_together_ask_each_observation_once():
    key = lambda obs: (obs.text, obs.legal_actions)  # noqa: E731
    alone, both = Counting(key=key), Counting(key=key)
    sampled = exact_outcomes(alone, NashPolicy(), "kuhn_poker")
    greedy = exact_outcomes(alone, NashPolicy(), "kuhn_poker", greedy=True)
    asked_alone = alone.asked
    got = sampled_and_greedy_outcomes(both, NashPolicy(), "kuhn_poker")
    assert got == (sampled, greedy)
    assert both.asked == asked_alone / 2 == 12  # Kuhn's information states


def test_a_simultaneous_round_charges_every_player_who_forfeits():
    class HalfForfeits:  # each row sums to 1/2: forfeits half the time
        def action_probs(self, observations):
            return [
                dict.fromkeys(o.legal_actions, 0.5 / len(o.legal_actions)) for o in observations
            ]

    # Both forfeit 1/4 (-1 each: a draw), one alone 1/4 each, neither 1/4 (uniform
    # rock-paper-scissors: a third each of win, draw and loss).
    for o in exact_outcomes(HalfForfeits(), HalfForfeits(), "openspiel:matrix_rps"):
        assert o.mean_return == pytest.approx(-0.25)
        assert (o.win, o.draw, o.loss) == pytest.approx((1 / 3, 1 / 3, 1 / 3))


class Skewed(RandomPolicy):
    """Prefers [Bet] (0.8) wherever it is legal."""

    def action_probs(self, observations):
        return [{a: 0.2 if a == "[Pass]" else 0.8 for a in o.legal_actions} for o in observations]


def test_greedy_plays_the_most_likely_action_not_the_first_legal_one():
    # Always [Bet] from seat 0: the uniform opponent folds (+1) or calls (+-2 over a fair
    # deal). From seat 1 it bets after a pass (a fold half the time) and calls a bet.
    first, second = exact_outcomes(Skewed(), RandomPolicy(), "kuhn_poker", greedy=True)
    assert (first.win, first.loss, first.mean_return) == pytest.approx((0.75, 0.25, 0.5))
    assert (second.win, second.loss, second.mean_return) == pytest.approx((0.625, 0.375, 0.25))


def test_branches_of_probability_zero_are_not_walked():
    # [Pass] with probability 1 and [Bet] 0 from seat 0: the root, 3 deals of its card,
    # 6 of both, 6 passes, 12 replies (6 end the game, 6 bet) and 6 folds; the whole
    # tree has 58 histories.
    class AlwaysPass(RandomPolicy):
        def action_probs(self, observations):
            return [{"[Pass]": 1.0, "[Bet]": 0.0} for _ in observations]

    first, _ = exact_outcomes(AlwaysPass(), RandomPolicy(), "kuhn_poker")
    assert first.nodes == 34 and first.mean_return == pytest.approx(-0.5)
    assert exact_outcomes(AlwaysPass(), RandomPolicy(), "kuhn_poker", max_nodes=34)[0] == first
    with pytest.raises(ValueError, match="over 33 histories"):
        exact_outcomes(AlwaysPass(), RandomPolicy(), "kuhn_poker", max_nodes=33)


def test_auto_skips_perfect_information_games_over_the_size_limit(monkeypatch):
    from coplay.eval import exact_match

    monkeypatch.setattr(exact_match, "AUTO_MAX_HISTORIES", 1000)  # tic-tac-toe: 549,946
    spec, bots = make_env("tic_tac_toe").spec, {"perfect": PerfectPlayer()}
    assert exact_match_opponents("auto", spec, "tic_tac_toe", None, bots, exact=False) == ()


def test_auto_skips_a_game_without_openspiel_backend_even_with_exact_on():
    talk, bots = make_env("signalling").spec, {"perfect": PerfectPlayer()}
    assert exact_match_opponents("auto", talk, "signalling", None, bots, exact=True) == ()


def test_the_forfeits_of_a_round_are_each_sides_own():
    # Only the policy forfeits (half the time, -1), the uniform opponent never: no
    # drawn double forfeit. Else uniform rock-paper-scissors, a third each.
    class HalfForfeits:
        def action_probs(self, observations):
            return [
                dict.fromkeys(o.legal_actions, 0.5 / len(o.legal_actions)) for o in observations
            ]

    for o in exact_outcomes(HalfForfeits(), RandomPolicy(), "openspiel:matrix_rps"):
        assert (o.win, o.draw, o.loss) == pytest.approx((1 / 6, 1 / 6, 2 / 3))
        assert o.mean_return == pytest.approx(-0.5)


class _Answering(RandomPolicy):
    def __init__(self, answer):
        super().__init__(seed=0)
        self.answer = answer

    def action_probs(self, observations):
        return [dict(self.answer) for _ in observations]


@pytest.mark.parametrize(
    ("answer", "error"),
    [
        # Rows of 1.8 gave a win probability of 1.10; 1.5 and -0.5 a loss of 1.5.
        ({"[Pass]": 0.9, "[Bet]": 0.9}, r"sum to 1.800000 \(not 1\) at info state '0'"),
        ({"[Pass]": 1.5, "[Bet]": -0.5}, r"negative probability \(-0.5\) .* info state '0'"),
        ({"[Raise]": 1.0}, r"'\[Raise\]', not a legal action at info state '0'"),
    ],
)
def test_answers_that_are_no_distribution_are_refused(answer, error):
    with pytest.raises(ValueError, match=error):
        exact_outcomes(_Answering(answer), RandomPolicy(), "kuhn_poker")
