"""Scoring kernels: the shared-prefix fast path against full sequences."""

import pytest
import torch

from coplay.envs.registry import make_env
from coplay.policies import scoring
from coplay.policies.lm import LMPolicy
from coplay.policies.scoring import (
    choice_sequence_logps,
    draw,
    fold_common_prefix,
    prefix_groups,
    sample_text,
    sampling_logps,
    sequence_logps,
    shared_prefix_len,
    token_logps,
)


@pytest.fixture(params=["grouped", "plain"])
def batching(request, monkeypatch):
    """Both ways a choice batch runs: prefix groups (where the tokens they save pay for
    their calls; a negative cost makes each call a gain, so the plan of the most calls
    runs) and one plain batch (a small batch's plan)."""
    if request.param == "grouped":
        monkeypatch.setattr(scoring, "CALL_TOKENS", -(10**6))
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


def test_fold_keeps_one_token_per_action():
    assert fold_common_prefix((1,), ((5,), (5,))) == ((1,), ((5,), (5,)))
    assert fold_common_prefix((1,), ((5, 6), (5, 6, 7))) == ((1, 5), ((6,), (6, 7)))


def _items(policy, game, n):
    """Choice items of ``n`` positions from both seats (prompts differ at the mark)."""
    env = make_env(game)
    items = []
    for seed in range(n):
        env.reset(seed)
        for _ in range(seed % 4):
            if not env.players_to_act():
                break
            p = env.players_to_act()[0]
            env.step({p: env.observe(p).legal_actions[-1]})
        if env.players_to_act():
            items.append(policy._choice_item(env.observe(env.players_to_act()[0])))
    return items


def test_grouped_choice_scores_and_gradients_equal_one_row_at_a_time(tiny, batching):
    model, tok = tiny
    policy = LMPolicy(model, tok)
    for game in ("tic_tac_toe", "kuhn_poker"):  # one-token and multi-token actions
        items = _items(policy, game, 8)
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
    distinct = scoring.distinct_items(_items(policy, game, 12))[0][:4]
    assert len(distinct) == 4
    items = [distinct[i] for i in (0, 1, 0, 2, 1, 0, 3)]
    items[2] = (list(items[2][0]), [list(c) for c in items[2][1]])  # lists: the same ids
    weights = torch.arange(1.0, 8.0)[:, None]  # a different weight on every copy
    batches = []
    real = scoring.choice_sequence_logps

    def spy(model, items, **kw):
        batches.append(len(items))
        return real(model, items, **kw)

    monkeypatch.setattr(scoring, "choice_sequence_logps", spy)
    table = scoring.choice_table(model, items, temperature=0.7, pad_id=0)
    (g_once,) = torch.autograd.grad(
        (weights * table.clamp_min(-50)).sum(), model.model.embed_tokens.weight
    )
    assert batches == [4]
    monkeypatch.setattr(scoring, "distinct_items", lambda xs: (list(xs), range(len(xs))))
    rows = scoring.choice_table(model, items, temperature=0.7, pad_id=0)
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
    items = [(p, actions) for p, _ in _items(LMPolicy(model, tok), "tic_tac_toe", 8)]
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
    items = _items(LMPolicy(model, tok), game, 8)
    assert (len({len(cs) for _, cs in items}) == 1) == (game == "kuhn_poker")
    with torch.no_grad():
        table = scoring.choice_table(model, items, temperature=0.7, pad_id=0)
        for row, (prompt, cands) in zip(table, items, strict=True):
            scores = sequence_logps(model, [(prompt, c) for c in cands], temperature=0.7)
            assert torch.allclose(row[: len(cands)], scores.log_softmax(0), atol=1e-5)
            assert torch.isneginf(row[len(cands) :]).all()


