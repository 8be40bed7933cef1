"""Opponents by name or checkpoint path: each name plays as its policy should."""

import numpy as np
import pyspiel
import pytest

from coplay.envs import observation_for_state
from coplay.models.loading import save_policy
from coplay.policies.scripted import RandomPolicy
from coplay.population.opponents import OpponentPool, build_opponent
from coplay.types import Observation

J, Q, K = 0, 1, 2  # Kuhn's chance outcomes; a player's actions are 0 (pass) and 1 (bet)


def observe(game: str, actions: list[int]) -> Observation:
    """What the player to move sees after ``actions`` (chance outcomes included)."""
    state = pyspiel.load_game(game).new_initial_state()
    for a in actions:
        state.apply_action(a)
    return observation_for_state(state, state.current_player())


def bet(policy, game: str, actions: list[int]) -> float:
    return policy.action_probs([observe(game, actions)])[0]["[Bet]"]


def test_nash_plays_kuhns_equilibrium():
    # Kuhn's equilibria (Kuhn, 1950): the second player's strategy is unique; the first
    # bets a jack with some alpha in [0, 1/3], a king with 3 alpha, and calls a bet
    # with a queen with alpha + 1/3.
    nash = build_opponent("nash", "kuhn_poker")
    assert bet(nash, "kuhn_poker", [K, Q, 1]) == pytest.approx(1 / 3, abs=0.01)  # call
    assert bet(nash, "kuhn_poker", [Q, J, 0]) == pytest.approx(1 / 3, abs=0.01)  # bluff
    assert bet(nash, "kuhn_poker", [J, K, 1]) == pytest.approx(1.0, abs=0.01)
    assert bet(nash, "kuhn_poker", [K, J, 1]) == pytest.approx(0.0, abs=0.01)
    alpha = bet(nash, "kuhn_poker", [J, Q])
    assert 0.0 <= alpha <= 1 / 3 + 0.01
    assert bet(nash, "kuhn_poker", [Q, K]) == pytest.approx(0.0, abs=0.01)
    assert bet(nash, "kuhn_poker", [K, Q]) == pytest.approx(3 * alpha, abs=0.02)
    assert bet(nash, "kuhn_poker", [Q, K, 0, 1]) == pytest.approx(alpha + 1 / 3, abs=0.02)
    # "optimal" is the solved player of each game
    optimal = build_opponent("optimal", "kuhn_poker")
    assert bet(optimal, "kuhn_poker", [J, Q]) == alpha


@pytest.mark.parametrize("name", ["perfect", "optimal"])
def test_perfect_blocks_a_threat_and_takes_a_win(name):
    perfect = build_opponent(name, "tic_tac_toe")
    # x in the centre and at the top, o in a corner: o must block the middle column
    blocking = observe("tic_tac_toe", [4, 0, 1])
    assert "o x 2\n3 x 5\n6 7 8" in blocking.text
    # o can win the middle column or must otherwise block the left one: it wins
    winning = observe("tic_tac_toe", [0, 1, 2, 4, 3])
    assert "x o x\nx o 5\n6 7 8" in winning.text
    for obs in (blocking, winning):
        probs = perfect.action_probs([obs])[0]
        assert probs == {a: float(a == "[7]") for a in obs.legal_actions}
        assert {d.action for d in perfect.act([obs] * 20)} == {"[7]"}


def test_random_is_uniform_over_the_legal_actions_and_seeded():
    first, raised = observe("leduc_poker", [0, 1]), observe("leduc_poker", [0, 1, 2])
    assert first.legal_actions == ("[Call]", "[Raise]")
    assert raised.legal_actions == ("[Fold]", "[Call]", "[Raise]")
    policy = build_opponent("random", "leduc_poker", seed=3)
    assert policy.action_probs([first, raised]) == [
        {"[Call]": 0.5, "[Raise]": 0.5},
        dict.fromkeys(raised.legal_actions, 1 / 3),
    ]
    draws = [d.action for d in policy.act([raised] * 3000)]
    for a in raised.legal_actions:
        assert draws.count(a) / 3000 == pytest.approx(1 / 3, abs=0.03)
    again = [d.action for d in build_opponent("random", "leduc_poker", seed=3).act([raised] * 50)]
    other = [d.action for d in build_opponent("random", "leduc_poker", seed=4).act([raised] * 50)]
    assert again == draws[:50] != other


def test_a_checkpoint_path_is_a_frozen_copy_of_the_saved_policy(tiny_policy, tmp_path):
    save_policy(tiny_policy, tmp_path / "ckpt")
    frozen = build_opponent(str(tmp_path / "ckpt"), "kuhn_poker")
    assert frozen.policy_id == "frozen:ckpt"
    assert not any(p.requires_grad for p in frozen.model.parameters())
    obs = [observe("kuhn_poker", [J, Q]), observe("kuhn_poker", [K, Q, 1])]
    for mine, theirs in zip(tiny_policy.action_probs(obs), frozen.action_probs(obs), strict=True):
        assert theirs == pytest.approx(mine, abs=1e-6)


def test_unknown_opponent_names_the_choices():
    choices = "use one of random, nash, perfect, optimal or a checkpoint path"
    with pytest.raises(ValueError, match=f"unknown opponent 'grandmaster': {choices}"):
        build_opponent("grandmaster", "kuhn_poker")


def test_nash_needs_a_solvable_game():
    with pytest.raises(ValueError, match="does not play"):
        build_opponent("nash", "tic_tac_toe")


def test_solved_opponents_refuse_changed_games():
    with pytest.raises(ValueError, match="solved for the standard 'kuhn_poker' only"):
        build_opponent("nash", "kuhn_poker", params={"players": 3})
    three = build_opponent("random", "kuhn_poker", params={"players": 3})
    state = pyspiel.load_game("kuhn_poker", {"players": 3}).new_initial_state()
    for card in (0, 1, 2):
        state.apply_action(card)
    obs = observation_for_state(state, 0)
    assert three.action_probs([obs]) == [{"[Pass]": 0.5, "[Bet]": 0.5}]


def test_pool_samples_members_by_probability_and_self_play():
    a, b = RandomPolicy(policy_id="a"), RandomPolicy(policy_id="b")
    pool = OpponentPool([a, b], probs=[3.0, 1.0], self_play=0.5)
    draws = pool.sample(np.random.default_rng(0), [0] * 20_000)
    share = {k: sum((d.policy_id if d else None) == k for d in draws) / 20_000 for k in "ab"}
    assert draws.count(None) / 20_000 == pytest.approx(0.5, abs=0.02)
    assert share["a"] == pytest.approx(0.375, abs=0.02)
    assert share["b"] == pytest.approx(0.125, abs=0.02)
    assert (
        OpponentPool([a], self_play=1.0).sample(np.random.default_rng(0), [0, 1, 0]) == [None] * 3
    )


@pytest.mark.parametrize(
    "kwargs,match",
    [
        ({"members": [], "probs": None}, "empty"),
        ({"probs": [1.0]}, "non-negative"),
        ({"probs": [-1.0, 2.0]}, "non-negative"),
        ({"probs": [0.0, 0.0]}, "all be zero"),
        ({"self_play": 1.5}, "self_play"),
    ],
)
def test_pool_rejects_bad_settings(kwargs, match):
    members = kwargs.pop("members", [RandomPolicy(), RandomPolicy(seed=1)])
    with pytest.raises(ValueError, match=match):
        OpponentPool(members, **kwargs).sample(np.random.default_rng(0), [0] * 4)
