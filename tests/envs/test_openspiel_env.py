"""The OpenSpiel adapter: seeding, legality, returns, simultaneous moves, n players."""

import numpy as np
import pyspiel
import pytest

from coplay.envs import OpenSpielEnv, make_env, observation_for_state
from coplay.types import Env, GameKind


def play_random(env: Env, seed: int, rng: np.random.Generator) -> list:
    """Play one game with uniform random actions; return every observation seen."""
    env.reset(seed)
    seen = []
    while not env.is_terminal():
        actions = {}
        for p in env.players_to_act():
            obs = env.observe(p)
            seen.append(obs)
            actions[p] = obs.legal_actions[rng.integers(len(obs.legal_actions))]
        env.step(actions)
    return seen


def test_is_an_env_with_spec_from_openspiel():
    env = make_env("leduc_poker")
    assert isinstance(env, Env)
    spec = env.spec
    assert (spec.name, spec.num_players, spec.kind) == ("leduc_poker", 2, GameKind.ZERO_SUM)
    assert (spec.min_return, spec.max_return, spec.max_turns) == (-13.0, 13.0, 8)
    assert not spec.perfect_information and not spec.simultaneous
    assert spec.openspiel_name == "leduc_poker"
    assert make_env("tic_tac_toe").spec.perfect_information
    assert make_env("openspiel:matrix_pd").spec.kind == GameKind.GENERAL_SUM


@pytest.mark.parametrize(
    ("name", "params"),
    [
        ("openspiel:goofspiel", {"num_cards": 3}),
        ("openspiel:oshi_zumo", {"coins": 3, "size": 1, "horizon": 2}),
        ("openspiel:python_iterated_prisoners_dilemma", {}),
    ],
)
def test_simultaneous_moves_hide_information_whatever_openspiel_marks(name, params):
    # OpenSpiel marks these perfect-information (all is public after each round), yet
    # no player sees the others' choices of the round it chooses in.
    env = make_env(name, **params)
    info = env.game.get_type().information
    assert info == pyspiel.GameType.Information.PERFECT_INFORMATION
    assert env.spec.simultaneous and not env.spec.perfect_information
    # One player moving alone hides nothing.
    assert make_env("openspiel:pathfinding").spec.perfect_information


def test_same_seed_same_deals_and_observations():
    env_a, env_b = make_env("leduc_poker"), make_env("leduc_poker")
    obs_a = play_random(env_a, seed=7, rng=np.random.default_rng(1))
    obs_b = play_random(env_b, seed=7, rng=np.random.default_rng(1))
    assert obs_a == obs_b
    assert env_a.returns() == env_b.returns()


def test_different_seeds_give_different_deals():
    env = make_env("kuhn_poker")
    deals = set()
    for seed in range(30):
        env.reset(seed)
        deals.add(tuple(env.state.history()))
    assert len(deals) == 6  # every permutation of 2 of 3 cards turns up


def test_players_see_different_private_cards():
    env = make_env("kuhn_poker")
    env.reset(3)
    cards = env.state.history()
    texts = [env.observe(p).text for p in range(2)]
    names = "JQK"
    assert f"Your card: {names[cards[0]]}." in texts[0]
    assert f"Your card: {names[cards[1]]}." in texts[1]
    assert f"Your card: {names[cards[1]]}." not in texts[0]


def test_legal_actions_and_returns_match_openspiel():
    rng = np.random.default_rng(0)
    for name in ["kuhn_poker", "leduc_poker", "tic_tac_toe", "openspiel:liars_dice"]:
        env = make_env(name)
        for seed in range(20):
            env.reset(seed)
            while not env.is_terminal():
                (p,) = env.players_to_act()
                assert p == env.state.current_player()
                obs = env.observe(p)
                assert len(obs.legal_actions) == len(env.state.legal_actions(p))
                action = obs.legal_actions[rng.integers(len(obs.legal_actions))]
                shadow = env.state.clone()
                env.step({p: f"thinking... {action.lower()}"})
                shadow_history = env.state.history()[: len(shadow.history()) + 1]
                shadow.apply_action(shadow_history[-1])
                assert shadow_history == shadow.history()
            assert env.returns() == list(env.state.returns())
            assert env.players_to_act() == []


def test_info_key_is_openspiel_information_state():
    env = make_env("kuhn_poker")
    env.reset(0)
    assert env.observe(0).info_key == env.state.information_state_string(0)
    ttt = make_env("tic_tac_toe")
    ttt.step({0: "[4]"})
    ttt.step({1: "[0]"})
    assert ttt.observe(0).info_key == "4, 0"


