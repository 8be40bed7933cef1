"""Answer formats: what each format reads from well-formed and malformed answers."""

from dataclasses import replace

import pytest

from coplay.policies.answer import (
    ANSWER_FORMATS,
    Parsed,
    check_format,
    clean_text,
    render_answer,
)

LEGAL = ("[Pass]", "[Bet]")
MALFORMED = {
    "empty": "",
    "only reasoning": "<think>K is the best card, so betting wins.</think>",
    "truncated reasoning": "<think>K is the best card, so [Bet]",
    "two actions": "<think>hm</think> [Bet] [Pass]",
    "two boxed actions": "<think>hm</think> \\boxed{Bet} \\boxed{Pass}",
    "garbage": "\x11\ufffdy\ufffdeg [2]*# [4]",
    "an illegal action": "<think>hm</think> [Raise]",
    "a second reasoning block": "<think>a</think><think>b</think> [Bet]",
}


@pytest.mark.parametrize("name", sorted(n for n in ANSWER_FORMATS if n != "free"))
@pytest.mark.parametrize("case", sorted(MALFORMED))
def test_malformed_answers_name_no_action(name, case):
    parsed = ANSWER_FORMATS[name].parse(MALFORMED[case], LEGAL)
    assert parsed.action is None and parsed.well_formed is False


@pytest.mark.parametrize("name", sorted(ANSWER_FORMATS))
@pytest.mark.parametrize("action", LEGAL)
def test_rendered_answers_parse_back_well_formed(name, action):
    fmt = ANSWER_FORMATS[name]
    parsed = fmt.parse(fmt.render("My card is K, so I bet.", action), LEGAL)
    assert parsed.action == action and parsed.well_formed


def test_think_format_reads_the_reasoning_and_the_action():
    parsed = ANSWER_FORMATS["think"].parse("  <think> I hold K [Pass]? no </think>\n[bet]", LEGAL)
    # brackets inside the reasoning do not count; the action is matched ignoring case
    assert (parsed.action, parsed.reasoning, parsed.well_formed) == (
        "[Bet]",
        "I hold K [Pass]? no",
        True,
    )


def test_text_around_the_single_action_is_valid_but_not_well_formed():
    parsed = ANSWER_FORMATS["think"].parse("<think>x</think> So I will [Bet].", LEGAL)
    assert parsed.action == "[Bet]" and not parsed.well_formed


def test_boxed_format_reads_boxes_not_brackets():
    fmt = ANSWER_FORMATS["think-boxed"]
    assert fmt.parse("<think>x</think> \\boxed{[Bet]}", LEGAL).action == "[Bet]"
    assert fmt.parse("<think>x</think> \\boxed{ pass }", LEGAL).action == "[Pass]"
    assert fmt.parse("<think>x</think> [Bet]", LEGAL).action is None


BRACKETED = sorted(n for n, f in ANSWER_FORMATS.items() if f.strict and f.action_open == "[")
BOXED = sorted(n for n, f in ANSWER_FORMATS.items() if f.strict and f.action_open != "[")


def _answer(name: str, action: str) -> str:
    """``action`` written verbatim after the reasoning block the format asks for."""
    return action if ANSWER_FORMATS[name].reasoning == "none" else f"<think>x</think> {action}"


@pytest.mark.parametrize("name", sorted(n for n in ANSWER_FORMATS if n != "free"))
def test_whitespace_inside_the_delimiters_is_well_formed_in_every_format(name):
    # as case is: the game matches names ignoring both (coplay.envs.actions.parse_action)
    fmt = ANSWER_FORMATS[name]
    spaced = fmt.render("I hold K.", "[ Bet ]")  # "[ Bet ]", "\\boxed{ Bet }"
    assert fmt.parse(spaced, LEGAL) == fmt.parse(fmt.render("I hold K.", "[Bet]"), LEGAL)
    assert fmt.parse(spaced, LEGAL).well_formed


@pytest.mark.parametrize(
    ("names", "action"),
    [(BRACKETED, a) for a in ("[[Bet]]", "[Bet]]", "[[Bet]", "I [Bet] ] now")]
    + [
        (BOXED, a)
        for a in (
            "\\boxed{\\boxed{Bet}}",
            "\\boxed{[Bet}",
            "\\boxed{Bet]}",
            "\\boxed{[[Bet]]}",
            "\\boxed{Bet}}",
            "\\boxed{ \\boxed{Bet}",
        )
    ],
)
def test_nested_or_unbalanced_markers_name_no_action(names, action):
    # malformed structure, not text around an action: \\boxed{Bet] is refused, so is this
    for name in names:
        parsed = ANSWER_FORMATS[name].parse(_answer(name, action), LEGAL)
        assert (name, parsed.action, parsed.well_formed) == (name, None, False)


