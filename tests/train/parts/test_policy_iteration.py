"""The policy-iteration target: its cross-entropy on hand cases (a move its group did
not try keeps the policy's probability), and its memory (one entry per position, the
latest target, the oldest positions dropped first, no replay of a position trained
fresh), recalled and saved by the term."""

import math

import pytest
import torch
from pydantic import ValidationError

from coplay.train.parts.policy_iteration import (
    PolicyIteration,
    TargetConfig,
    cross_entropy,
    remember_targets,
    replays,
    target_key,
)
from coplay.train.parts.term import Sample
from coplay.types import Decision


def sample(prompt, target=None, adv=1.0, choices=((1,), (2,))):
    dec = Decision(text="[a]", action="[a]", policy_id="me", prompt_ids=prompt, choice_ids=choices)
    return Sample(dec, adv, 0, target)


def test_each_position_keeps_its_latest_target_as_a_replay():
    first = [sample((1,), (1.0, 0.0)), sample((1,), (1.0, 0.0)), sample((2,), None)]
    memory = remember_targets({}, first, capacity=8)
    assert list(memory) == [((1,), ((1,), (2,)))]  # copies of a group: one entry
    (kept,) = memory.values()
    assert kept.replay and kept.advantage == 0.0 and kept.target == (1.0, 0.0)
    memory = remember_targets(memory, [sample((1,), (0.0, 1.0))], capacity=8)
    assert [s.target for s in memory.values()] == [(0.0, 1.0)]


def test_same_prompt_with_other_choices_is_another_position():
    a = sample((1,), (1.0, 0.0))
    b = sample((1,), (0.0, 0.0, 1.0), choices=((1,), (2,), (3,)))
    assert target_key(a) != target_key(b)
    assert len(remember_targets({}, [a, b], capacity=8)) == 2


def test_the_oldest_positions_go_first_and_a_renewed_one_counts_as_new():
    memory = remember_targets({}, [sample((i,), (1.0, 0.0)) for i in range(4)], capacity=4)
    memory = remember_targets(memory, [sample((0,), (0.0, 1.0))], capacity=4)  # renewed
    memory = remember_targets(memory, [sample((9,), (1.0, 0.0))], capacity=4)
    assert [k[0] for k in memory] == [(2,), (3,), (0,), (9,)]


def test_positions_with_a_fresh_target_are_not_replayed():
    memory = remember_targets({}, [sample((i,), (1.0, 0.0)) for i in range(3)], capacity=8)
    fresh = [sample((1,), (0.0, 1.0)), sample((2,), None)]
    assert [r.decision.prompt_ids for r in replays(memory, fresh)] == [(0,), (2,)]
    assert replays({}, fresh) == []


def test_replays_are_not_stored_again():
    memory = remember_targets({}, [sample((1,), (1.0, 0.0))], capacity=8)
    again = remember_targets({}, list(memory.values()), capacity=8)
    assert again == {}


def test_the_cross_entropy_of_a_hand_case(micro_of, sample_of):
    # An own target (0, 1) on (0.8, 0.2): -log 0.2; a replayed (1, 0) on (0.5, 0.5):
    # -log 0.5. Both are divided by the minibatch's own sample count (2), not the replay.
    batch = [sample_of(target=(0.0, 1.0)), sample_of(), sample_of(target=(1.0, 0.0), replay=True)]
    micro, leaf = micro_of(batch, [[0.8, 0.2], [0.5, 0.5], [0.5, 0.5]], size=2)
    value, metrics = PolicyIteration(TargetConfig(coef=0.5)).loss(None, micro)
    assert value.item() == pytest.approx(0.5 * (-math.log(0.2) - math.log(0.5)) / 2, rel=1e-6)
    # each a mean over its own targets, one here
    assert metrics["loss/policy_iteration"] == (pytest.approx(-math.log(0.2), rel=1e-6), 1)
    assert metrics["loss/policy_iteration_replay"] == (pytest.approx(-math.log(0.5), rel=1e-6), 1)
    value.backward()  # d/dlog p of -target . log p, times 0.5 / 2
    assert leaf.grad.flatten().tolist() == pytest.approx([0, -0.25, 0, 0, -0.25, 0])


