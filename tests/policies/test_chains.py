"""Conversations scored as one sequence: grouping, and the learner's log-probs equal to
the sampled ones in every answer format and context."""

from __future__ import annotations

import pytest
import torch

from coplay.envs.registry import make_env
from coplay.policies.answer import ANSWER_FORMATS
from coplay.policies.chains import conversations
from coplay.rollout.engine import play_episodes
from coplay.rollout.invalid import InvalidActionConfig
from coplay.types import Decision
from tests.policies.test_chat import decisions_in_order, text_policy

CONTEXTS = {
    "turn": {"context": "turn"},
    "chat": {"context": "chat"},
    "chat-drop": {"context": "chat", "drop_reasoning": True},
    "chat-budget": {"context": "chat", "max_context_tokens": 300},
    # the cut distribution is what was sampled from, and what the scorer recomputes
    "turn-cut": {"context": "turn", "top_k": 12, "top_p": 0.9},
    "chat-cut": {"context": "chat", "top_k": 12, "top_p": 0.9},
}


@pytest.mark.parametrize("answer", sorted(ANSWER_FORMATS))
@pytest.mark.parametrize("context", sorted(CONTEXTS))
def test_recomputed_logprobs_equal_the_sampled_ones(answer, context):
    policy = text_policy("leduc_poker", seed=3, answer=answer, **CONTEXTS[context])
    episodes = play_episodes(
        lambda: make_env("leduc_poker"),
        [[policy] * 2] * 3,
        [0, 1, 2],
        invalid=InvalidActionConfig(retries=2, on_fail="penalty"),
    )
    decisions = [d for e in episodes for t in e.trajectories for d in decisions_in_order(t)]
    chains = conversations(decisions)
    # random answers hold no reasoning block, so dropping leaves the chains whole
    assert (len(chains) < len(decisions)) == context.startswith("chat")
    with torch.no_grad():
        scored = policy.scorer.score(decisions)
    for i, d in enumerate(decisions):
        n = len(d.response_ids)
        assert scored.mask[i].sum() == n
        assert torch.allclose(scored.logp[i, :n], torch.tensor(d.logprobs), atol=1e-5)


def _d(prompt, response):
    return Decision("", None, "x", prompt_ids=prompt, response_ids=response)


def test_a_conversation_never_branches():
    root = _d((1, 2), (3,))
    kids = [_d((1, 2, 3, 4), (5,)), _d((1, 2, 3, 4), (6,))]
    assert conversations([root, *kids]) == [[0, 1], [2]]


def test_unrelated_prompts_stay_apart():
    assert conversations([_d((1, 2), (3,)), _d((1, 2), (3,)), _d((1, 4), (5,))]) == [
        [0],
        [1],
        [2],
    ]
