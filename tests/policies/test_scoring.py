"""Scoring kernels: the shared-prefix fast path against full sequences."""

import torch

from coplay.envs.registry import make_env
from coplay.policies.lm import LMPolicy
from coplay.policies.scoring import (
    choice_sequence_logps,
    fold_common_prefix,
    prefix_groups,
    sequence_logps,
    shared_prefix_len,
    token_logps,
)


def test_shared_prefix_scoring_equals_full_sequences(tiny):
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
    with torch.no_grad():
        fast = choice_sequence_logps(model, items, temperature=0.7)
        ref = sequence_logps(model, [(p, c) for p, cs in items for c in cs], temperature=0.7)
    assert fast.shape == ref.shape
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


def test_grouped_choice_scores_and_gradients_equal_one_row_at_a_time(tiny):
    model, tok = tiny
    policy = LMPolicy(model, tok)
    for game in ("tic_tac_toe", "kuhn_poker"):  # one-token and multi-token actions
        items = _items(policy, game, 8)
        assert len(prefix_groups([p for p, _ in items])) > 1
        batched = choice_sequence_logps(model, items, temperature=0.7)
        (g_batched,) = torch.autograd.grad(batched.square().sum(), model.model.embed_tokens.weight)
        alone = torch.cat([choice_sequence_logps(model, [it], temperature=0.7) for it in items])
        (g_alone,) = torch.autograd.grad(alone.square().sum(), model.model.embed_tokens.weight)
        assert torch.allclose(batched, alone, atol=1e-5)
        assert torch.allclose(g_batched, g_alone, rtol=1e-4, atol=1e-4)


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
        groups = prefix_groups(seqs, max_groups=bound)
        assert len(groups) <= bound
        assert sorted(i for g in groups for i in g) == list(range(len(seqs)))
    assert prefix_groups(seqs, max_groups=1) == [[0, 1, 2, 3, 4]]
    # Each row keeps its last token: (1, 2) shares at most its first.
    assert shared_prefix_len([seqs[0], seqs[3]]) == 1
    assert shared_prefix_len([seqs[2], seqs[4]]) == 3
