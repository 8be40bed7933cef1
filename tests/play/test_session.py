"""Session: the game loop between people and policies, checked against the games' rules."""

from __future__ import annotations

import doctest
from functools import partial

import pytest

from coplay.envs.registry import make_env
from coplay.play import session as session_module
from coplay.play.session import (
    AGENT_RETRIES,
    Forfeit,
    IllegalMove,
    PlayerFailed,
    Session,
    read_move,
    verdict,
)
from coplay.policies.scripted import make_scripted
from coplay.types import Decision, Observation
from tests.play.referee import kuhn_card, kuhn_returns, tic_tac_toe_board, tic_tac_toe_returns


def kuhn(agent="random", **kwargs) -> Session:
    players = {"you": None, agent: make_scripted(agent, "kuhn_poker", 0)}
    return Session(partial(make_env, "kuhn_poker"), players, ["you", agent], **kwargs)


def test_doctests():
    result = doctest.testmod(session_module)
    assert result.attempted > 0 and result.failed == 0


@pytest.mark.parametrize("answers", [["1", "1"], ["bet", "bet"], ["[Pass]", "2"], ["2", "2"]])
def test_a_person_plays_kuhn_and_the_returns_follow_the_rules(answers):
    for seed in range(6):
        s = kuhn("nash", seed=seed)
        s.new_game()
        s.advance()
        mine = iter(answers)
        while s.outcome is None:
            (seat,) = s.waiting()
            assert seat == 0
            s.answer(seat, next(mine))
            s.advance()
        cards = [kuhn_card(v) for v in s.outcome.views]
        assert cards[0] == kuhn_card(s.moves[0].view)  # the person's card did not change
        assert s.outcome.returns == kuhn_returns(cards, [m.action for m in s.moves])
        assert s.score["you"].total == s.outcome.returns[0]


def test_rotating_seats_and_the_running_score():
    s = kuhn("random", seed=3, rotate=True)
    seats_played, totals = [], [0.0, 0.0]
    for _ in range(4):
        s.new_game()
        s.advance()
        seats_played.append(s.person_seats())
        while s.outcome is None:
            s.answer(s.waiting()[0], "1")
            s.advance()
        you = s.person_seats()[0]
        totals[0] += s.outcome.returns[you]
        totals[1] += s.outcome.returns[1 - you]
    assert seats_played == [[0], [1], [0], [1]]
    assert (s.score["you"].total, s.score["random"].total) == tuple(totals)
    you = s.score["you"]
    assert you.wins + you.draws + you.losses == 4 and you.draws == 0  # Kuhn never draws
    assert s.games_played == 4


def test_seeds_deal_the_same_cards_again():
    first, again = kuhn(seed=7), kuhn(seed=7)
    first.new_game()
    again.new_game()
    assert first.view(0).text == again.view(0).text


def test_an_imperfect_information_game_hides_the_agents_moves_until_the_end():
    s = kuhn("random", seed=1)
    s.new_game()
    s.advance()
    s.answer(0, "[Pass]")
    s.advance()
    if s.outcome is None:  # the agent bet: its move shows only through the person's view
        assert [s.shows(m) for m in s.moves] == [True, False]
        assert "p1 Bet" in s.view(0).text
        s.answer(0, "[Pass]")
        s.advance()
    assert all(s.shows(m) for m in s.moves)


def test_show_probs_gives_the_policy_distribution_over_the_legal_moves():
    s = kuhn("nash", seed=0, show_probs=True)
    s.new_game()
    s.advance()
    s.answer(0, "[Bet]")
    s.advance()
    agent = s.moves[1]
    assert set(agent.probs) == {"[Pass]", "[Bet]"}
    assert sum(agent.probs.values()) == pytest.approx(1.0)
    assert s.shows(agent)


def test_tic_tac_toe_against_the_perfect_player_is_never_won():
    players = {"you": None, "perfect": make_scripted("perfect", "tic_tac_toe", 0)}
    s = Session(partial(make_env, "tic_tac_toe"), players, ["you", "perfect"])
    for _ in range(3):
        s.new_game()
        s.advance()
        while s.outcome is None:
            legal = s.view(0).legal_actions
            s.answer(0, legal[-1].strip("[]"))  # a cell's name, never a position
            s.advance()
        assert s.outcome.returns == tic_tac_toe_returns(tic_tac_toe_board(s.outcome.views[0]))
        assert s.outcome.returns[0] <= 0
        assert all(s.shows(m) for m in s.moves)  # perfect information


