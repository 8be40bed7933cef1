"""From the command line to a session: seating, and one-line errors of ``coplay play``."""

from __future__ import annotations

import doctest

import pytest

from coplay.cli import main
from coplay.play import setup
from coplay.play.setup import seating


def test_doctests():
    result = doctest.testmod(setup)
    assert result.attempted > 0 and result.failed == 0


def test_the_agent_takes_every_seat_but_the_persons():
    assert seating(["runs/k"], 3, seat="1") == {
        "runs/k": "runs/k",
        "you": None,
        "runs/k #2": "runs/k",
    }
    assert seating(["nash"], 2, seat="alternate") == {"you": None, "nash": "nash"}
    with pytest.raises(ValueError, match="--seat must be a seat from 0 to 1 or 'alternate', got 2"):
        seating(["nash"], 2, seat="2")


@pytest.mark.parametrize(
    ("argv", "line"),
    [
        (["play"], "name one agent to play against, or the policies to --watch (not both)"),
        (["play", "nash", "--watch", "nash", "random"], "name one agent to play against"),
        (
            ["play", "runs/missing"],
            "runs/missing does not exist (expected a run directory, a "
            "checkpoint or one of random, nash, perfect, optimal)",
        ),
        # It said "the checkpoint players must record one game (none records one)".
        (["play", "nash"], "pass --game: no player is a checkpoint, so none records a game"),
        (["play", "random", "--game", "no_such_game"], "no_such_game"),
        (
            ["play", "random", "--game", "kuhn_poker", "--seat", "5"],
            "--seat must be a seat from 0 to 1",
        ),
        # int() refused both: "invalid literal for int() with base 10: '²'", and
        # "Exceeds the limit (4300 digits) for integer string conversion".
        (
            ["play", "random", "--game", "kuhn_poker", "--seat", "\u00b2"],
            "--seat must be a seat from 0 to 1 or 'alternate', got \u00b2",
        ),
        (
            ["play", "random", "--game", "kuhn_poker", "--seat", "1" * 5000],
            "--seat must be a seat from 0 to 1 or 'alternate', got 111",
        ),
        (
            ["play", "random", "--game", "kuhn_poker", "--games", "0"],
            "--games must be positive, got 0",
        ),
        (
            ["play", "--game", "kuhn_poker", "--watch", "random", "random", "nash"],
            "--watch names 3 policies but kuhn_poker has 2 seats",
        ),
    ],
)
def test_user_errors_end_in_one_line(argv, line, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("coplay play: error: ") and line in err


def test_watching_takes_game_parameters_after_the_policies(capsys):
    argv = ["play", "--watch", "nash", "random", "--game", "kuhn_poker", "players=3"]
    assert main(argv) == 2  # nash is solved for two players only
    assert "the game parameters {'players': 3} change it" in capsys.readouterr().err
    assert main(["play", "--watch", "random", "random", "--game", "kuhn_poker", "players=3"]) == 0
    out = capsys.readouterr().out
    assert "seat 0: random, seat 1: random #2, seat 2: random #3" in out
    assert "Kuhn poker, 3 players" in out


def test_the_first_deal_is_drawn_at_random_unless_a_seed_is_given(monkeypatch):
    # Seed 0 every time dealt the cards of known seeds, which the page's replays show.
    import coplay.play.setup as play_setup

    seeds = []
    monkeypatch.setattr(play_setup, "play", lambda *a, **kw: seeds.append(kw["seed"]) or 0)
    argv = ["play", "random", "--game", "kuhn_poker"]
    for extra in ([], [], ["--seed", "7"]):
        assert main([*argv, *extra]) == 0
    assert seeds[2] == 7 and seeds[0] != seeds[1]
    assert all(0 <= s < 2**30 for s in seeds)
