"""Whether a checkpoint can write the answers it is fine-tuned on."""

from coplay.sft.fit import answer_lengths
from coplay.sft.tokens import Example


def test_answer_lengths_count_each_turn_up_to_its_end():

    # Two assistant turns (ends: 9); the template's newline after the end is not written.
    ex = Example(
        (1, 5, 6, 9, 0, 2, 7, 7, 7, 9, 0), (False, True, True, True, True) * 2 + (True,), 1
    )
    assert answer_lengths(ex, ends={9}) == [2, 3]
    assert answer_lengths(ex, ends=set()) == [4, 5]