def test_choice_rows_read_each_items_actions_from_the_distinct_table():
    two, three, one = ((1,), ((2,), (3,))), ((4,), ((5,), (6,), (7,))), ((8,), ((9,),))
    # The distinct items' table, padded; the batch repeats the three-action item.
    table = torch.tensor([[-0.5, -1.0, -9.0], [-0.1, -0.2, -0.3], [0.0, -9.0, -9.0]])
    table.requires_grad_(True)
    rows = scoring.ChoiceRows(table, torch.tensor([1, 0, 1, 2]), [three, two, three, one])
    want = [[-0.1, -0.2, -0.3], [-0.5, -1.0], [-0.1, -0.2, -0.3], [0.0]]
    assert rows.flat().tolist() == pytest.approx([x for row in want for x in row])
    assert len(rows) == 4 and rows.sizes() == [3, 2, 3, 1]
    assert [r.tolist() for r in rows] == [pytest.approx(row) for row in want]
    rows.flat().sum().backward()  # copies add up in the shared row; padding gets none
    assert table.grad.tolist() == [[1.0, 1.0, 0.0], [2.0, 2.0, 2.0], [1.0, 0.0, 0.0]]
    every = scoring.ChoiceRows(table.detach(), None, [two, three, one])
    assert every.flat().tolist() == pytest.approx([-0.5, -1.0, -0.1, -0.2, -0.3, 0.0])


def test_grouped_token_logps_equal_one_row_at_a_time(tiny):
    model, tok = tiny
    policy = LMPolicy(model, tok)
    prompts = [p for p, _ in _items(policy, "tic_tac_toe", 6)]
    responses = [(5, 6, 7), (), (8,), (9, 10), (5,), (11, 12, 13)]
    pairs = list(zip(prompts, responses, strict=True))
    with torch.no_grad():
        batched = token_logps(model, pairs, temperature=0.7)
        alone = [token_logps(model, [pair], temperature=0.7) for pair in pairs]
    for j in range(3):  # log-probs, entropies, mask; left-aligned, padded to 3
        ref = torch.cat([torch.nn.functional.pad(a[j], (0, 3 - a[j].shape[1])) for a in alone])
        assert torch.allclose(batched[j], ref, atol=1e-5)


def test_prefix_groups_cover_every_row_once_within_the_bound():
    seqs = [(1, 2, 3, 4, 5), (1, 2, 3, 9, 5), (1, 7, 3, 4), (1, 2), (1, 7, 3, 4, 6)]
    for bound in (1, 2, 3, 5):
        groups = prefix_groups(seqs, max_groups=bound, call_tokens=0)
        assert len(groups) <= bound
        assert sorted(i for g in groups for i in g) == list(range(len(seqs)))
    assert prefix_groups(seqs, max_groups=1, call_tokens=0) == [[0, 1, 2, 3, 4]]
    assert len(prefix_groups(seqs, max_groups=3, call_tokens=0)) == 3
    # Each row keeps its last token: (1, 2) shares at most its first.
    assert shared_prefix_len([seqs[0], seqs[3]]) == 1
    assert shared_prefix_len([seqs[2], seqs[4]]) == 3


def _variants(rows, head, split, tail):
    """``rows`` prompts: ``head`` shared tokens, one of ``split`` variant tokens, then
    ``tail`` tokens every variant shares, then a token of the row's own."""
    return [
        tuple(range(head)) + (1000 + r % split,) + tuple(range(2000, 2000 + tail)) + (3000 + r,)
        for r in range(rows)
    ]


def test_prefix_plan_splits_only_where_the_tokens_saved_pay_for_the_calls():
    cost = scoring.CALL_TOKENS
    # The seat's mark early, the rules after it (Kuhn's shape): a group per variant.
    early = _variants(64, 2, 2, 100)
    assert sorted(map(len, scoring.prefix_plan(early))) == [32, 32]
    # Rules first, then the board (tic-tac-toe's): one more shared token per group
    # does not pay for two more calls each, so one group shares the rules.
    late = _variants(200, 30, 3, 0)
    assert scoring.prefix_plan(late) == [list(range(200))]
    assert len(scoring.prefix_plan(late, call_tokens=0)) == 3
    # A small batch, or one without a shared prefix, runs plain.
    assert scoring.prefix_plan(_variants(4, 30, 1, 0)) is None
    assert scoring.prefix_plan([(r, 5, 6) for r in range(500)]) is None
    # The boundary: B - 1 rows saving n tokens against one more call (padding aside).
    n = 16
    rows = cost // n + 1
    shared = [tuple(range(n)) + (3000 + r,) for r in range(rows + 1)]
    assert scoring.prefix_plan(shared[:rows]) is None
    assert scoring.prefix_plan(shared) == [list(range(rows + 1))]
    # Padding counts: short and long prompts apart pad less, even sharing little more.
    short = [(1, 2, 7, 3000 + r) for r in range(40)]
    long = [(1, 2, 8) + tuple(range(100, 300)) + (4000 + r,) for r in range(40)]
    mixed = [x for pair in zip(short, long, strict=True) for x in pair]
    assert scoring.prefix_plan(mixed) == [list(range(0, 80, 2)), list(range(1, 80, 2))]
    # Few rows of very different lengths: each alone pads nothing.
    assert scoring.prefix_plan([tuple(range(10)), tuple(range(100, 1100))]) == [[0], [1]]
    assert scoring.prefix_plan([]) is None
    assert prefix_groups([(1, 2)]) == [[0]]


