"""The Hugging Face backend: the policy's choice distribution, sampled text with its
exact log-probs, new weights with a version, and the registry."""

import copy

import pytest
import torch

from coplay.backends import BACKENDS, Generation, HFBackend, engine_settings, make_backend
from coplay.backends.base import Sampling
from coplay.models.tiny import TinyModelConfig, build_tiny_model
from coplay.policies.lm import LMPolicy
from coplay.policies.scoring import token_logps


def test_choice_logps_are_the_log_of_the_policys_action_probs(tiny, observations):
    model, tok = tiny
    policy = LMPolicy(model, tok)
    backend = HFBackend(model, tok)
    items = [policy._choice_item(o) for o in observations]
    logps = backend.choice_logps(items)
    for lp, probs in zip(logps, policy.action_probs(observations), strict=True):
        assert not lp.requires_grad and lp.shape == (len(probs),)
        assert lp.exp().tolist() == list(probs.values())
        assert lp.exp().sum().item() == pytest.approx(1.0, abs=1e-6)
    # The untrained model does not answer uniformly, so the comparison above has teeth.
    assert logps[0].max() - logps[0].min() > 1e-3


def test_temperature_flattens_the_choice_distribution(tiny, observations):
    model, tok = tiny
    items = [LMPolicy(model, tok)._choice_item(o) for o in observations[:1]]
    cold = HFBackend(model, tok, temperature=1.0).choice_logps(items)[0]
    hot = HFBackend(model, tok, temperature=4.0).choice_logps(items)[0]
    assert hot.max() - hot.min() < cold.max() - cold.min()
    with pytest.raises(ValueError, match="temperature must be > 0"):
        HFBackend(model, tok, temperature=0.0)


def test_generate_records_the_log_probs_the_tokens_were_sampled_with(tiny, observations):
    model, tok = tiny
    backend = HFBackend(model, tok, max_new_tokens=5)
    prompts = [LMPolicy(model, tok).prompt_ids(o) for o in observations]
    answers = backend.generate(prompts, generator=torch.Generator().manual_seed(0))
    again = backend.generate(prompts, generator=torch.Generator().manual_seed(0))
    assert answers == again and all(isinstance(a, Generation) for a in answers)
    pairs = [(p, a.ids) for p, a in zip(prompts, answers, strict=True)]
    logp, _, mask = token_logps(model, pairs, temperature=1.0)
    for i, a in enumerate(answers):
        assert 1 <= len(a.ids) == len(a.logprobs) <= 5 and mask[i].sum() == len(a.ids)
        assert torch.allclose(logp[i, : len(a.ids)], torch.tensor(a.logprobs), atol=1e-5)


def test_a_tokenizer_without_a_pad_token_still_writes(tiny, observations):
    model, tok = tiny
    tok = copy.deepcopy(tok)
    tok.pad_token = None  # a checkpoint's tokenizer may have none (choices padded with 0)
    backend = HFBackend(model, tok, max_new_tokens=3)
    prompts = [LMPolicy(model, tok).prompt_ids(o) for o in observations[:2]]
    answers = backend.generate(prompts, generator=torch.Generator().manual_seed(0))
    assert [1 <= len(a.ids) <= 3 for a in answers] == [True, True]


def test_generate_samples_with_top_k_top_p_and_stops_the_learner_can_recompute(tiny, observations):
    model, tok = tiny
    prompts = [LMPolicy(model, tok).prompt_ids(o) for o in observations]
    backend = HFBackend(model, tok, max_new_tokens=8)
    cut = Sampling(top_k=6, top_p=0.9)
    answers = backend.generate(prompts, generator=torch.Generator().manual_seed(1), sampling=cut)
    stop = tuple(answers[0].ids[2:4])
    stopping = Sampling(top_k=6, top_p=0.9, stop=(stop,))
    stopped = backend.generate(
        prompts, generator=torch.Generator().manual_seed(1), sampling=stopping
    )
    assert stopped[0].ids == answers[0].ids[:4] and stopped[0].ids[-2:] == stop
    pairs = [(p, a.ids) for p, a in zip(prompts, stopped, strict=True)]
    logp, _, _ = token_logps(model, pairs, temperature=1.0, top_k=6, top_p=0.9)
    full, _, _ = token_logps(model, pairs, temperature=1.0)
    for i, a in enumerate(stopped):
        n = len(a.ids)
        assert torch.allclose(logp[i, :n], torch.tensor(a.logprobs), atol=1e-5)
        assert (logp[i, :n] > full[i, :n]).all()  # renormalised over the kept tokens
    with pytest.raises(ValueError, match="temperature must be > 0"):
        HFBackend(model, tok, temperature=0.0)


