"""Parsing bracketed actions out of free text."""

import doctest

import pytest

from coplay.envs import actions
from coplay.envs.actions import bracket, parse_action

LEGAL = ("[Pass]", "[Bet]")


def test_doctests():
    assert doctest.testmod(actions).failed == 0


def test_bracket():
    assert bracket("Raise") == "[Raise]"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("[Bet]", "[Bet]"),
        ("[bet]", "[Bet]"),
        ("[  PASS \t]", "[Pass]"),
        ("I think [Pass] is weak, so [Bet]", "[Bet]"),
        ("[Bet] ... on second thought [pass]", "[Pass]"),
        ("[Bet] then nonsense [Fold] [Raise]", "[Bet]"),  # last *legal* one wins
        ("Bet", None),
        ("", None),
        ("[Be t]", None),
        ("[[Bet]]", "[Bet]"),
        ("[Bet", None),
    ],
)
def test_parse_action(text, expected):
    assert parse_action(text, LEGAL) == expected


def test_parse_returns_canonical_string_for_numbers():
    assert parse_action("cell [ 4 ]", ["[0]", "[4]", "[8]"]) == "[4]"


def test_no_legal_actions_parses_nothing():
    assert parse_action("[Bet]", []) is None
