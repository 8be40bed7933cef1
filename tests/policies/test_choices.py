"""Choice scoring: the shared-prefix fast path against full sequences, tables of the
distinct items, and a batch's inputs packed once."""

import pytest
import torch

from coplay.envs.registry import make_env
from coplay.policies import choices, prefixes
from coplay.policies.choices import choice_sequence_logps
from coplay.policies.lm import LMPolicy
from coplay.policies.prefixes import prefix_groups, shared_prefix_len
from coplay.policies.scoring import CHECKPOINTED, sequence_logps
from tests.policies.test_scoring import choice_items


@pytest.fixture(params=["grouped", "plain"])
def batching(request, monkeypatch):
    """Both ways a choice batch runs: prefix groups (where the tokens they save pay for
    their calls; a negative cost makes each call a gain, so the plan of the most calls
    runs) and one plain batch (a small batch's plan)."""
    if request.param == "grouped":
        monkeypatch.setattr(prefixes, "CALL_TOKENS", -(10**6))
    return request.param


# The game's own actions (one token each), then actions of unequal token lengths:
# the shorter ones are padded, and their padding must not count.
@pytest.mark.parametrize("actions", [None, ((5, 6), (7,)), ((8,), (5, 6, 7), (9, 10))])
def test_shared_prefix_scoring_equals_full_sequences(tiny, batching, actions):
    model, tok = tiny
    policy = LMPolicy(model, tok)
    env = make_env("tic_tac_toe")
    items = []
    for seed in range(6):
        env.reset(seed)
        for _ in range(seed % 4):
            env.step(
                {env.players_to_act()[0]: env.observe(env.players_to_act()[0]).legal_actions[0]}
            )
        obs = env.observe(env.players_to_act()[0])
        items.append(policy._choice_item(obs))
    if actions is not None:
        items = [(p, actions) for p, _ in items]
    with torch.no_grad():
        fast = choice_sequence_logps(model, items, temperature=0.7)
        # Each full sequence scored alone: no padding, no cache, no shared prefix.
        ref = torch.cat(
            [sequence_logps(model, [(p, c)], temperature=0.7) for p, cs in items for c in cs]
        )
    assert fast.shape == ref.shape == (sum(len(cs) for _, cs in items),)
    assert torch.allclose(fast, ref, atol=1e-5)