def test_load_weights_runs_the_new_weights_as_their_version(tiny, observations):
    model, tok = tiny
    items = [LMPolicy(model, tok)._choice_item(o) for o in observations]
    other = build_tiny_model(TinyModelConfig(vocab_size=320), vocab_size=len(tok), seed=1).eval()
    backend = HFBackend(copy.deepcopy(model), tok)
    before = backend.choice_logps(items)
    backend.load_weights(other.state_dict(), version=7)
    after = backend.choice_logps(items)
    assert backend.version == 7
    assert not torch.allclose(before[0], after[0], atol=1e-4)
    for got, want in zip(after, HFBackend(other, tok).choice_logps(items), strict=True):
        assert torch.equal(got, want)
    with pytest.raises(RuntimeError, match="Missing key"):
        backend.load_weights({}, version=8)


def test_the_policy_version_is_its_backends(tiny, observations):
    model, tok = tiny
    policy = LMPolicy(model, tok)
    policy.backend.load_weights(model.state_dict(), version=3)
    assert policy.version == 3 and policy.act(observations[:1])[0].policy_version == 3
    policy.version += 1
    assert policy.backend.version == 4


def test_backends_are_registered_by_name(tiny):
    model, tok = tiny
    assert list(BACKENDS)[0] == "hf" and BACKENDS["hf"] is HFBackend
    backend = make_backend("hf", model, tok, temperature=0.5, max_new_tokens=3)
    assert (type(backend), backend.temperature, backend.max_new_tokens) == (HFBackend, 0.5, 3)
    with pytest.raises(ValueError, match="unknown model backend 'nope': use one of hf"):
        make_backend("nope", model, tok, temperature=1.0, max_new_tokens=3)
    with pytest.raises(ValueError, match="unknown model backend"):
        LMPolicy(model, tok, backend="nope")


def test_engine_settings_are_checked_by_the_backends_record(tiny):
    settings = engine_settings("vllm", {"max_model_len": 256})
    assert (settings.max_model_len, settings.kv_cache_gb, settings.enforce_eager) == (
        256,
        0.5,
        None,
    )
    assert engine_settings("hf", {}) is None and engine_settings("hf", None) is None
    with pytest.raises(ValueError, match=r"model.engine \(kv_cache_gb\) sets an engine, but "):
        engine_settings("hf", {"kv_cache_gb": 1})
    with pytest.raises(ValueError, match="gpu_memory_utilization"):
        engine_settings("vllm", {"gpu_memory_utilization": 0})
    with pytest.raises(ValueError, match="Extra inputs"):
        engine_settings("vllm", {"kv_cache_bytes": 1})
    model, tok = tiny
    with pytest.raises(ValueError, match="model.backend=hf starts none"):
        LMPolicy(model, tok, engine={"max_model_len": 64})


def test_load_weights_copies_foreign_weights_and_not_the_models_own(tiny, monkeypatch):
    model, tok = tiny
    backend = HFBackend(copy.deepcopy(model), tok)
    copies = []
    load = backend.model.load_state_dict
    monkeypatch.setattr(backend.model, "load_state_dict", lambda sd: copies.append(sd) or load(sd))
    own = backend.model.state_dict()
    backend.load_weights(own, version=1)
    assert (copies, backend.version) == ([], 1)  # the learner trained these in place
    # Equal values in other memory are foreign weights: copied, and then run.
    twin = {k: t.clone() for k, t in own.items()}
    backend.load_weights(twin, version=2)
    assert len(copies) == 1 and copies[0] is twin and backend.version == 2
    # Its own tensors less one key are not its weights: copied, and refused.
    partial = dict(list(own.items())[1:])
    with pytest.raises(RuntimeError, match="Missing key"):
        backend.load_weights(partial, version=3)
    assert len(copies) == 2 and backend.version == 2


def test_publish_hands_the_trained_weights_over_as_the_next_version(tiny, observations):
    model, tok = tiny
    policy = LMPolicy(copy.deepcopy(model), tok)
    view = policy.sampling(0.1)
    policy.publish()
    assert (policy.version, view.act(observations[:1])[0].policy_version) == (1, 1)
    policy.publish(7)  # a resumed run: the version its weights were saved at
    assert view.version == 7


def test_publish_copies_nothing_where_the_backend_runs_the_trained_module(tiny, monkeypatch):
    model, tok = tiny
    policy = LMPolicy(copy.deepcopy(model), tok)
    assert policy.backend.runs(policy.model) and not policy.backend.runs(model)
    with monkeypatch.context() as m:
        m.setattr(policy.backend, "load_weights", lambda sd, v: pytest.fail("weights pushed"))
        m.setattr(policy.model, "state_dict", lambda: pytest.fail("a state dict built"))
        policy.publish()
    assert policy.version == 1
    # A backend that holds its own copy (vLLM's engine) is handed the weights.
    pushed = []
    monkeypatch.setattr(policy.backend, "runs", lambda model: False)
    monkeypatch.setattr(policy.backend, "load_weights", lambda sd, v: pushed.append((sd, v)))
    policy.publish()
    ((weights, version),) = pushed
    assert version == 2 and weights.keys() == policy.model.state_dict().keys()
