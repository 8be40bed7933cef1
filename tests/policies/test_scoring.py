"""Scoring kernels: grouped token log-probs against one row at a time, and the cut
distribution the learner scores sampled text with."""

import torch

from coplay.envs.registry import make_env
from coplay.policies.lm import LMPolicy
from coplay.policies.scoring import sampling_logps, token_logps


def choice_items(policy, game, n):
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


def test_grouped_token_logps_equal_one_row_at_a_time(tiny):
    model, tok = tiny
    policy = LMPolicy(model, tok)
    prompts = [p for p, _ in choice_items(policy, "tic_tac_toe", 6)]
    responses = [(5, 6, 7), (), (8,), (9, 10), (5,), (11, 12, 13)]
    pairs = list(zip(prompts, responses, strict=True))
    with torch.no_grad():
        batched = token_logps(model, pairs, temperature=0.7)
        alone = [token_logps(model, [pair], temperature=0.7) for pair in pairs]
    for j in range(3):  # log-probs, entropies, mask; left-aligned, padded to 3
        ref = torch.cat([torch.nn.functional.pad(a[j], (0, 3 - a[j].shape[1])) for a in alone])
        assert torch.allclose(batched[j], ref, atol=1e-5)


def kuhn_prompts(policy, n=6):
    return [p for p, _ in choice_items(policy, "kuhn_poker", n)]


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
    prompt = kuhn_prompts(LMPolicy(model, tok), 1)[0]
    with torch.no_grad():
        unlikely = int(model(input_ids=torch.tensor([prompt])).logits[0, -1].argmin())
        logp, _, _ = token_logps(model, [(prompt, [unlikely])], temperature=1.0, top_p=0.5)
    assert logp.isfinite().all() and logp[0, 0] < -1.0
