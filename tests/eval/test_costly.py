"""Costly positions: each one's cost is exactly what changing that one answer earns."""

import pytest

from coplay.eval.costly import costly_positions
from coplay.eval.exact_match import exact_outcomes
from coplay.policies.scripted import NashPolicy, PerfectPlayer, RandomPolicy


class ByText(RandomPolicy):
    """Uniform play answering per observation text, except where told otherwise."""

    def __init__(self, fixed=None):
        super().__init__(seed=0)
        self.fixed = fixed or {}

    def observation_key(self, obs):
        return (obs.text, obs.legal_actions)

    def action_probs(self, observations):
        out = super().action_probs(observations)
        for obs, probs in zip(observations, out, strict=True):
            if obs.text in self.fixed:
                probs.update({a: float(a == self.fixed[obs.text]) for a in probs})
        return out


@pytest.mark.parametrize(("game", "checked"), [("kuhn_poker", 3), ("leduc_poker", 1)])
def test_a_positions_cost_is_what_playing_its_best_action_there_earns(game, checked):
    # The reference is an independent exact match of the policy with that one answer
    # changed: its mean return rises by the reported cost, for each of the top three in
    # Kuhn and the costliest in Leduc (where each exact match takes a second).
    opponent = NashPolicy(game)
    base = exact_outcomes(ByText(), opponent, game)
    for seat, found in enumerate(costly_positions(ByText(), opponent, game, top=3)):
        assert len(found) == 3 and found[0].cost >= found[1].cost >= found[2].cost > 0
        assert all(c.seat == seat and 0 < c.reach <= 1 for c in found)
        for c in found[:checked]:
            changed = exact_outcomes(ByText({c.observation: c.best}), opponent, game)
            gain = changed[seat].mean_return - base[seat].mean_return
            assert gain == pytest.approx(c.cost, abs=1e-9)


def test_perfect_play_has_nothing_to_gain_against_perfect_play():
    perfect = PerfectPlayer()
    assert costly_positions(perfect, perfect, "tic_tac_toe") == ((), ())


def test_against_the_perfect_player_o_must_answer_a_corner_with_the_centre():
    # Perfect x opens anywhere (1/9 each); after a corner only the centre draws for o.
    found = costly_positions(ByText(), PerfectPlayer(), "tic_tac_toe", top=4)[1]
    corners = {"x 1 2\n3 4 5\n6 7 8", "0 1 x\n3 4 5\n6 7 8", "0 1 2\n3 4 5\nx 7 8"}
    corners.add("0 1 2\n3 4 5\n6 7 x")
    assert {next(b for b in corners if b in c.observation) for c in found} == corners
    for c in found:
        assert c.best == "[4]" and c.reach == pytest.approx(1 / 9)
        assert c.played_prob == pytest.approx(1 / 8)


def test_bad_input_gives_a_clear_error():
    with pytest.raises(ValueError, match="over 50 histories"):
        costly_positions(RandomPolicy(), RandomPolicy(), "kuhn_poker", max_nodes=50)
    with pytest.raises(ValueError, match="no OpenSpiel backend"):
        costly_positions(RandomPolicy(), RandomPolicy(), "frozen_lake")
