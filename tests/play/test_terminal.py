"""``coplay play`` at a prompt: a person plays whole games through a pseudo-terminal."""

from __future__ import annotations

import doctest
import os
import re
import sys
from functools import partial
from pathlib import Path

import pytest

from coplay.envs.registry import make_env
from coplay.play import terminal
from coplay.play.session import Session
from coplay.play.terminal import play_in_terminal
from coplay.policies.scripted import make_scripted
from coplay.types import Decision
from tests.play.ctrl_c import ctrl_c_as_at_a_terminal
from tests.play.garbage import Garbage
from tests.play.referee import kuhn_card, kuhn_returns, tic_tac_toe_board, tic_tac_toe_returns

pexpect = pytest.importorskip("pexpect", reason="the terminal tests drive a pty with pexpect")

ROOT = Path(__file__).resolve().parents[2]
PROMPT = r"your move \(q quits\)> "
RESULT = r"game over: you (won|lost|drew) \(([+-]\d+)\)\r\nreturns: seat 0 (\S+) ([+-]\d+), seat 1 (\S+) ([+-]\d+)\r\nmoves: ([^\r]*)\r\n"


def spawn(*args: str):
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1", "COLUMNS": "200"}
    return pexpect.spawn(
        sys.executable,
        ["-m", "coplay.cli", "play", *args],
        env=env,
        encoding="utf-8",
        timeout=60,
        preexec_fn=ctrl_c_as_at_a_terminal,
    )


def test_doctests():
    result = doctest.testmod(terminal)
    assert result.attempted > 0 and result.failed == 0


def play_kuhn_game(child, answers) -> tuple[str, list[float], list[str], list[str]]:
    """Answer each prompt from ``answers`` until the game ends; the verdict, returns,
    moves and both seats' cards as the terminal announced them."""
    my_card = None
    while child.expect([PROMPT, RESULT]) == 0:
        if "not a legal move" not in child.before:  # a re-prompt does not repeat the view
            card = kuhn_card(child.before)
            assert my_card in (None, card)  # one private card, the person's own
            assert "You are player" in child.before and child.before.count("Your card") == 1
            my_card = card
        child.sendline(next(answers))
    word, mine, *seats = child.match.groups()
    returns = [float(seats[1]), float(seats[3])]
    moves = [m.split()[-1] for m in seats[4].split(" · ")]
    child.expect(
        r"final view of seat 0 \(\S+\):\r\n(.*?)final view of seat 1 \(\S+\):\r\n(.*?)(?=score after)"
    )
    cards = [kuhn_card(child.match.group(1)), kuhn_card(child.match.group(2))]
    you = 0 if seats[0] == "you" else 1
    assert cards[you] == my_card and float(mine) == returns[you]
    return word, returns, moves, cards


def test_a_person_plays_kuhn_through_a_pty_and_the_result_follows_the_rules():
    child = spawn(
        "random", "--game", "kuhn_poker", "--games", "3", "--seed", "4", "--seat", "alternate"
    )
    answers = iter(["raise", "7", "2", "1", "bet", "pass", "[Bet]", "1", "2", "1"])
    total = 0.0
    for game in range(3):
        child.expect(rf"== game {game + 1} of 3 · kuhn_poker · seed {4 + game} · ")
        word, returns, moves, cards = play_kuhn_game(child, answers)
        assert tuple(returns) == kuhn_returns(cards, moves)
        you = game % 2  # alternate seats, starting in seat 0
        assert word == ("won" if returns[you] > 0 else "lost")
        total += returns[you]
        child.expect(rf"score after {game + 1} games?: you {re.escape(f'{total:+g}')} ")
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 0
    assert "not a legal move: 'raise' is no legal move; legal: [Pass] [Bet]" in _transcript(child)


def _transcript(child) -> str:
    return child.logfile_read.getvalue() if child.logfile_read else ""


@pytest.fixture(autouse=True)
def _keep_output(monkeypatch):
    """Keep everything a spawned child printed (for asserting on the whole session)."""
    import io

    original = pexpect.spawn.__init__

    def init(self, *args, **kwargs):
        original(self, *args, **kwargs)
        self.logfile_read = io.StringIO()

    monkeypatch.setattr(pexpect.spawn, "__init__", init)


def test_the_trained_agent_shows_its_distribution_and_ctrl_c_ends_in_one_line(tiny_run):
    child = spawn(str(tiny_run), "--show-probs", "--games", "2")
    child.expect(r"== game 1 of 2 · kuhn_poker")
    play_kuhn_game(child, iter(["2", "2"]))  # bet, then call a bet: the agent moves once
    out = _transcript(child)
    probs = re.search(r"played \[(Pass|Bet)\]  probs: \[Pass\] (\d\.\d\d), \[Bet\] (\d\.\d\d)", out)
    assert probs and abs(float(probs[2]) + float(probs[3]) - 1) <= 0.011
    child.expect(PROMPT)
    child.sendintr()
    child.expect(pexpect.EOF)
    child.close()
    tail = _transcript(child).split(PROMPT.replace("\\", ""))[-1]
    assert "Traceback" not in tail
    assert re.fullmatch(r"\^C\r\ncoplay play: stopped; score after 1 game: [^\r]*\r\n", tail)
    assert child.exitstatus == 0


@pytest.mark.parametrize("stop", ["q", "eof"])
def test_q_and_ctrl_d_end_the_session_in_one_line(stop):
    said: list[str] = []

    def ask(prompt: str) -> str:
        if stop == "eof":
            raise EOFError
        return "q"

    s = _kuhn_session()
    assert play_in_terminal(s, games=3, ask=ask, say=said.append) == 0
    assert said[-1] == "coplay play: stopped; " + (
        "score after 0 games: you +0 (0 won, 0 drawn, 0 lost) · random +0 (0 won, 0 drawn, 0 lost)"
    )