def _reference_inputs(items, pad, *, share):
    """``choice_inputs`` from the public helpers, one packing per reading: the plan of
    the prompts, then per group its shared prefix and ``left_pad`` of the rest."""
    plan = scoring.prefix_plan([p for p, _ in items]) if share else None
    groups = [list(range(len(items)))] if plan is None else plan
    out = []
    for rows in groups:
        prompts = [items[i][0] for i in rows]
        n = shared_prefix_len(prompts) if plan is not None and len(rows) > 1 else 0
        ids, attn, pos = scoring.left_pad([p[n:] for p in prompts], pad)
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
        monkeypatch.setattr(scoring, "CALL_TOKENS", call_tokens)
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
            got = scoring.choice_inputs(items, 3, share=share, device=cpu).groups
            want = _reference_inputs(items, 3, share=share)
            assert len(got) == len(want)
            for g, (prefix, ids, attn, pos) in zip(got, want, strict=True):
                assert (g.prefix is None) == (prefix is None)
                assert prefix is None or torch.equal(g.prefix, prefix)
                for a, b in ((g.ids, ids), (g.attn, attn), (g.pos, pos)):
                    assert a.dtype == b.dtype and torch.equal(a, b)


# Free-text sampling: the distribution sampled from, its recorded log-probs, stops.

SAMPLERS = [
    {"temperature": 1.0},
    {"temperature": 0.7, "top_k": 5},
    {"temperature": 1.3, "top_p": 0.8},
    {"temperature": 0.9, "top_k": 40, "top_p": 0.6},
]


def _prompts(policy, n=6):
    return [p for p, _ in _items(policy, "kuhn_poker", n)]


def _sample(model, prompts, seed=0, **kw):
    kw = {"max_new_tokens": 8, "temperature": 1.0, "eos_id": -1, "pad_id": 0} | kw
    return sample_text(model, prompts, generator=torch.Generator().manual_seed(seed), **kw)


@pytest.mark.parametrize("params", SAMPLERS)
def test_learner_recomputes_the_sampled_log_probs_exactly(tiny, params):
    model, tok = tiny
    prompts = _prompts(LMPolicy(model, tok))
    answers = _sample(model, prompts, max_new_tokens=10, **params)
    assert {len(ids) for ids, _ in answers} == {10}
    pairs = [(p, ids) for p, (ids, _) in zip(prompts, answers, strict=True)]
    with torch.no_grad():
        logp, ent, mask = token_logps(model, pairs, **params)
    recorded = torch.tensor([lps for _, lps in answers])
    assert torch.allclose(logp, recorded, atol=1e-5)
    assert torch.isfinite(ent).all() and (mask == 1).all()
    # The cut has teeth: the recorded log-probs are not the full softmax's.
    with torch.no_grad():
        full, _, _ = token_logps(model, pairs, temperature=params["temperature"])
    cut = len(params) > 1
    assert (not torch.allclose(full, recorded, atol=1e-3)) == cut
    assert (recorded > full + 1e-4).all() if cut else torch.allclose(full, recorded, atol=1e-5)


def test_sampling_logps_is_hugging_faces_top_k_then_top_p():
    from transformers.generation.logits_process import TopKLogitsWarper, TopPLogitsWarper

    logits = torch.randn(16, 50, generator=torch.Generator().manual_seed(0)) * 3
    for k, p in [(0, 0.5), (7, 1.0), (10, 0.9), (3, 0.2), (0, 1.0)]:
        ref = logits / 0.8
        ref = TopKLogitsWarper(k)(None, ref) if k else ref
        ref = TopPLogitsWarper(p)(None, ref) if p < 1 else ref
        ours = sampling_logps(logits, temperature=0.8, top_k=k, top_p=p)
        assert torch.equal(ours.isinf(), ref.isinf())
        assert torch.allclose(ours, torch.log_softmax(ref, -1), atol=1e-6)
        assert (ours.isfinite().sum(-1) <= (k or 50)).all()
    # top_p keeps the most likely tokens until their mass reaches it.
    lp = sampling_logps(torch.tensor([0.5, 0.3, 0.15, 0.05]).log(), temperature=1.0, top_p=0.8)
    assert torch.allclose(lp.exp(), torch.tensor([0.625, 0.375, 0.0, 0.0]))


