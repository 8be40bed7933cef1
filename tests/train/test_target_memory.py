"""The memory of policy-iteration targets: one entry per position, the latest target,
the oldest positions dropped first, and no replay of a position trained fresh."""

from coplay.train.learner import Sample
from coplay.train.target_memory import remember_targets, replays, target_key
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