def test_observation_for_state_equals_env_observe():
    env = make_env("leduc_poker")
    env.reset(11)
    env.step({0: "[Raise]"})
    assert observation_for_state(env.state, 1) == env.observe(1)
    assert env.observe_state(env.state.clone(), 1) == env.observe(1)


def test_three_player_kuhn_plays_to_the_end():
    env = make_env("kuhn_poker", players=3)
    rng = np.random.default_rng(0)
    for seed in range(20):
        seen = play_random(env, seed, rng)
        assert {o.player for o in seen} >= {0, 1, 2}
        assert "cards J<Q<K<A" in seen[0].text
        assert sum(env.returns()) == pytest.approx(0.0)


def test_simultaneous_moves_goofspiel():
    env = make_env("openspiel:goofspiel", num_cards=3)
    assert env.spec.simultaneous
    env.reset(0)
    assert env.players_to_act() == [0, 1]
    assert env.observe(0).legal_actions == ("[Bid: 1]", "[Bid: 2]", "[Bid: 3]")
    steps = 0
    while not env.is_terminal():
        env.step({p: env.observe(p).legal_actions[0] for p in env.players_to_act()})
        steps += 1
    assert steps == 2  # OpenSpiel plays the last, forced, bid itself
    assert env.returns() == [0.0, 0.0]  # identical bids tie every round


def test_simultaneous_matrix_game_returns():
    env = make_env("openspiel:matrix_pd")
    env.reset(0)
    rewards = env.step({0: "[Cooperate]", 1: "[Defect]"})
    assert rewards == {0: 0.0, 1: 0.0}  # terminal-reward game: the outcome is in returns()
    assert env.is_terminal()
    assert env.returns() == [0.0, 10.0]


def test_step_rejects_wrong_players_and_illegal_actions():
    env = make_env("kuhn_poker")
    env.reset(0)
    with pytest.raises(ValueError, match=r"expected actions for players \[0\]"):
        env.step({1: "[Bet]"})
    with pytest.raises(ValueError, match=r"names no legal action; legal: \[Pass\] \[Bet\]"):
        env.step({0: "[Fold]"})
    assert env.parse_action(0, "I [bet]") == "[Bet]"
    assert env.parse_action(0, "fold") is None


@pytest.mark.parametrize("name", ["kuhn_poker", "openspiel:matrix_rps"])
def test_a_step_after_the_end_is_one_line(name):
    env = make_env(name)
    play_random(env, seed=0, rng=np.random.default_rng(0))
    # Nobody is to act, so {} passed the players check and raised IndexError.
    with pytest.raises(ValueError, match=rf"^{name}: the game is over; call reset\(seed\)"):
        env.step({})


def test_intermediate_rewards_are_reported_by_step():
    # cliff_walking costs -1 per step: a dense-reward game.
    env = make_env("openspiel:cliff_walking", horizon=6)
    assert pyspiel.load_game("cliff_walking").get_type().reward_model.name == "REWARDS"
    rewards = []
    while not env.is_terminal():
        (p,) = env.players_to_act()
        rewards.append(env.step({p: env.observe(p).legal_actions[0]})[p])
    assert all(r < 0 for r in rewards)
    assert sum(rewards) == pytest.approx(env.returns()[0])


def test_direct_construction_with_name():
    env = OpenSpielEnv("kuhn_poker", name="my_kuhn")
    assert env.observe(0).game == "my_kuhn"


@pytest.mark.parametrize(
    "name, params",
    [("kuhn_poker", {}), ("leduc_poker", {}), ("openspiel:goofspiel", {"num_cards": 4})],
)
def test_a_sibling_plays_exactly_as_a_newly_built_env(name, params):
    """``make_env`` builds later envs of a game as siblings of the first; each plays
    as a constructed one does, and games played side by side do not share a state."""
    first, second = make_env(name, **params), make_env(name, **params)
    built = OpenSpielEnv(name.removeprefix("openspiel:"), name=first.spec.name, params=params)
    assert second.game is first.game and second.spec == built.spec
    for seed in range(5):
        seen = [play_random(e, seed, np.random.default_rng(seed)) for e in (second, built)]
        assert seen[0] == seen[1] and second.returns() == built.returns()
    first.reset(1)
    second.reset(2)
    acting, view = first.players_to_act(), first.observe(first.players_to_act()[0])
    second.step({p: second.observe(p).legal_actions[-1] for p in second.players_to_act()})
    assert first.players_to_act() == acting and first.observe(acting[0]) == view