def test_a_drawn_token_is_never_cut_from_the_learners_distribution():
    # Token 2 just outside top_p 0.8 here (0.5 + 0.3 before it): drawn in a pass whose
    # numerics put it inside, it would score -inf and the loss NaN.
    logits = torch.tensor([[0.5, 0.3, 0.15, 0.05]]).log()
    assert sampling_logps(logits, temperature=1.0, top_p=0.8)[0, 2].isinf()
    kept = sampling_logps(logits, temperature=1.0, top_p=0.8, keep=torch.tensor([2]))
    assert torch.allclose(kept.exp(), torch.tensor([[0.5, 0.3, 0.15, 0.0]]) / 0.95)
    cut_k = sampling_logps(logits, temperature=1.0, top_k=1, keep=torch.tensor([3]))
    assert torch.allclose(cut_k.exp(), torch.tensor([[0.5, 0.0, 0.0, 0.05]]) / 0.55)
    # A drawn token inside the cut set changes nothing.
    inside = sampling_logps(logits, temperature=1.0, top_p=0.8, keep=torch.tensor([0]))
    assert torch.equal(inside, sampling_logps(logits, temperature=1.0, top_p=0.8))


def test_the_learner_scores_a_response_token_outside_the_cut_set_finitely(tiny):
    model, tok = tiny
    prompt = _prompts(LMPolicy(model, tok), 1)[0]
    with torch.no_grad():
        unlikely = int(model(input_ids=torch.tensor([prompt])).logits[0, -1].argmin())
        logp, _, _ = token_logps(model, [(prompt, [unlikely])], temperature=1.0, top_p=0.5)
    assert logp.isfinite().all() and logp[0, 0] < -1.0


def test_draw_inverts_the_cdf_and_never_draws_a_cut_token():
    probs = torch.tensor([[0.1, 0.0, 0.6, 0.3, 0.0]])
    n = 1000
    u = (torch.arange(n) + 0.5) / n  # evenly spread: counts are the probs exactly
    got = draw(probs.log().expand(n, -1), u)
    assert torch.bincount(got, minlength=5).tolist() == [100, 0, 600, 300, 0]
    edges = draw(probs.log().expand(3, -1), torch.tensor([0.0, 1 - 2**-24, 0.1]))
    assert edges.tolist() == [0, 3, 2]  # 0.1 ends token 0's mass: the next with mass


def test_sampled_frequencies_follow_the_recorded_distribution(tiny):
    model, tok = tiny
    prompt = _prompts(LMPolicy(model, tok), 1)[0]
    n = 4000
    answers = _sample(model, [prompt] * n, max_new_tokens=1, top_k=4, temperature=2.0)
    first = torch.tensor([ids[0] for ids, _ in answers])
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([prompt])).logits[0, -1]
    probs = sampling_logps(logits, temperature=2.0, top_k=4).exp()
    freq = torch.bincount(first, minlength=len(probs)).float() / n
    assert set(first.tolist()) <= set(probs.nonzero().squeeze(-1).tolist())
    assert (freq - probs).abs().max() < 0.03  # 4000 draws: the sd is at most 0.008
    assert probs.max() < 0.9  # not a point mass


