"""Micro-batches cut by a token budget: every decision once, in order, within budget."""

import pytest
from transformers import LlamaConfig

from coplay.train import micro
from coplay.train.micro import auto_budget, cost, logit_tokens, micro_batches, together
from coplay.types import Decision


def _text(prompt: int, answer: int) -> Decision:
    return Decision("", "a", "p", prompt_ids=(1,) * prompt, response_ids=(2,) * answer)


def _choice(prompt: int, choices: tuple[int, ...]) -> Decision:
    ids = tuple((3,) * n for n in choices)
    return Decision("", "a", "p", prompt_ids=(1,) * prompt, response_ids=ids[0], choice_ids=ids)


def test_cost_counts_tokens_run_and_positions_scored():
    assert cost(_text(10, 4)) == (14, 5)
    # one prompt pass scores every first token; longer actions add a continuation
    assert cost(_choice(10, (1, 1, 1))) == (10, 1)
    assert cost(_choice(10, (2, 3))) == (13, 4)
    # no KV cache (activation checkpointing): each multi-token action after the prompt
    assert cost(_choice(10, (2, 3)), cached=False) == (25, 5)
    assert cost(_choice(10, (1, 1, 1)), cached=False) == (10, 1)


@pytest.mark.parametrize("tokens", [1, 5, 17, 40, 10**6])
@pytest.mark.parametrize("rows", [1, 3, 100])
def test_micro_batches_cover_every_decision_in_order_within_the_budget(tokens, rows):
    decisions = [_text(p, a) for p, a in [(3, 1), (7, 2), (2, 2), (9, 1), (4, 4), (1, 1)]]
    cuts = micro_batches(decisions, tokens=tokens, rows=rows)
    assert [i for s, e in cuts for i in range(s, e)] == list(range(len(decisions)))
    for s, e in cuts:
        part = [cost(d) for d in decisions[s:e]]
        assert e - s <= rows
        padded = (e - s) * max(n for n, _ in part) + sum(k for _, k in part)
        assert e - s == 1 or padded <= tokens  # only a lone decision may exceed it
    if tokens == 10**6 and rows == 100:
        assert cuts == [(0, 6)]


def test_scored_positions_weigh_their_vocabulary():
    decisions = [_text(4, 1)] * 4  # 5 tokens and 2 scored positions each
    assert micro_batches(decisions, tokens=28, rows=8) == [(0, 4)]
    assert micro_batches(decisions, tokens=28, rows=8, logit_weight=3) == [(0, 2), (2, 4)]


def test_the_automatic_budget_shrinks_with_the_model():
    tiny = LlamaConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=2, vocab_size=512)
    qwen_01b = LlamaConfig(
        hidden_size=512, intermediate_size=1376, num_hidden_layers=8, vocab_size=151936
    )
    assert auto_budget(tiny) > 20_000  # a whole Kuhn minibatch in one pass
    assert 300 < auto_budget(qwen_01b) < 2_000
    assert logit_tokens(tiny) == 1 and logit_tokens(qwen_01b) > 1


def test_a_choice_met_again_in_a_micro_batch_adds_no_tokens():
    # The scorer runs each distinct (prompt, actions) once: a Kuhn minibatch is a few
    # information states many times, and its copies must not cut it into many passes.
    a, b = _choice(10, (1, 1)), _choice(12, (1, 1))
    same_as_a = _choice(10, (1, 1))  # equal ids, other objects: the same row
    decisions = [a, b, a, same_as_a, b] * 20
    assert micro_batches(decisions, tokens=2 * 12 + 3, rows=512) == [(0, 100)]
    # a third distinct state does not fit: cut where it comes
    c = _choice(11, (1, 2))
    assert micro_batches([a, b, a, c, b], tokens=2 * 12 + 3, rows=512) == [(0, 3), (3, 5)]
    # the row cap still counts every decision
    assert micro_batches([a] * 10, tokens=100, rows=4) == [(0, 4), (4, 8), (8, 10)]
    # free text is run answer by answer: copies cost their tokens
    t = _text(10, 2)
    assert micro_batches([t] * 4, tokens=3 * 12 + 9, rows=512) == [(0, 3), (3, 4)]


def test_a_minibatch_that_fits_every_copy_is_one_pass_without_telling_states_apart(
    monkeypatch,
):
    a, b = _choice(10, (1, 1)), _choice(12, (1, 1))
    decisions = [a, b, a, b]
    every = 4 * 12 + 4  # every copy: 4 rows of the longest prompt, 4 scored positions
    told = []
    real = micro._states
    monkeypatch.setattr(micro, "_states", lambda d: told.append(len(d)) or real(d))
    assert micro_batches(decisions, tokens=every, rows=4) == [(0, 4)]
    assert told == []
    # A token less: its states are told apart, and its two distinct ones still fit.
    assert micro_batches(decisions, tokens=every - 1, rows=4) == [(0, 4)]
    assert told == [4]
    # The row cap counts every decision either way.
    assert micro_batches(decisions, tokens=every, rows=3) == [(0, 3), (3, 4)]
    assert micro_batches([], tokens=every, rows=3) == []