def pulled_toward(micro_of, sample_of, target, probs):
    """The distribution the term trains one decision toward, read off the gradient on
    its log-probs (the term's loss is -target . log p, its coefficient 1), and the loss."""
    micro, leaf = micro_of([sample_of(target=target, choices=((1,), (2,), (3,)))], [probs])
    value, _ = PolicyIteration(TargetConfig(coef=1.0)).loss(None, micro)
    value.backward()
    return (-leaf.grad[0]).tolist(), value.item()


def test_an_untried_move_keeps_the_policys_probability(micro_of, sample_of):
    # Three legal moves, the policy at (0.5, 0.3, 0.2); a group tried moves 1 and 2 and
    # move 2 did better (opening_targets: (NaN, 0, 1)). The tried moves' mass, 0.5, goes
    # to move 2; move 0 keeps its 0.5, where a 0 would have pushed it down untried.
    target, value = pulled_toward(micro_of, sample_of, (math.nan, 0.0, 1.0), [0.5, 0.3, 0.2])
    assert target == pytest.approx([0.5, 0.0, 0.5], rel=1e-6)
    assert value == pytest.approx(-0.5 * math.log(0.5) - 0.5 * math.log(0.2), rel=1e-6)


def test_an_untried_move_gets_no_push_on_its_logit():
    # On the logits the gradient is pi - target: 0 where the target is the policy's own.
    logits = torch.tensor([1.0, 0.0, -1.0], requires_grad=True)
    dist = logits.log_softmax(-1)
    decision = Decision(text="[a]", action="[a]", policy_id="me", choice_ids=((1,), (2,), (3,)))
    ce, n = cross_entropy([dist], [Sample(decision, 0.0, 0, (0.0, math.nan, 1.0))])
    ce.backward()
    pi = dist.exp().tolist()
    assert n == 1
    assert logits.grad.tolist() == pytest.approx([pi[0], 0.0, -pi[0]], abs=1e-7)


@pytest.mark.parametrize(
    "target",
    [(math.nan, 0.0, 1.0), (0.5, math.nan, 0.5), (math.nan, math.nan, 1.0), (0.0, 0.0, 1.0)],
)
def test_the_target_trained_toward_sums_to_1(micro_of, sample_of, target):
    probs = [0.7, 0.2, 0.1]
    pulled, _ = pulled_toward(micro_of, sample_of, target, probs)
    assert sum(pulled) == pytest.approx(1.0, rel=1e-6)
    untried = [p for p, t in zip(probs, target, strict=True) if math.isnan(t)]
    assert [p for p, t in zip(pulled, target, strict=True) if math.isnan(t)] == pytest.approx(
        untried, rel=1e-6
    )


def test_a_group_that_tried_every_move_keeps_its_target_exactly(micro_of, sample_of):
    # No NaN: the target and the loss are the greedy ones, bit for bit.
    probs = [0.6, 0.3, 0.1]
    target, value = pulled_toward(micro_of, sample_of, (0.0, 0.5, 0.5), probs)
    assert target == [0.0, 0.5, 0.5]
    log_p = torch.tensor(probs).log()
    assert value == (-(torch.tensor([0.0, 0.5, 0.5]) * log_p).sum()).item()


def test_the_term_recalls_stored_targets_and_remembers_fresh_ones():
    term = PolicyIteration(TargetConfig(coef=1.0, memory=2))
    first = [sample((i,), (1.0, 0.0)) for i in range(3)]
    assert term.recall(first) == ([], {"loss/replayed_targets": 0.0})
    assert [k[0] for k in term.memory] == [(1,), (2,)]  # capacity 2: the oldest went
    replayed, metrics = term.recall([sample((2,), (0.0, 1.0))])
    assert [r.decision.prompt_ids for r in replayed] == [(1,)] and all(r.replay for r in replayed)
    assert metrics == {"loss/replayed_targets": 1.0}
    restored = PolicyIteration(TargetConfig(coef=1.0, memory=2))
    restored.load_state_dict(term.state_dict())
    assert restored.memory == term.memory


def test_without_memory_nothing_is_recalled():
    term = PolicyIteration(TargetConfig(coef=1.0))
    assert term.recall([sample((1,), (1.0, 0.0))]) == ([], {})
    assert term.memory == {}


@pytest.mark.parametrize("bad", [{"coef": 0.0}, {"coef": 1.0, "memory": -1}, {"memory": 4}])
def test_a_target_needs_a_positive_weight_and_a_memory_of_at_least_0(bad):
    with pytest.raises(ValidationError):
        TargetConfig(**bad)