def test_grouped_choice_scores_and_gradients_equal_one_row_at_a_time(tiny, batching):
    model, tok = tiny
    policy = LMPolicy(model, tok)
    for game in ("tic_tac_toe", "kuhn_poker"):  # one-token and multi-token actions
        items = choice_items(policy, game, 8)
        if batching == "grouped":
            assert len(prefix_groups([p for p, _ in items])) > 1
        batched = choice_sequence_logps(model, items, temperature=0.7)
        (g_batched,) = torch.autograd.grad(batched.square().sum(), model.model.embed_tokens.weight)
        alone = torch.cat([choice_sequence_logps(model, [it], temperature=0.7) for it in items])
        (g_alone,) = torch.autograd.grad(alone.square().sum(), model.model.embed_tokens.weight)
        assert torch.allclose(batched, alone, atol=1e-5)
        assert torch.allclose(g_batched, g_alone, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("game", ["tic_tac_toe", "kuhn_poker"])  # one-token, multi-token
def test_repeated_items_run_once_and_score_and_backpropagate_as_separate_rows(
    tiny, game, monkeypatch
):
    model, tok = tiny
    policy = LMPolicy(model, tok)
    distinct = choices.distinct_items(choice_items(policy, game, 12))[0][:4]
    assert len(distinct) == 4
    items = [distinct[i] for i in (0, 1, 0, 2, 1, 0, 3)]
    items[2] = (list(items[2][0]), [list(c) for c in items[2][1]])  # lists: the same ids
    weights = torch.arange(1.0, 8.0)[:, None]  # a different weight on every copy
    batches = []
    real = choices.choice_sequence_logps

    def spy(model, items, **kw):
        batches.append(len(items))
        return real(model, items, **kw)

    monkeypatch.setattr(choices, "choice_sequence_logps", spy)
    table = choices.choice_table(model, items, temperature=0.7, pad_id=0)
    (g_once,) = torch.autograd.grad(
        (weights * table.clamp_min(-50)).sum(), model.model.embed_tokens.weight
    )
    assert batches == [4]
    monkeypatch.setattr(choices, "distinct_items", lambda xs: (list(xs), range(len(xs))))
    rows = choices.choice_table(model, items, temperature=0.7, pad_id=0)
    (g_rows,) = torch.autograd.grad(
        (weights * rows.clamp_min(-50)).sum(), model.model.embed_tokens.weight
    )
    assert batches == [4, 7]
    assert torch.allclose(table, rows, atol=1e-5)
    assert torch.allclose(g_once, g_rows, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("actions", [((5,), (6,), (7,)), ((5, 6), (7,))])
def test_a_kv_cache_is_built_only_where_a_longer_action_continues(
    tiny, batching, monkeypatch, actions
):
    from transformers.cache_utils import DynamicLayer

    model, tok = tiny
    items = [(p, actions) for p, _ in choice_items(LMPolicy(model, tok), "tic_tac_toe", 8)]
    writes = []
    real = DynamicLayer.update
    monkeypatch.setattr(
        DynamicLayer, "update", lambda self, *a, **k: writes.append(1) or real(self, *a, **k)
    )
    model.train()
    try:
        choice_sequence_logps(model, items, temperature=1.0).sum().backward()
    finally:
        model.eval()
    # A shared prefix is a cache by design; a plain batch of one-token actions has none.
    assert bool(writes) == (len(actions[0]) > 1 or batching == "grouped")


@pytest.mark.parametrize("game", ["kuhn_poker", "tic_tac_toe"])  # as many actions each, or not
def test_a_choice_table_row_is_its_items_actions_renormalised_then_minus_infinity(tiny, game):
    model, tok = tiny
    items = choice_items(LMPolicy(model, tok), game, 8)
    assert (len({len(cs) for _, cs in items}) == 1) == (game == "kuhn_poker")
    with torch.no_grad():
        table = choices.choice_table(model, items, temperature=0.7, pad_id=0)
        for row, (prompt, cands) in zip(table, items, strict=True):
            scores = sequence_logps(model, [(prompt, c) for c in cands], temperature=0.7)
            assert torch.allclose(row[: len(cands)], scores.log_softmax(0), atol=1e-5)
            assert torch.isneginf(row[len(cands) :]).all()


def test_choice_rows_read_each_items_actions_from_the_distinct_table():
    two, three, one = ((1,), ((2,), (3,))), ((4,), ((5,), (6,), (7,))), ((8,), ((9,),))
    # The distinct items' table, padded; the batch repeats the three-action item.
    table = torch.tensor([[-0.5, -1.0, -9.0], [-0.1, -0.2, -0.3], [0.0, -9.0, -9.0]])
    table.requires_grad_(True)
    rows = choices.ChoiceRows(table, torch.tensor([1, 0, 1, 2]), [three, two, three, one])
    want = [[-0.1, -0.2, -0.3], [-0.5, -1.0], [-0.1, -0.2, -0.3], [0.0]]
    assert rows.flat().tolist() == pytest.approx([x for row in want for x in row])
    assert len(rows) == 4 and rows.sizes() == [3, 2, 3, 1]
    assert [r.tolist() for r in rows] == [pytest.approx(row) for row in want]
    rows.flat().sum().backward()  # copies add up in the shared row; padding gets none
    assert table.grad.tolist() == [[1.0, 1.0, 0.0], [2.0, 2.0, 2.0], [1.0, 0.0, 0.0]]
    every = choices.ChoiceRows(table.detach(), None, [two, three, one])
    assert every.flat().tolist() == pytest.approx([-0.5, -1.0, -0.1, -0.2, -0.3, 0.0])


def _reference_inputs(items, pad, *, share):
    """``choice_inputs`` from the public helpers, one packing per reading: the plan of
    the prompts, then per group its shared prefix and ``left_pad`` of the rest."""
    plan = prefixes.prefix_plan([p for p, _ in items]) if share else None
    groups = [list(range(len(items)))] if plan is None else plan
    out = []
    for rows in groups:
        prompts = [items[i][0] for i in rows]
        n = shared_prefix_len(prompts) if plan is not None and len(rows) > 1 else 0
        ids, attn, pos = prefixes.left_pad([p[n:] for p in prompts], pad)
        attn = torch.cat([torch.ones(len(rows), n, dtype=attn.dtype), attn], dim=1)
        prefix = torch.tensor([list(prompts[0][:n])]) if n else None
        out.append((prefix, ids, attn, pos + n))
    return out


@pytest.mark.parametrize("call_tokens", [None, 0, -(10**9)])
def test_choice_inputs_pack_each_prompt_once_as_the_helpers_pad_it(monkeypatch, call_tokens):
    """The plan and every group read one packing of the prompts: the same tensors as
    planning, then cutting the shared prefix and padding each group on its own."""
    import random

    if call_tokens is not None:
        monkeypatch.setattr(prefixes, "CALL_TOKENS", call_tokens)
    rng = random.Random(0)
    cpu = torch.device("cpu")
    for _ in range(300):
        base = [rng.randint(0, 9) for _ in range(rng.randint(0, 30))]
        items = []
        for _ in range(rng.randint(1, 30)):
            own = [rng.randint(0, 9) for _ in range(rng.randint(1, 12))]
            prompt = tuple(base[: rng.randint(0, len(base))] + own)
            actions = tuple(
                tuple(rng.randint(0, 9) for _ in range(rng.randint(1, 3)))
                for _ in range(rng.randint(1, 4))
            )
            items.append((prompt, actions))
        for share in (True, False):
            got = choices.choice_inputs(items, 3, share=share, device=cpu).groups
            want = _reference_inputs(items, 3, share=share)
            assert len(got) == len(want)
            for g, (prefix, ids, attn, pos) in zip(got, want, strict=True):
                assert (g.prefix is None) == (prefix is None)
                assert prefix is None or torch.equal(g.prefix, prefix)
                for a, b in ((g.ids, ids), (g.attn, attn), (g.pos, pos)):
                    assert a.dtype == b.dtype and torch.equal(a, b)


def test_small_cells_are_the_cells_kept_by_their_sizes():
    sizes = (3, 1, 2)
    rows, cols = choices._small_cells(sizes)
    want = choices._cells(list(sizes))
    assert torch.equal(rows, want[0]) and torch.equal(cols, want[1])
    assert choices._small_cells(sizes)[0] is rows  # kept, not built again


def test_distinct_items_match_copies_by_identity_and_by_value():
    a, b = ((1, 2), ((3,), (4,))), ((5,), ((6,),))
    twin = (tuple([1, 2]), tuple([(3,), (4,)]))  # a's values in other objects
    unique, inverse = choices.distinct_items([a, b, a, twin, b])
    assert unique == [a, b] and unique[0] is a
    assert inverse.tolist() == [0, 1, 0, 0, 1]
    unique, inverse = choices.distinct_items([])
    assert unique == [] and inverse.tolist() == []


@pytest.mark.parametrize(
    "item, problem",
    [
        (((4, 5), ((6,), (), (7, 8))), "an action of no tokens among 3"),
        (((4, 5), ((),)), "an action of no tokens among 1"),
        (((4, 5), ()), "lists no actions"),
        (((), ((6,), (7,))), "prompt has no tokens"),
    ],
)
def test_an_item_that_cannot_be_scored_is_one_error_line(tiny, batching, item, problem):
    """An empty action would score log-prob 0 (above every real action) in a whole
    sequence, and its first token would read the padding in the cached pass; an item
    without actions or without a prompt has nothing to renormalise or to follow."""
    model, tok = tiny
    fine = ((4, 9), ((6,), (7,)))
    for checkpointed in (False, True):  # the cached pass, and whole sequences
        model.train(checkpointed)
        setattr(model, CHECKPOINTED, checkpointed)
        try:
            with torch.no_grad(), pytest.raises(ValueError, match=f"a choice item.*{problem}"):
                choices.choice_table(model, [fine, item], temperature=1.0, pad_id=0)
        finally:
            model.eval()
            setattr(model, CHECKPOINTED, False)


def test_a_batch_without_items_scores_to_nothing(tiny):
    model, _ = tiny
    with torch.no_grad():
        assert choice_sequence_logps(model, [], temperature=1.0).shape == (0,)
        table, inverse = choices.distinct_choice_table(model, [], temperature=1.0, pad_id=0)
    assert table.shape == (0, 0) and inverse is None
    assert choices.ChoiceRows(table, inverse, []).flat().shape == (0,)