@pytest.mark.parametrize("tokens", [12, 30, 60, 10**6])
def test_cuts_over_distinct_rows_cover_every_decision_within_the_budget(tokens):
    states = [_choice(p, c) for p, c in [(10, (1, 1)), (12, (1, 1, 1)), (7, (2, 1)), (9, (1,))]]
    pick = [0, 1, 0, 2, 3, 3, 1, 0, 2, 2, 1, 3, 0, 0, 1]
    decisions = [states[i] for i in pick]
    cuts = micro_batches(decisions, tokens=tokens, rows=100)
    assert [i for s, e in cuts for i in range(s, e)] == list(range(len(decisions)))
    for s, e in cuts:
        distinct = {id(d): cost(d) for d in decisions[s:e]}.values()
        padded = len(distinct) * max(n for n, _ in distinct) + sum(k for _, k in distinct)
        assert len(distinct) == 1 or padded <= tokens
    if tokens == 10**6:
        assert cuts == [(0, len(decisions))]


def test_together_brings_each_choices_copies_after_its_first_and_keeps_text_in_place():
    a, b = _choice(10, (1, 1)), _choice(12, (1, 1))
    t1, t2 = _text(5, 2), _text(6, 2)  # two turns of one conversation, say
    decisions = [a, t1, t2, b, _choice(10, (1, 1)), b, a]
    order = together(decisions)
    assert order == [0, 4, 6, 1, 2, 3, 5]
    assert sorted(order) == list(range(len(decisions)))
    assert together([]) == []


def test_learner_passes_score_each_state_in_one_pass_and_every_decision_once():
    from types import SimpleNamespace

    from coplay.train.micro import learner_passes

    states = [_choice(p, (1, 1)) for p in (10, 11, 12, 13)]
    decisions = [states[i] for i in [0, 1, 2, 3, 0, 1, 2, 3, 3, 2]] + [_text(4, 2)]
    learner = SimpleNamespace(
        micro_batch_tokens=2 * 13 + 2, micro_batch_size=512, logit_weight=1, checkpointing=False
    )
    passes = learner_passes(learner, decisions)
    assert sorted(i for rows in passes for i in rows) == list(range(len(decisions)))
    for s in states:  # every copy of a state in one pass
        assert len({k for k, rows in enumerate(passes) for i in rows if decisions[i] is s}) == 1
    assert len(passes) == 3 and [len({id(decisions[i]) for i in r}) for r in passes] == [2, 2, 1]
    # One pass for them all: the order as given.
    learner.micro_batch_tokens = 10**6
    assert learner_passes(learner, decisions) == [list(range(len(decisions)))]


def test_prompt_passes_run_each_prompt_once_within_the_budget():
    from coplay.train.micro import prompt_passes

    prompts = [(1,) * n for n in (3, 5, 3, 2, 5, 7, 3)]
    for tokens in (1, 6, 10, 15, 100):
        passes = prompt_passes(prompts, tokens=tokens)
        assert sorted(i for rows in passes for i in rows) == list(range(len(prompts)))
        for rows in passes:
            distinct = {prompts[i] for i in rows}
            assert len(distinct) == 1 or len(distinct) * max(map(len, distinct)) <= tokens
        for p in set(prompts):  # every copy in its first's pass
            assert len({k for k, rows in enumerate(passes) for i in rows if prompts[i] == p}) == 1
    assert prompt_passes(prompts, tokens=100) == [[0, 2, 6, 1, 4, 3, 5]]
    assert prompt_passes([], tokens=10) == []


def test_model_sizes_by_hand():
    from types import SimpleNamespace

    qwen_01b = LlamaConfig(
        hidden_size=512, intermediate_size=1376, num_hidden_layers=8, vocab_size=151936
    )
    # 8 layers x (12 x 512 + 5 x 1376) floats of 4 bytes; 4 vocabulary rows of 4 bytes
    # weigh 151936 x 16 / 416768 = 5.83 tokens, rounded up
    assert micro.token_bytes(qwen_01b) == 416_768 and logit_tokens(qwen_01b) == 6
    # without an MLP width, the usual 4 x hidden: 2 x (12 x 64 + 5 x 256) x 4
    assert micro.token_bytes(SimpleNamespace(hidden_size=64, num_hidden_layers=2)) == 16_384
    # a model whose one token outweighs the whole budget still gets one token a pass
    giant = SimpleNamespace(hidden_size=2**16, intermediate_size=2**18, num_hidden_layers=128)
    assert micro.token_bytes(giant) > micro.ACTIVATION_BYTES and auto_budget(giant) == 1


def test_free_text_between_choices_keeps_its_place():
    t1, t2, a = _text(5, 2), _text(6, 2), _choice(10, (1, 1))
    assert together([t1, a, t2, a]) == [0, 1, 3, 2]


def test_a_learner_with_activation_checkpointing_counts_each_action_run():
    from types import SimpleNamespace

    from coplay.train.micro import learner_micro_batches

    # Cached: 2 rows x 14 tokens + 8 positions = 36. Without a KV cache each row runs
    # its two actions after the prompt: 27 tokens and 5 positions a row, 64 in all.
    decisions = [_choice(10, (2, 3)), _choice(11, (2, 3))]
    learner = SimpleNamespace(
        micro_batch_tokens=40, micro_batch_size=8, logit_weight=1, checkpointing=False
    )
    assert learner_micro_batches(learner, decisions) == [(0, 2)]
    learner.checkpointing = True
    assert learner_micro_batches(learner, decisions) == [(0, 1), (1, 2)]


def test_prompts_that_fill_the_budget_exactly_share_a_pass():
    from coplay.train.micro import prompt_passes

    assert prompt_passes([(1, 1), (2, 2)], tokens=4) == [[0, 1]]
    assert prompt_passes([(1, 1), (2, 2)], tokens=3) == [[0], [1]]