def test_watching_advances_one_step_at_a_time():
    players = {
        "nash": make_scripted("nash", "kuhn_poker", 0),
        "random": make_scripted("random", "kuhn_poker", 1),
    }
    s = Session(partial(make_env, "kuhn_poker"), players, ["nash", "random"])
    s.new_game()
    assert s.moves == [] and s.person_seats() == []
    assert len(s.advance(max_steps=1)) == 1
    s.advance()
    assert s.outcome is not None and 2 <= len(s.moves) <= 3


def test_read_move_accepts_the_name_its_number_or_text_the_game_parses():
    obs = Observation("kuhn_poker", 0, "", legal_actions=("[Pass]", "[Bet]"))
    env = make_env("kuhn_poker")
    env.reset(0)
    parse = partial(env.parse_action, 0)
    assert read_move(" BET ", obs, parse) == "[Bet]"
    assert read_move("2", obs, parse) == "[Bet]"
    assert read_move("I will [pass]", obs, parse) == "[Pass]"
    for wrong in ("3", "0", "raise", ""):
        with pytest.raises(IllegalMove, match="legal: \\[Pass\\] \\[Bet\\]"):
            read_move(wrong, obs, parse)
    cells = Observation("tic_tac_toe", 0, "", legal_actions=("[2]", "[5]"))
    assert read_move("2", cells, lambda t: None) == "[2]"  # cell 2, not the second move
    with pytest.raises(IllegalMove):
        read_move("1", cells, lambda t: None)


@pytest.mark.parametrize("digits", ["\u00b2", "\u0661", "\uff12"])
def test_a_number_in_other_digits_is_an_illegal_move_not_a_crash(digits):
    # '²', Arabic-Indic 1 and fullwidth 2 pass str.isdigit; a move number is ASCII.
    obs = Observation("kuhn_poker", 0, "", legal_actions=("[Pass]", "[Bet]"))
    with pytest.raises(IllegalMove, match="legal: \\[Pass\\] \\[Bet\\]"):
        read_move(digits, obs, lambda t: None)
    s = kuhn(seed=0)
    s.new_game()
    s.advance()
    (seat,) = s.waiting()
    with pytest.raises(IllegalMove, match="is no legal move"):
        s.answer(seat, digits)


def test_a_number_too_long_for_int_is_an_illegal_move_not_the_end_of_the_session():
    # int() refuses more than 4300 digits: a ValueError, which the prompt does not
    # catch, ended the session with exit status 2 instead of asking again.
    obs = Observation("kuhn_poker", 0, "", legal_actions=("[Pass]", "[Bet]"))
    with pytest.raises(IllegalMove, match="legal: \\[Pass\\] \\[Bet\\]"):
        read_move("1" * 5000, obs, lambda t: None)
    assert read_move("0" * 5000 + "2", obs, lambda t: None) == "[Bet]"  # still move 2


def test_a_huge_answer_is_quoted_short_so_the_legal_moves_stay_in_view():
    # A pasted page was quoted whole: the legal moves came after megabytes of it.
    obs = Observation("kuhn_poker", 0, "", legal_actions=("[Pass]", "[Bet]"))
    with pytest.raises(IllegalMove) as err:
        read_move("x" * 2_000_000, obs, lambda t: None)
    assert len(str(err.value)) < 120 and str(err.value).endswith("legal: [Pass] [Bet]")
    free = Observation("negotiation", 0, "")  # a turn that takes a message
    with pytest.raises(IllegalMove, match="here; write a message$") as err:
        read_move("y" * 2_000_000, free, lambda t: None)
    assert len(str(err.value)) < 120


def test_answers_out_of_turn_are_refused():
    s = kuhn(seed=0)
    s.new_game()
    s.advance()
    with pytest.raises(IllegalMove, match="seat 1 is not to move"):
        s.answer(1, "[Bet]")
    with pytest.raises(ValueError, match="not over"):
        s.new_game()


class Mute:
    """A policy that never names a legal move (its answers numbered: hmm 1, hmm 2, ...)."""

    policy_id, version = "mute", 0

    def __init__(self):
        self.asked = 0

    def act(self, observations):
        self.asked += len(observations)
        return [Decision(text=f"hmm {self.asked}", action=None, policy_id="mute")]


