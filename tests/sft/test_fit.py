"""Whether a checkpoint can write the answers it is fine-tuned on."""

from pathlib import Path

import pytest

from coplay.policies.answer import ANSWER_FORMATS
from coplay.sft.data import Conversation, DataError, Message
from coplay.sft.fit import answer_lengths, check_answer_format
from coplay.sft.tokens import Example

KUHN = (
    "Kuhn poker, 2 players, cards J<Q<K, ante 1.\nYou are player 0. Your card: Q.\n"
    "History: none.\nYour legal actions: [Pass] [Bet]\n"
)
LEGAL = ["[Pass]", "[Bet]"]


def test_answer_lengths_count_each_turn_up_to_its_end():

    # Two assistant turns (ends: 9); the template's newline after the end is not written.
    ex = Example(
        (1, 5, 6, 9, 0, 2, 7, 7, 7, 9, 0), (False, True, True, True, True) * 2 + (True,), 1
    )
    assert answer_lengths(ex, ends={9}) == [2, 3]
    assert answer_lengths(ex, ends=set()) == [4, 5]


@pytest.mark.parametrize("reasoning", ["", "Q is in the middle."])
@pytest.mark.parametrize("played", list(ANSWER_FORMATS))
@pytest.mark.parametrize("written", list(ANSWER_FORMATS))
def test_answers_without_a_system_message_pass_where_play_reads_them(written, played, reasoning):
    # With no system message to record the data's format, each answer is read against
    # the actions it names itself, not the turn's legal list: that tells [Bet] from
    # \boxed{Bet} all the same, since no format reads an action outside its own marker.
    answer = ANSWER_FORMATS[written].render(reasoning, "[Bet]")
    data = [Conversation((Message("user", KUHN), Message("assistant", answer)), 1)]
    if ANSWER_FORMATS[played].parse(answer, LEGAL).action is not None:
        check_answer_format(data, played, Path("demos.jsonl"))
        return
    with pytest.raises(DataError, match=r"demos.jsonl:1: .* pass model\.text\.answer="):
        check_answer_format(data, played, Path("demos.jsonl"))


def test_bracketed_answers_are_refused_for_a_boxed_checkpoint_naming_their_format():
    data = [Conversation((Message("user", KUHN), Message("assistant", "[Bet]")), 1)]
    with pytest.raises(DataError, match="in the 'action' format .* pass model.text.answer=action"):
        check_answer_format(data, "boxed", Path("demos.jsonl"))
