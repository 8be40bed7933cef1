"""Message rules shared by the talk games: cleaning free text, symbol messages."""

import pytest

from coplay.envs.talk import Talk, clean_message


def test_clean_message_keeps_printable_ascii_and_removes_action_brackets():
    assert clean_message('I [Accept] "now"\n\tok', 60) == "I (Accept) 'now' ok"
    assert clean_message("\u00fcber \u2603 deal", 60) == "ber deal"
    assert clean_message("a" * 100, 7) == "a" * 7
    assert clean_message("   ", 5) == ""


def test_free_messages_are_always_valid_and_bounded():
    talk = Talk("free", (), 10)
    assert talk.legal_actions() is None
    assert talk.parse("") == ""
    assert talk.parse("hello there, friend") == "hello ther"
    assert talk.content("hi") == "hi"


def test_symbol_messages_are_legal_actions():
    talk = Talk("symbols", ("A", "B"), 10)
    assert talk.legal_actions() == ("[Say A]", "[Say B]")
    assert talk.parse("so: [say b]") == "[Say B]"
    assert talk.parse("[Say C]") is None
    assert talk.parse("B") is None
    assert talk.content("[Say B]") == "B"


@pytest.mark.parametrize(
    ("form", "symbols", "chars", "match"),
    [
        ("morse", (), 10, "message form must be one of free, symbols, got 'morse'"),
        ("free", (), 0, "max_message_chars must be >= 1"),
        ("symbols", ("A", "A"), 10, "at least 2 distinct symbols"),
    ],
)
def test_bad_rules_are_refused(form, symbols, chars, match):
    with pytest.raises(ValueError, match=match):
        Talk(form, symbols, chars)
