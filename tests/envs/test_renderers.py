"""Renderers: readable text that never shows what a player may not know.

The leak test is an invariant: the text must be a function of the player's OpenSpiel
information state, so two histories the player cannot tell apart (e.g. differing only
in the opponent's card) must render identically.
"""

import re

import numpy as np
import pyspiel
import pytest

from coplay.envs import observation_for_state, render, renderer_for
from coplay.envs.openspiel_games import load_openspiel_game


def all_decision_states(game):
    """Every decision node of a small game, by depth-first search."""
    stack = [game.new_initial_state()]
    while stack:
        state = stack.pop()
        if state.is_terminal():
            continue
        if not state.is_chance_node():
            yield state
        stack.extend(state.child(a) for a in state.legal_actions())


def random_states(game, episodes, seed=0):
    """Decision nodes along random playouts (for games too big to enumerate)."""
    rng = np.random.default_rng(seed)
    for _ in range(episodes):
        state = game.new_initial_state()
        while not state.is_terminal():
            if not state.is_chance_node():
                yield state
            actions = state.legal_actions()
            state.apply_action(actions[rng.integers(len(actions))])


def assert_text_depends_only_on_information_state(states):
    text_by_key: dict[tuple[int, str], str] = {}
    checked = 0
    for state in states:
        for player in range(state.num_players()):
            obs = observation_for_state(state, player)
            key = (player, state.information_state_string(player))
            assert text_by_key.setdefault(key, obs.text) == obs.text, (
                f"player {player} text leaks hidden information:\n"
                f"{text_by_key[key]}\nvs\n{obs.text}"
            )
            checked += 1
    assert checked > 0


@pytest.mark.parametrize("name", ["kuhn_poker", "leduc_poker"])
def test_poker_text_never_leaks_other_cards_exhaustive(name):
    game = pyspiel.load_game(name)
    assert_text_depends_only_on_information_state(all_decision_states(game))


@pytest.mark.parametrize(
    ("name", "params"),
    [("kuhn_poker", {"players": 3}), ("leduc_poker", {"players": 3}), ("liars_dice", {})],
)
def test_text_never_leaks_over_random_states(name, params):
    game = load_openspiel_game(name, params)
    assert_text_depends_only_on_information_state(random_states(game, 300))


def test_each_player_sees_only_their_own_card():
    game = pyspiel.load_game("kuhn_poker")
    for state in all_decision_states(game):
        deal = state.history()[:2]
        for player in range(2):
            text = observation_for_state(state, player).text
            assert f"Your card: {'JQK'[deal[player]]}." in text


def test_kuhn_text():
    state = pyspiel.load_game("kuhn_poker").new_initial_state()
    for action in [2, 0, 0, 1]:  # deal K, J; p0 passes; p1 bets
        state.apply_action(action)
    rendered = render(renderer_for("kuhn_poker"), state, 0)
    assert rendered.text == (
        "Kuhn poker, 2 players, cards J<Q<K, ante 1.\n"
        "You are player 0. Your card: K.\n"
        "History: p0 Pass, p1 Bet.\n"
        "Your legal actions: [Pass] [Bet]\n"
    )
    assert rendered.action_ids == (0, 1)
    assert rendered.action_id("[Bet]") == 1


def test_leduc_text_shows_public_card_and_rounds():
    state = pyspiel.load_game("leduc_poker").new_initial_state()
    for action in [5, 0, 2, 1, 2]:  # deal K, J; p0 raises, p1 calls; public Q (card 2)
        state.apply_action(action)
    text = render(renderer_for("leduc_poker"), state, 0).text
    assert "Your card: K. Public card: Q." in text
    assert "Round 1: p0 Raise, p1 Call. Round 2: none." in text
    assert "Pot: 6." in text
    assert text.endswith("Your legal actions: [Call] [Raise]\n")


def leduc_showdowns(game):
    """Every deal of ``game`` played to a showdown in which everyone calls throughout."""
    stack = [game.new_initial_state()]
    while stack:
        state = stack.pop()
        if state.is_terminal():
            yield state
        elif state.is_chance_node():
            stack.extend(state.child(a) for a, _ in state.chance_outcomes())
        else:
            stack.append(state.child(1))  # Call


@pytest.mark.parametrize("params", [{}, {"suit_isomorphism": True}, {"players": 3}])
def test_leduc_cards_named_decide_the_showdown_as_openspiel_does(params):
    # With suit_isomorphism OpenSpiel deals ranks (0..2), not card ids (0..5): a player
    # holding the K was told Q. The names must win and lose as OpenSpiel pays.
    game = pyspiel.load_game("leduc_poker", params)
    n, ranks = game.num_players(), "JQKA"
    for state in leduc_showdowns(game):
        hands = []
        for player in range(n):
            text = render(renderer_for("leduc_poker"), state, player).text
            own, public = re.search(r"Your card: (\w)\. Public card: (\w)\.", text).groups()
            hands.append((own == public, ranks.index(own)))
        best = max(hands)
        winners = {p for p in range(n) if hands[p] == best}
        returns = state.returns()
        if len(winners) == n:
            assert all(r == 0 for r in returns), (hands, returns)
        else:
            assert {p for p in range(n) if returns[p] > 0} == winners, (hands, returns)


def test_tic_tac_toe_board_and_cell_actions():
    state = pyspiel.load_game("tic_tac_toe").new_initial_state()
    for action in [4, 0]:
        state.apply_action(action)
    rendered = render(renderer_for("tic_tac_toe"), state, 0)
    assert "You play x" in rendered.text
    assert "o 1 2\n3 x 5\n6 7 8\n" in rendered.text
    assert rendered.legal_actions == ("[1]", "[2]", "[3]", "[5]", "[6]", "[7]", "[8]")
    assert rendered.action_ids == (1, 2, 3, 5, 6, 7, 8)


def test_generic_renderer_uses_openspiel_strings_and_clean_brackets():
    game = pyspiel.load_game("goofspiel", {"num_cards": 3})
    state = game.new_initial_state()
    while state.is_chance_node():
        state.apply_action(state.chance_outcomes()[0][0])
    rendered = render(renderer_for("goofspiel"), state, 1)
    assert rendered.text.startswith("Goofspiel, 2 players. You are player 1.\n")
    assert state.observation_string(1).rstrip() in rendered.text
    # OpenSpiel's "[P1]Bid: 1" loses its player tag so brackets stay unambiguous.
    assert rendered.legal_actions == ("[Bid: 1]", "[Bid: 2]", "[Bid: 3]")


def test_non_acting_player_has_no_legal_actions():
    state = pyspiel.load_game("tic_tac_toe").new_initial_state()
    rendered = render(renderer_for("tic_tac_toe"), state, 1)
    assert rendered.legal_actions == ()
    assert "legal actions" not in rendered.text