def test_a_policy_without_a_legal_move_forfeits():
    s = Session(partial(make_env, "kuhn_poker"), {"you": None, "mute": Mute()}, ["mute", "you"])
    s.new_game()
    s.advance()
    assert s.outcome is not None and s.outcome.forfeited_by == 0
    assert s.outcome.returns == (-2.0, 2.0)  # Kuhn's minimum return, zero-sum
    assert verdict(s.outcome.returns, 1) == "won"


def test_a_forfeit_keeps_what_the_policy_saw_and_every_answer_it_gave():
    # The outcome said only who forfeited: the answers refused were dropped.
    s = Session(partial(make_env, "kuhn_poker"), {"you": None, "mute": Mute()}, ["you", "mute"])
    s.new_game()
    s.answer(0, "[Bet]")
    s.advance()
    forfeit = s.outcome.forfeit
    assert (forfeit.seat, forfeit.player) == (1, "mute")
    assert forfeit.answers == tuple(f"hmm {i}" for i in range(1, 2 + AGENT_RETRIES))
    assert forfeit.view == s.outcome.views[1] and "You are player 1" in forfeit.view
    assert "History: p0 Bet." in forfeit.view  # the turn it answered: after the bet
    down = Session(partial(make_env, "kuhn_poker"), {"you": None, "down": Down()}, ["down", "you"])
    down.new_game()
    with pytest.raises(PlayerFailed):
        down.advance()
    assert down.outcome.forfeit == Forfeit(0, "down", down.view(0).text, ())


def test_a_forfeit_keeps_the_other_seats_moves_of_its_step_in_the_log():
    # A simultaneous round: the person writes first, then the policy forfeits. The
    # game applies neither, but the log keeps the person's message of that step.
    s = Session(partial(make_env, "dilemma"), {"you": None, "mute": Mute()}, ["you", "mute"])
    s.new_game()
    s.advance()
    s.answer(0, "deal?")
    s.advance()
    assert s.outcome is not None and s.outcome.forfeited_by == 1
    assert [(m.step, m.seat, m.action) for m in s.moves] == [(0, 0, "deal?")]
    down = Session(partial(make_env, "dilemma"), {"you": None, "down": Down()}, ["you", "down"])
    down.new_game()
    down.advance()
    down.answer(0, "deal?")
    with pytest.raises(PlayerFailed):
        down.advance()
    assert [(m.seat, m.action) for m in down.moves] == [(0, "deal?")]


def test_a_lineup_must_fill_the_game():
    with pytest.raises(ValueError, match="2 seats but the lineup names 1"):
        Session(partial(make_env, "kuhn_poker"), {"you": None}, ["you"])
    with pytest.raises(ValueError, match="unknown players: bob"):
        Session(partial(make_env, "kuhn_poker"), {"you": None}, ["you", "bob"])


class Down:
    """A remote policy whose endpoint is down."""

    policy_id, version = "down", 0

    def act(self, observations):
        raise ConnectionError("cannot reach http://127.0.0.1:9/v1")


def test_a_policy_that_cannot_answer_forfeits_and_the_table_goes_on():
    s = Session(partial(make_env, "kuhn_poker"), {"you": None, "down": Down()}, ["you", "down"])
    s.new_game()
    s.answer(0, "[Bet]")
    with pytest.raises(PlayerFailed, match="down could not answer and forfeits: cannot reach"):
        s.advance()
    assert s.outcome is not None and s.outcome.forfeited_by == 1  # not stuck mid-step
    s.new_game()  # the next deal is allowed


class Chatty:
    """A chat-context policy: reads its own earlier decisions (``wants_history``)."""

    policy_id, version, wants_history, mode = "chatty", 0, True, "text"

    def __init__(self):
        self.seen = []

    def act(self, observations):
        self.seen += [len(o.history) for o in observations]
        legal = observations[0].legal_actions
        return [Decision(text=legal[0], action=legal[0], policy_id="chatty")]

    def action_probs(self, observations):
        raise ValueError("a writing policy has no exact choice distribution")


def test_a_chat_policy_plays_with_its_conversation_and_shows_no_probabilities():
    chatty = Chatty()
    players = {"chatty": chatty, "pass": make_scripted("random", "tic_tac_toe", 0)}
    s = Session(partial(make_env, "tic_tac_toe"), players, ["chatty", "pass"], show_probs=True)
    s.new_game()
    s.advance()  # two policies: the whole game
    assert chatty.seen == list(range(len(chatty.seen))) and len(chatty.seen) >= 3
    assert all(m.probs is None for m in s.moves if m.player == "chatty")
