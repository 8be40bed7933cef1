"""Kept choice inputs: a small batch is planned and packed once, whatever its order."""

import copy

import pytest
import torch

from coplay.envs.registry import make_env
from coplay.policies import choices, prefixes
from coplay.policies.choice_inputs import KEPT_ITEMS, ChoiceInputs, Kept, canonical_order
from coplay.policies.lm import LMPolicy


def _kuhn_items(policy, n=6):
    """``n`` distinct choice items of Kuhn poker: information states met in play."""
    env, items = make_env("kuhn_poker"), []
    for seed in range(40):
        env.reset(seed)
        while env.players_to_act() and len(items) < n:
            p = env.players_to_act()[0]
            obs = env.observe(p)
            if (item := policy._choice_item(obs)) not in items:
                items.append(item)
            env.step({p: obs.legal_actions[seed % 2]})
    assert len(items) == n
    return items


@pytest.fixture
def kept(monkeypatch):
    """A fresh store of kept inputs, and a count of the batches built."""
    store, built = Kept(), []
    real = choices.choice_inputs
    monkeypatch.setattr(choices, "_KEPT", store)
    monkeypatch.setattr(
        choices,
        "choice_inputs",
        lambda items, *a, **k: built.append(len(items)) or real(items, *a, **k),
    )
    return store, built


@pytest.fixture
def case(tiny, kept):
    """The tiny model (on the CPU), six Kuhn items, the store and the builds."""
    model, tok = tiny
    return model, _kuhn_items(LMPolicy(model, tok)), *kept


def test_canonical_order_sorts_small_batches_only():
    items = [((5, 1), ((2,),)), ((3,), ((2,),)), ((5,), ((2,), (4,)))]
    assert canonical_order(items) == [1, 2, 0]
    many = [((i,), ((1,),)) for i in range(KEPT_ITEMS + 1)]
    assert canonical_order(many) is None
    assert canonical_order(many[:KEPT_ITEMS]) == list(range(KEPT_ITEMS))
    # Ids as lists beside tuples do not compare: no order, so nothing is kept.
    assert canonical_order([((1,), ((2,),)), ([1], [[3]])]) is None


def test_kept_builds_once_per_key_and_drops_the_least_recently_used():
    store, builds = Kept(capacity=2), []

    def build():
        builds.append(1)
        return ChoiceInputs((), None, len(builds))

    assert store.get("a", build).size == 1
    assert store.get("a", build).size == 1  # kept
    store.get("b", build)
    store.get("a", build)  # "a" used last: "b" goes first
    store.get("c", build)
    assert len(store) == 2 and len(builds) == 3
    assert store.get("a", build).size == 1
    assert store.get("b", build).size == 4  # dropped, built again
    # No key, or one that cannot be hashed: built every time, nothing kept.
    store.clear()
    store.get(None, build), store.get(None, build), store.get(([1],), build)
    assert len(builds) == 7 and len(store) == 0


def test_a_small_batch_is_built_once_and_scores_what_a_fresh_build_scores(case):
    model, items, store, built = case
    first = choices.choice_sequence_logps(model, items, temperature=0.7)
    again = choices.choice_sequence_logps(model, items, temperature=0.7)
    assert built == [len(items)] and len(store) == 1
    assert torch.equal(first, again)
    store.clear()
    assert torch.equal(choices.choice_sequence_logps(model, items, temperature=0.7), first)
    # A large batch is built every time and never kept.
    big = [(p + (i,), cs) for i, (p, cs) in enumerate(items * 6)][: KEPT_ITEMS + 1]
    choices.choice_sequence_logps(model, big, temperature=0.7)
    choices.choice_sequence_logps(model, big, temperature=0.7)
    assert built[-2:] == [len(big), len(big)] and len(store) == 1


def test_a_batch_in_another_order_reuses_the_inputs_and_each_item_keeps_its_row(case):
    model, items, store, built = case
    batch = [items[i] for i in (0, 1, 2, 1, 3, 4, 5, 0)]
    other = [items[i] for i in (5, 3, 0, 2, 4, 1, 1, 0)]
    table, inverse = choices.distinct_choice_table(model, batch, temperature=0.7, pad_id=0)
    table2, inverse2 = choices.distinct_choice_table(model, other, temperature=0.7, pad_id=0)
    assert built == [len(items)]  # the second order found the first one's inputs
    rows, rows2 = table[inverse], table2[inverse2]
    for i, item in enumerate(batch):
        j = other.index(item)
        assert torch.allclose(rows[i], rows2[j], atol=1e-6)
    # Each row is the item's own distribution: the same as the item scored alone.
    for i, item in enumerate(batch):
        alone, _ = choices.distinct_choice_table(model, [item], temperature=0.7, pad_id=0)
        k = len(item[1])
        assert torch.allclose(rows[i, :k], alone[0, :k], atol=1e-5)


def test_a_changed_plan_cost_is_a_different_key(case, monkeypatch):
    model, items, store, built = case
    choices.choice_sequence_logps(model, items, temperature=0.7)
    monkeypatch.setattr(prefixes, "CALL_TOKENS", -(10**6))  # every call a gain: groups
    choices.choice_sequence_logps(model, items, temperature=0.7)
    assert len(built) == 2 and len(store) == 2


def test_kept_inputs_score_the_weights_of_the_call(case):
    # What is kept is token tensors only: after the weights move, a kept batch scores
    # what a fresh build scores under the new weights.
    model, items, store, built = case
    before = choices.choice_sequence_logps(model, items, temperature=0.7)
    with torch.no_grad():
        saved = model.lm_head.weight.clone()
        model.lm_head.weight.mul_(1.5)
    try:
        kept_now = choices.choice_sequence_logps(model, items, temperature=0.7)
        store.clear()
        fresh_now = choices.choice_sequence_logps(model, items, temperature=0.7)
    finally:
        with torch.no_grad():
            model.lm_head.weight.copy_(saved)
    assert len(built) == 2
    assert torch.equal(kept_now, fresh_now) and not torch.allclose(kept_now, before)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_on_a_gpu_kept_inputs_live_on_the_models_device(case):
    model, items, store, built = case
    on_gpu = copy.deepcopy(model).cuda()
    first = choices.choice_sequence_logps(on_gpu, items, temperature=0.7)
    again = choices.choice_sequence_logps(on_gpu, items, temperature=0.7)
    assert first.device.type == "cuda" and built == [len(items)]
    assert torch.equal(first, again)
    on_cpu = choices.choice_sequence_logps(model, items, temperature=0.7)
    assert len(store) == 2  # one entry per device
    assert torch.allclose(first.cpu(), on_cpu, atol=1e-5)