@pytest.mark.parametrize("share", [8, 1])  # rows dropped as they end / kept, masked
def test_stop_sequences_and_eos_end_each_answer_where_they_first_occur(tiny, share, monkeypatch):
    monkeypatch.setattr(scoring, "_DROP_SHARE", share)
    model, tok = tiny
    prompts = _prompts(LMPolicy(model, tok))
    free = _sample(model, prompts, max_new_tokens=12, temperature=2.0)
    stop = free[0][0][3:5]  # a two-token sequence row 0 sampled
    eos = free[1][0][6]
    cut = _sample(model, prompts, max_new_tokens=12, temperature=2.0, stop=[stop], eos_id=eos)
    for (ids, lps), (got, got_lps) in zip(free, cut, strict=True):
        ends = [i + 1 for i in range(len(ids)) if ids[i] == eos]
        ends += [i + 2 for i in range(len(ids) - 1) if ids[i : i + 2] == stop]
        n = min(ends, default=len(ids))
        # Rows dropped as they end leave the others' draws and log-probs alone.
        assert got == ids[:n]
        assert torch.allclose(torch.tensor(got_lps), torch.tensor(lps[:n]), atol=1e-5)
    assert len(cut[0][0]) <= 5 and len(cut[1][0]) <= 7
    assert len({len(ids) for ids, _ in cut}) > 1  # rows ended at different steps
    assert {len(ids) for ids, _ in _sample(model, prompts, eos_id=None)} == {8}


def test_sample_text_refuses_parameters_that_define_no_distribution(tiny):
    model, tok = tiny
    prompts = _prompts(LMPolicy(model, tok), 2)
    for bad, match in [
        ({"top_p": 0.0}, "top_p must be in"),
        ({"top_k": -1}, "top_k must be >= 0"),
        ({"temperature": 0.0}, "temperature must be > 0"),
        ({"stop": [()]}, "a stop sequence must hold"),
    ]:
        with pytest.raises(ValueError, match=match):
            _sample(model, prompts, **bad)
    assert _sample(model, prompts, max_new_tokens=0) == [((), ()), ((), ())]


@pytest.mark.parametrize("sliding", [False, True])
def test_sampling_matches_the_learner_on_a_qwen2_architecture(sliding):
    from transformers import Qwen2Config, Qwen2ForCausalLM

    cfg = Qwen2Config(
        vocab_size=300,
        hidden_size=64,
        intermediate_size=96,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,  # grouped-query attention
        use_sliding_window=sliding,
        sliding_window=8,
        max_window_layers=1,
    )
    torch.manual_seed(0)
    model = Qwen2ForCausalLM(cfg).eval()
    # A sliding window counts padding as tokens (in the learner's pass too), so the
    # sliding model's rows are unpadded here: one prompt, longer than its window.
    sizes = (11,) if sliding else (3, 9, 6)
    prompts = [list(range(5, 5 + n)) for n in sizes]
    answers = _sample(model, prompts, max_new_tokens=12, top_k=50, top_p=0.95)
    pairs = [(p, ids) for p, (ids, _) in zip(prompts, answers, strict=True)]
    with torch.no_grad():
        logp, _, _ = token_logps(model, pairs, temperature=1.0, top_k=50, top_p=0.95)
    assert torch.allclose(logp, torch.tensor([lps for _, lps in answers]), atol=1e-5)


def test_gradients_through_the_cut_distribution_are_finite(tiny):
    model, tok = tiny
    prompts = _prompts(LMPolicy(model, tok), 3)
    params = {"temperature": 0.8, "top_k": 8, "top_p": 0.7}
    answers = _sample(model, prompts, max_new_tokens=5, **params)
    pairs = [(p, ids) for p, (ids, _) in zip(prompts, answers, strict=True)]
    logp, ent, _ = token_logps(model, pairs, **params)
    (grad,) = torch.autograd.grad((logp + 0.1 * ent).sum(), model.model.embed_tokens.weight)
    assert torch.isfinite(grad).all() and grad.abs().sum() > 0


def test_small_cells_are_the_cells_kept_by_their_sizes():
    sizes = (3, 1, 2)
    rows, cols = scoring._small_cells(sizes)
    want = scoring._cells(list(sizes))
    assert torch.equal(rows, want[0]) and torch.equal(cols, want[1])
    assert scoring._small_cells(sizes)[0] is rows  # kept, not built again


def test_distinct_items_match_copies_by_identity_and_by_value():
    a, b = ((1, 2), ((3,), (4,))), ((5,), ((6,),))
    twin = (tuple([1, 2]), tuple([(3,), (4,)]))  # a's values in other objects
    unique, inverse = scoring.distinct_items([a, b, a, twin, b])
    assert unique == [a, b] and unique[0] is a
    assert inverse.tolist() == [0, 1, 0, 0, 1]
    unique, inverse = scoring.distinct_items([])
    assert unique == [] and inverse.tolist() == []
