"""The learner's scoring: the sampled log-probs back, for choices, text and both mixed,
with gradients into the model."""

from contextlib import contextmanager
from dataclasses import replace

import pytest
import torch

from coplay.envs.registry import make_env
from coplay.policies.lm import LMPolicy
from coplay.policies.scorer import Scorer
from coplay.types import Observation


def _mixed(n=9):
    """Kuhn choices and message turns interleaved: C M C C M C ..."""
    env = make_env("kuhn_poker")
    out = []
    for i in range(n):
        if i % 3 == 1:
            out.append(Observation(game="talk", player=0, text=f"Round {i}. Send a message."))
        else:
            env.reset(i)
            out.append(env.observe(env.players_to_act()[0]))
    return out


def _scorer(policy: LMPolicy, temperature: float | None = None) -> Scorer:
    temp = policy.temperature if temperature is None else temperature
    return Scorer(policy.model, temp, policy.tokenizer.pad_token_id or 0)


@pytest.mark.parametrize("mode", ["choice", "text"])
def test_score_gives_back_the_sampled_logprobs(tiny_policy, mode):
    policy = LMPolicy(tiny_policy.model, tiny_policy.tokenizer, mode=mode, max_new_tokens=5)
    decisions = policy.act(_mixed())
    assert any(d.choice_ids for d in decisions) == (mode == "choice")
    assert any(len(d.logprobs) > 1 for d in decisions)
    scored = _scorer(policy).score(decisions)
    for i, d in enumerate(decisions):
        n = len(d.logprobs)
        assert scored.mask[i].sum() == n
        assert torch.allclose(scored.logp[i, :n], torch.tensor(d.logprobs), atol=1e-5)
        assert (scored.dists[i] is not None) == bool(d.choice_ids)
    # The policy's scorer is this one.
    assert policy.scorer == _scorer(policy)


def test_score_is_at_the_scorers_temperature(tiny_policy):
    decisions = tiny_policy.act(_mixed(3))
    hot = _scorer(tiny_policy, temperature=3.0).score(decisions)
    sampled = torch.tensor([d.logprobs[0] for d in decisions])
    assert not torch.allclose(hot.logp[:, 0], sampled, atol=1e-3)


def test_gradients_reach_the_model_from_every_row(tiny_policy):
    model = tiny_policy.model
    decisions = tiny_policy.act(_mixed(6))
    scored = _scorer(tiny_policy).score(decisions)
    assert scored.logp.requires_grad
    for i in range(len(decisions)):
        model.zero_grad()
        (scored.logp[i] * scored.mask[i]).sum().backward(retain_graph=True)
        assert any(p.grad is not None and p.grad.abs().sum() > 0 for p in model.parameters())
    model.zero_grad()


def test_score_refuses_an_empty_batch(tiny_policy):
    with pytest.raises(ValueError, match="at least one decision"):
        _scorer(tiny_policy).score([])


def test_score_runs_inside_the_scorers_context(tiny_policy):
    log = []

    @contextmanager
    def context():
        log.append("enter")
        try:
            yield
        finally:
            log.append("exit")

    decisions = tiny_policy.act(_mixed(3))
    plain = tiny_policy.scorer.score(decisions)
    assert log == []
    within = replace(tiny_policy.scorer, context=context).score(decisions)
    assert log == ["enter", "exit"] and torch.equal(within.logp, plain.logp)
    with pytest.raises(ValueError, match="at least one decision"):
        replace(tiny_policy.scorer, context=context).score([])
    assert log == ["enter", "exit"] * 2  # left on an error too