def test_a_box_may_hold_the_bracketed_action_but_it_is_not_well_formed():
    fmt = ANSWER_FORMATS["think-boxed"]
    for inner in ("[Bet]", " [ Bet ] "):
        assert fmt.parse(f"<think>x</think> \\boxed{{{inner}}}", LEGAL) == Parsed(
            "[Bet]", "x", False
        )


def test_reasoning_is_required_or_optional_by_format():
    assert ANSWER_FORMATS["think"].parse("[Bet]", LEGAL).action is None
    assert ANSWER_FORMATS["bracket"].parse("[Bet]", LEGAL).action == "[Bet]"
    assert ANSWER_FORMATS["bracket"].parse("<think>x</think> [Bet]", LEGAL).action == "[Bet]"
    assert ANSWER_FORMATS["bracket"].parse("<think>x [Bet]", LEGAL).action is None


def test_the_action_format_is_the_action_alone():
    fmt = ANSWER_FORMATS["action"]
    assert fmt.render("My card is K.", "[Bet]") == "[Bet]"
    assert fmt.parse(" [bet]\n", LEGAL) == Parsed("[Bet]", None, True)
    assert fmt.parse("I bet: [Bet]", LEGAL) == Parsed("[Bet]", None, False)
    assert fmt.parse("<think>x</think> [Bet]", LEGAL).action is None
    assert fmt.instruction.startswith("Give exactly one of your legal actions")


def test_free_format_is_the_lenient_reading():
    parsed = ANSWER_FORMATS["free"].parse("\x11garbage [Bet] more [Pass]", LEGAL)
    assert parsed.action == "[Pass]"


def test_silence_is_not_well_formed_in_the_free_format_either():
    fmt = ANSWER_FORMATS["free"]
    assert fmt.parse("  \x11 ", None) == Parsed("", None, False)
    assert fmt.parse("I take\x11 the books", None) == Parsed("I take the books", None, True)


@pytest.mark.parametrize("name", ["think", "think-boxed", "bracket", "boxed"])
def test_an_answer_inside_a_reasoning_block_the_prompt_opened_is_read_as_its_continuation(name):
    # A reasoning model's template ends the prompt with <think>: the answer closes it.
    fmt = replace(ANSWER_FORMATS[name], opened=True)
    answer = ANSWER_FORMATS[name].render("I hold K.", "[Bet]").removeprefix("<think>")
    assert fmt.parse(answer, LEGAL) == Parsed("[Bet]", "I hold K.", True)
    assert fmt.parse("I hold K.</think> hello", None) == Parsed("hello", "I hold K.", True)
    for malformed in ("<think>x</think> [Bet]", "never closed [Bet]", "[Bet]"):
        assert fmt.parse(malformed, LEGAL).action is None
    assert fmt.render("I hold K.", "[Bet]") == ANSWER_FORMATS[name].render("I hold K.", "[Bet]")


def test_a_message_is_the_cleaned_text_after_the_reasoning():
    fmt = ANSWER_FORMATS["think"]
    parsed = fmt.parse("<think>offer low</think> I take\x11 the\n books\ufffd ", None)
    assert (parsed.action, parsed.well_formed) == ("I take the books", True)
    assert fmt.parse("<think>never closed", None).action is None
    # Only reasoning: silence, which the game reads, but no format reward for it.
    silent = fmt.parse("<think>say nothing</think>", None)
    assert (silent.action, silent.well_formed) == ("", False)


def test_clean_text_drops_control_and_replacement_characters():
    text = "a\x00b\x1bc\u200bd\ufffde\u00e9 \t f"
    assert clean_text(text) == "abcde\u00e9 f"


def test_render_answer_is_the_demonstrations_render_function():
    assert render_answer("Q beats J.", "[Bet]", answer="think-boxed") == (
        "<think>Q beats J.</think> \\boxed{Bet}"
    )
    assert render_answer("", "[Bet]", answer="bracket") == "[Bet]"


def test_unknown_format_names_the_registered_ones():
    with pytest.raises(
        ValueError, match="unknown answer format 'xml'; registered: action, boxed, bracket, free"
    ):
        check_format("xml")
