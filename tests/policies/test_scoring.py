"""Scoring kernels: the shared-prefix fast path against full sequences."""

import torch

from coplay.envs.registry import make_env
from coplay.policies.lm import LMPolicy
from coplay.policies.scoring import choice_sequence_logps, fold_common_prefix, sequence_logps


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