def test_acting_players_and_views_follow_every_step():
    """Who acts and what they see are kept between steps; every step and reset renews
    them, down to the terminal state."""
    env = make_env("kuhn_poker")
    env.reset(3)
    for action in ["[Pass]", "[Bet]", "[Bet]"]:
        (p,) = env.players_to_act()
        assert env.observe(p) == observation_for_state(env.state, p, game_name="kuhn_poker")
        env.players_to_act().clear()  # a caller's list is its own
        env.step({p: action})
    assert env.is_terminal() and env.players_to_act() == []
    env.reset(3)
    assert env.players_to_act() == [0]


def test_a_view_by_observation_is_rendered_once_per_board_with_each_history_its_key():
    """Two move orders that reach one tic-tac-toe board show the same text and legal
    actions, rendered once, each with its own information-state key."""
    from coplay.envs.renderers import RENDERERS, Renderer

    ttt = RENDERERS["tic_tac_toe"]
    drawn = []

    def describe(state, player):
        drawn.append(str(state))
        return ttt.describe(state, player)

    renderer = Renderer(describe, ttt.action_name, per_info_state=True, per_observation=True)
    views = []
    for order in (["[0]", "[4]", "[8]"], ["[8]", "[4]", "[0]"]):
        env = OpenSpielEnv("tic_tac_toe", renderer=renderer)
        env.reset(0)
        for action in order:
            env.step({env.players_to_act()[0]: action})
        views.append((env.observe(1), env.state.information_state_string(1), env.state))
    (first, first_key, first_state), (second, second_key, second_state) = views
    assert drawn.count(drawn[-1]) == 1  # the shared board, drawn once
    assert (first.text, first.legal_actions) == (second.text, second.legal_actions)
    assert (first.info_key, second.info_key) == (first_key, second_key)
    assert first_key != second_key
    for obs, state in ((first, first_state), (second, second_state)):
        assert obs == observation_for_state(state, 1, game_name=obs.game, renderer=renderer)


def test_payoff_kinds_and_the_turn_cap_of_the_spec():
    from types import SimpleNamespace

    from coplay.envs.openspiel_env import MAX_TURNS_CAP, game_spec

    assert make_env("openspiel:tiny_hanabi").spec.kind == GameKind.COOPERATIVE
    assert make_env("openspiel:chess").spec.max_turns == MAX_TURNS_CAP  # its own: 17,695
    # No registered game declares a constant sum; one that does is zero-sum up to a shift.
    kuhn = pyspiel.load_game("kuhn_poker")
    constant = SimpleNamespace(
        get_type=lambda: SimpleNamespace(
            utility=pyspiel.GameType.Utility.CONSTANT_SUM,
            information=pyspiel.GameType.Information.IMPERFECT_INFORMATION,
            dynamics=pyspiel.GameType.Dynamics.SEQUENTIAL,
            short_name="constant",
        ),
        num_players=kuhn.num_players,
        max_game_length=kuhn.max_game_length,
        min_utility=kuhn.min_utility,
        max_utility=kuhn.max_utility,
    )
    assert game_spec(constant, "constant").kind == GameKind.ZERO_SUM


def test_step_rewards_are_the_change_in_the_returns():
    # Up from the start of the cliff walk: -1 a step, never the cliff's -100.
    env = make_env("openspiel:cliff_walking", horizon=6)
    rewards = [env.step({0: "[UP]"})[0] for _ in range(6)]
    assert env.is_terminal() and rewards == [-1.0] * 6 and env.returns() == [-6.0]


def test_a_python_game_that_keeps_updating_its_returns_is_differenced():
    env = make_env("openspiel:python_iterated_prisoners_dilemma")
    env.reset(3)
    rewards = []
    while not env.is_terminal():
        rewards.append(env.step({p: "[COOPERATE]" for p in env.players_to_act()}))
    assert all(r == {0: 5.0, 1: 5.0} for r in rewards)
    assert env.returns() == [5.0 * len(rewards)] * 2


def test_a_state_shows_the_game_name_the_registry_gives_it():
    env = make_env("openspiel:goofspiel", num_cards=3)
    env.reset(0)
    assert observation_for_state(env.state, 0) == env.observe(0)
    assert env.observe(0).game == "openspiel:goofspiel"


def test_siblings_do_not_share_what_they_have_shown():
    first, second = make_env("kuhn_poker"), make_env("kuhn_poker")
    first.reset(0)
    second.reset(2)
    assert first.state.history()[0] != second.state.history()[0]  # seat 0's cards differ
    first.observe(0)
    assert second.observe(0) == observation_for_state(second.state, 0, game_name="kuhn_poker")
