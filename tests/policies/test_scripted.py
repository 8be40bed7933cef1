"""Scripted policies: uniform random, CFR+ Nash for poker, perfect tic-tac-toe."""

import numpy as np
import pyspiel
import pytest
from open_spiel.python.algorithms import exploitability
from open_spiel.python.algorithms.expected_game_score import policy_value
from open_spiel.python.policy import TabularPolicy

from coplay.envs import make_env, observation_for_state
from coplay.envs.renderers import legal_action_map, renderer_for
from coplay.policies import NashPolicy, PerfectPlayer, RandomPolicy, make_scripted, solvers
from coplay.policies.scripted import TablePolicy
from coplay.types import Decision, Observation, Policy, TabularQueryable


@pytest.fixture(autouse=True)
def isolated_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("COPLAY_CACHE_DIR", str(tmp_path))


def to_tabular(game: pyspiel.Game, policy) -> TabularPolicy:
    """OpenSpiel tabular policy that asks ``policy`` once per information state."""
    tabular = TabularPolicy(game)
    renderer = renderer_for(game.get_type().short_name)
    for row, state in enumerate(tabular.states):
        player = state.current_player()
        ids = legal_action_map(renderer, state, player)
        (probs,) = policy.action_probs([observation_for_state(state, player)])
        tabular.action_probability_array[row] = 0.0
        for action, prob in probs.items():
            tabular.action_probability_array[row, ids[action]] = prob
    return tabular


def play(env, policies, seed):
    env.reset(seed)
    while not env.is_terminal():
        acting = env.players_to_act()
        decisions = {p: policies[p].act([env.observe(p)])[0] for p in acting}
        env.step({p: d.action for p, d in decisions.items()})
    return env.returns()


def test_random_policy_is_uniform_seeded_and_protocol_compliant():
    env = make_env("leduc_poker")
    env.reset(0)
    obs = env.observe(0)
    policy = RandomPolicy(seed=3)
    assert isinstance(policy, Policy) and isinstance(policy, TabularQueryable)
    assert policy.action_probs([obs]) == [{"[Call]": 0.5, "[Raise]": 0.5}]
    (decision,) = policy.act([obs])
    assert isinstance(decision, Decision)
    assert decision.text == decision.action and decision.action in obs.legal_actions
    assert not decision.trainable and decision.response_ids == ()
    draws = [d.action for d in RandomPolicy(seed=3).act([obs] * 50)]
    assert draws == [d.action for d in RandomPolicy(seed=3).act([obs] * 50)]
    assert set(draws) == {"[Call]", "[Raise]"}


def test_uniform_random_kuhn_nash_conv_is_known_value():
    # OpenSpiel's reference: NashConv of uniform random in 2-player Kuhn is 11/12.
    game = pyspiel.load_game("kuhn_poker")
    tabular = to_tabular(game, RandomPolicy())
    assert exploitability.nash_conv(game, tabular) == pytest.approx(11 / 12)


def test_kuhn_nash_is_nearly_unexploitable_and_has_game_value():
    game = pyspiel.load_game("kuhn_poker")
    tabular = to_tabular(game, NashPolicy("kuhn_poker"))
    assert exploitability.exploitability(game, tabular) < 1e-3
    value = policy_value(game.new_initial_state(), [tabular, tabular])
    assert value[0] == pytest.approx(-1 / 18, abs=1e-3)  # Kuhn's game value for player 0


def test_leduc_nash_is_nearly_unexploitable():
    game = pyspiel.load_game("leduc_poker")
    tabular = to_tabular(game, NashPolicy("leduc_poker"))
    assert exploitability.exploitability(game, tabular) < 0.01


def test_nash_table_is_cached_on_disk(tmp_path):
    solvers.kuhn_leduc_nash_table.cache_clear()
    table = solvers.kuhn_leduc_nash_table("kuhn_poker", 50)
    path = tmp_path / "nash_kuhn_poker_cfrplus50.json"
    assert path.exists()
    solvers.kuhn_leduc_nash_table.cache_clear()
    assert solvers.kuhn_leduc_nash_table("kuhn_poker", 50) == table


def test_nash_policy_plays_through_the_env():
    env = make_env("kuhn_poker")
    policies = [NashPolicy("kuhn_poker", seed=0), NashPolicy("kuhn_poker", seed=1)]
    returns = [play(env, policies, seed)[0] for seed in range(200)]
    assert abs(np.mean(returns) - (-1 / 18)) < 0.25  # noisy, but not absurd


@pytest.mark.parametrize("seat", [0, 1])
def test_perfect_player_never_loses_to_random(seat):
    env = make_env("tic_tac_toe")
    policies = [RandomPolicy(seed=seat), RandomPolicy(seed=seat)]
    policies[seat] = PerfectPlayer(seed=seat)
    results = [play(env, policies, seed)[seat] for seed in range(50)]
    assert min(results) >= 0.0
    assert max(results) == 1.0  # and it does beat a random player


def test_perfect_player_draws_against_itself():
    env = make_env("tic_tac_toe")
    policies = [PerfectPlayer(seed=0), PerfectPlayer(seed=1)]
    assert all(play(env, policies, seed) == [0.0, 0.0] for seed in range(20))


def test_perfect_player_probs_are_uniform_over_optimal_moves():
    env = make_env("tic_tac_toe")
    env.step({0: "[4]"})
    (probs,) = PerfectPlayer().action_probs([env.observe(1)])
    assert probs == {a: (0.25 if a in {"[0]", "[2]", "[6]", "[8]"} else 0.0) for a in probs}


def test_make_scripted_names_and_errors():
    assert isinstance(make_scripted("random", "openspiel:liars_dice", 0), RandomPolicy)
    assert isinstance(make_scripted("nash", "kuhn_poker", 0), NashPolicy)
    assert isinstance(make_scripted("optimal", "kuhn_poker", 0), NashPolicy)
    assert isinstance(make_scripted("optimal", "tic_tac_toe", 0), PerfectPlayer)
    with pytest.raises(ValueError, match="unknown scripted policy 'foo'; available: random, nash"):
        make_scripted("foo", "kuhn_poker", 0)
    with pytest.raises(ValueError, match="'nash' does not play 'tic_tac_toe'"):
        make_scripted("nash", "tic_tac_toe", 0)
    with pytest.raises(ValueError, match="no optimal scripted policy for 'openspiel:goofspiel'"):
        make_scripted("optimal", "openspiel:goofspiel", 0)


def test_random_answers_free_text_turns_with_an_empty_message():
    from coplay.types import Observation

    obs = [
        Observation(game="g", player=0, text="say something"),
        Observation(game="g", player=1, text="pick", legal_actions=("[A]", "[B]")),
    ]
    talk, pick = RandomPolicy(seed=0).act(obs)
    assert (talk.text, talk.action) == ("", "")
    assert pick.action in ("[A]", "[B]")


def test_a_table_row_without_mass_on_the_legal_actions_is_an_error_naming_its_state():
    obs = Observation("kuhn_poker", 0, "t", legal_actions=("[Pass]", "[Bet]"), info_key="0")
    table = TablePolicy({"0": {"[Call]": 1.0}, "1": {"[Pass]": 1.0}}, policy_id="br")
    with pytest.raises(ValueError, match="br: .*none of the legal actions.*state '0'"):
        table.act([obs])
    with pytest.raises(ValueError, match="br: .*no action a positive probability.*state '1'"):
        TablePolicy({"0": {"[Pass]": 1.0}, "1": {"[Pass]": 0.0, "[Bet]": 0.0}}, policy_id="br")