def test_a_number_too_long_to_read_is_asked_again_not_the_end_of_the_session():
    # It ended the session: "coplay play: error: Exceeds the limit (4300 digits) ...".
    answers = iter(["1" * 5000, "q"])
    said: list[str] = []
    s = _kuhn_session()
    assert play_in_terminal(s, games=1, ask=lambda _: next(answers), say=said.append) == 0
    (refused,) = [line for line in said if line.startswith("not a legal move")]
    assert refused.startswith("not a legal move: '111") and refused.endswith("[Pass] [Bet]")
    assert said[-1].startswith("coplay play: stopped; score after 0 games")


class Escapes:
    """A text player whose answers hold terminal control sequences: clear the screen,
    retitle the window, print over its own line with a forged result."""

    policy_id, version, mode = "escapes", 0, "text"

    def act(self, observations):
        text = "[Pass]\x1b[2J\x1b]0;owned\x07\rgame over: you won (+2)"
        return [Decision(text=text, action="[Pass]", policy_id="escapes")]


def test_control_characters_a_policy_wrote_are_shown_as_escapes_not_sent_to_the_terminal():
    players = {"escapes": Escapes(), "escapes #2": Escapes()}
    s = Session(partial(make_env, "kuhn_poker"), players, list(players))
    said: list[str] = []
    play_in_terminal(s, games=1, say=said.append)
    text = "\n".join(said)
    assert not re.search(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]", text)
    assert "answer: [Pass]\\x1b[2J\\x1b]0;owned\\x07\\rgame over: you won (+2)" in text


def _kuhn_session() -> Session:
    players = {"you": None, "random": make_scripted("random", "kuhn_poker", 0)}
    return Session(partial(make_env, "kuhn_poker"), players, ["you", "random"])


def test_tic_tac_toe_at_the_prompt_the_announced_result_matches_the_board():
    players = {"you": None, "random": make_scripted("random", "tic_tac_toe", 2)}
    s = Session(partial(make_env, "tic_tac_toe"), players, ["you", "random"], seed=5)
    said: list[str] = []
    cells = iter("402615378")  # tried in order; taken cells are refused and re-asked

    assert play_in_terminal(s, games=1, ask=lambda _: next(cells), say=said.append) == 0
    text = "\n".join(said)
    board = tic_tac_toe_board(s.outcome.views[0])
    expected = tic_tac_toe_returns(board)
    word = {1.0: "won", 0.0: "drew", -1.0: "lost"}[expected[0]]
    assert f"game over: you {word} ({expected[0]:+g})" in text
    assert "moves: [0] [1] [2] [3] [4] [5] [6] [7] [8]  (type the move)" in text
    assert "seat 1 (random) played [" in text  # perfect information: the moves are shown


class _DownOnce:
    """Answers at random, except its first request, which finds its endpoint down."""

    policy_id, version = "remote", 0

    def __init__(self):
        self.inner, self.calls = make_scripted("random", "kuhn_poker", 0), 0

    def act(self, observations):
        self.calls += 1
        if self.calls == 1:
            raise ConnectionRefusedError("cannot reach http://127.0.0.1:9: refused")
        return self.inner.act(observations)


def test_a_player_that_cannot_answer_forfeits_its_game_and_the_table_goes_on():
    # The session ended with a traceback-free error, but before the outcome of the
    # forfeited game was shown and without playing the games left.
    session = Session(
        lambda: make_env("kuhn_poker"), {"bot": _DownOnce(), "you": None}, ["bot", "you"], seed=0
    )
    said = []
    assert play_in_terminal(session, games=3, ask=lambda prompt: "1", say=said.append) == 0
    assert session.games_played == 3
    assert any("could not answer and forfeits" in line for line in said)
    over = [line for line in said if line.startswith("game over")]
    assert len(over) == 3 and "you won (+2)" in over[0]


def _forfeited_game(lineup, *, show_probs=False) -> list[str]:
    players = {
        "garbage": Garbage("I fold, maybe?"),
        "you": None,
        "random": make_scripted("random", "kuhn_poker", 0),
    }
    players = {name: players[name] for name in lineup}
    session = Session(partial(make_env, "kuhn_poker"), players, lineup, show_probs=show_probs)
    said: list[str] = []
    assert play_in_terminal(session, games=1, ask=lambda prompt: "2", say=said.append) == 0
    assert session.outcome.forfeited_by == lineup.index("garbage")
    return said


def test_watching_a_forfeit_shows_the_turn_and_what_the_policy_wrote():
    # Only "seat 0 (garbage) forfeited: no legal move" was printed: neither the view of
    # that turn, which every other turn shows when watching, nor the answers refused.
    said = _forfeited_game(["garbage", "random"])
    at = said.index("-- seat 0 (garbage) sees:")
    assert "You are player 0" in said[at + 1]
    assert said[at + 2 : at + 6] == [
        "seat 0 (garbage) forfeited: no legal move in 3 answers",
        *(f"  answer {i}: I fold, maybe? ({i})" for i in (1, 2, 3)),
    ]


@pytest.mark.parametrize("show_probs", [False, True])
def test_show_probs_shows_the_answers_of_a_policy_that_forfeits(show_probs):
    said = _forfeited_game(["you", "garbage"], show_probs=show_probs)
    assert "seat 1 (garbage) forfeited: no legal move in 3 answers" in said
    assert ("  answer 1: I fold, maybe? (1)" in said) is show_probs
    assert not any("(garbage) sees:" in line for line in said)  # a person sees their own view
