"""The vLLM backend (marked vllm: `make test-vllm` runs them in the vLLM venv): text
with the log-probs it was sampled with, weights synced in memory with their version,
the refusals. Without vLLM only the install hint is tested.

One engine serves the module: starting one takes seconds (tens on a busy machine).
"""

import importlib.util

import pytest
import torch

from coplay.backends import make_backend
from coplay.backends.base import Sampling
from coplay.envs.registry import make_env
from coplay.models.tiny import TinyModelConfig, build_tiny_model
from coplay.models.tokenizer import train_tokenizer
from coplay.policies.lm import LMPolicy
from coplay.policies.scoring import token_logps
from coplay.types import Observation

pytestmark = pytest.mark.vllm

HAS_VLLM = importlib.util.find_spec("vllm") is not None
TEMPERATURE, TOP_K, TOP_P = 0.7, 40, 0.9
TOLERANCE = 2e-4
"""Largest |engine - learner| per-token log-prob allowed on this float32 model: the two
run different kernels (vLLM's CPU attention and GEMMs, transformers' eager ones)."""
HEAD_32 = TinyModelConfig(vocab_size=320, hidden_size=64, num_heads=2)  # head_dim 32


def kuhn_tokenizer():
    env = make_env("kuhn_poker")
    corpus = [env.observe(env.players_to_act()[0]).text, "Action: [Pass] [Bet] [Call] [Fold]"] * 20
    return train_tokenizer(corpus, vocab_size=320)


@pytest.fixture(scope="module")
def policy():
    pytest.importorskip("vllm")
    tok = kuhn_tokenizer()
    model = build_tiny_model(HEAD_32, vocab_size=len(tok), seed=0).eval()
    return LMPolicy(
        model, tok, mode="text", backend="vllm", temperature=TEMPERATURE, max_new_tokens=12
    )


@pytest.fixture(scope="module")
def prompts(policy):
    env = make_env("kuhn_poker")
    out = []
    for seed in range(6):
        env.reset(seed)
        out.append(policy.prompt_ids(env.observe(env.players_to_act()[0])))
    # Longer than a KV-cache block, so a stale cached prefix would show after a sync.
    out.append(tuple(i for p in out for i in p)[:400])
    return out


def recomputed(model, prompts, answers, **cut):
    """The learner's log-probs of each answer, (B, R) and the mask."""
    pairs = [(p, a.ids) for p, a in zip(prompts, answers, strict=True)]
    logp, _, mask = token_logps(model, pairs, temperature=TEMPERATURE, **cut)
    return logp, mask


def max_gap(model, prompts, answers, **cut) -> float:
    logp, mask = recomputed(model, prompts, answers, **cut)
    rows = [
        (logp[i, : len(a.ids)] - torch.tensor(a.logprobs)).abs().max().item()
        for i, a in enumerate(answers)
    ]
    assert mask.sum().item() == sum(len(a.ids) for a in answers)
    return max(rows)


def test_generated_log_probs_are_the_sampling_distributions(policy, prompts):
    backend = policy.backend
    cut = Sampling(top_k=TOP_K, top_p=TOP_P)
    answers = backend.generate(prompts, generator=torch.Generator().manual_seed(0), sampling=cut)
    assert all(1 <= len(a.ids) == len(a.logprobs) <= 12 for a in answers)
    # Processed log-probs: temperature and the top-k / top-p cut renormalise them, so
    # they match the learner's recomputation with the cut, and not the raw softmax.
    assert max_gap(policy.model, prompts, answers, top_k=TOP_K, top_p=TOP_P) < TOLERANCE
    raw, _ = recomputed(policy.model, prompts, answers)
    assert all(
        (torch.tensor(a.logprobs) > raw[i, : len(a.ids)] + 1e-3).all()
        for i, a in enumerate(answers)
    )


def test_answers_follow_the_generator(policy, prompts):
    backend = policy.backend
    first = backend.generate(prompts, generator=torch.Generator().manual_seed(3))
    again = backend.generate(prompts, generator=torch.Generator().manual_seed(3))
    other = backend.generate(prompts, generator=torch.Generator().manual_seed(4))
    assert first == again and first != other
    # Each prompt draws its own seed: a group of equal prompts gets different answers.
    group = backend.generate([prompts[0]] * 4, generator=torch.Generator().manual_seed(3))
    assert len({a.ids for a in group}) > 1


def test_a_batch_larger_than_one_prefill_step_is_answered(policy, prompts):
    # 512 prompts of 400 tokens exceed one step's token budget; chunked prefill would
    # rewind each seeded generator, which CPU generators cannot do.
    batch = [prompts[-1]] * 512
    answers = policy.backend.generate(batch, generator=torch.Generator().manual_seed(5))
    assert len(answers) == 512 and all(a.ids for a in answers)


def test_answers_end_at_stop_sequences(policy, prompts):
    backend = policy.backend
    free = backend.generate(prompts[:1], generator=torch.Generator().manual_seed(5))[0]
    assert len(free.ids) == 12  # an untrained model writes to the limit
    one, two = (free.ids[3],), tuple(free.ids[5:7])
    for stop, end in ((one, 4), (two, 7)):
        cut = backend.generate(
            prompts[:1], generator=torch.Generator().manual_seed(5), sampling=Sampling(stop=(stop,))
        )[0]
        first = next(i for i in range(12) if tuple(free.ids[i : i + len(stop)]) == stop)
        assert cut.ids == free.ids[: min(end, first + len(stop))]
        assert cut.logprobs == free.logprobs[: len(cut.ids)]


def test_load_weights_moves_the_engine_to_the_new_weights_and_version(policy, prompts):
    backend = policy.backend
    old = {k: v.clone() for k, v in policy.model.state_dict().items()}
    new = build_tiny_model(HEAD_32, vocab_size=len(policy.tokenizer), seed=7).state_dict()
    try:
        backend.load_weights(new, version=5)
        assert policy.version == 5 and backend.sync_seconds > 0
        answers = backend.generate(prompts, generator=torch.Generator().manual_seed(1))
        assert max_gap(policy.model, prompts, answers) < TOLERANCE
        stale = build_tiny_model(HEAD_32, vocab_size=len(policy.tokenizer), seed=0).eval()
        assert max_gap(stale, prompts, answers) > 0.05  # not the old weights' log-probs
        # Every decision records the version that wrote it.
        obs = Observation(player=0, game="kuhn_poker", text="Your card: K", legal_actions=None)
        assert {d.policy_version for d in policy.act([obs, obs])} == {5}
        # The learner trains the model in place; publishing syncs those very tensors.
        with torch.no_grad():
            policy.model.model.embed_tokens.weight.mul_(3.0)
        policy.publish()
        assert policy.version == 6
        answers = backend.generate(prompts, generator=torch.Generator().manual_seed(1))
        assert max_gap(policy.model, prompts, answers) < TOLERANCE
    finally:
        backend.load_weights(old, version=0)


def test_engine_settings_reach_the_engine():
    pytest.importorskip("vllm")
    tok = kuhn_tokenizer()
    model = build_tiny_model(HEAD_32, vocab_size=len(tok), seed=0).eval()
    policy = LMPolicy(
        model, tok, mode="text", backend="vllm", engine={"max_model_len": 96, "kv_cache_gb": 0.1}
    )
    engine = policy.backend.llm.llm_engine
    assert engine.model_config.max_model_len == 96
    assert engine.vllm_config.cache_config.kv_cache_memory_bytes == int(0.1 * (1 << 30))
    assert policy.engine == {"max_model_len": 96, "kv_cache_gb": 0.1}


def test_heads_narrower_than_32_are_refused_on_a_cpu():
    pytest.importorskip("vllm")
    tok = kuhn_tokenizer()
    model = build_tiny_model(TinyModelConfig(vocab_size=320), vocab_size=len(tok), seed=0)
    with pytest.raises(ValueError, match=r"at least 32 dimensions.*num_heads to at most 2"):
        make_backend("vllm", model, tok, temperature=1.0, max_new_tokens=4)


@pytest.mark.skipif(HAS_VLLM, reason="checks the message shown where vLLM is missing")
def test_without_vllm_choosing_it_names_the_install_path():
    tok = kuhn_tokenizer()
    model = build_tiny_model(HEAD_32, vocab_size=len(tok), seed=0)
    with pytest.raises(ValueError, match=r"make test-vllm.*pip install vllm"):
        make_backend("vllm", model, tok, temperature=1.0, max_new_tokens=4)


def test_choices_are_scored_by_the_model_held_alongside(policy):
    env = make_env("kuhn_poker")
    env.reset(0)
    obs = env.observe(env.players_to_act()[0])
    chooser = LMPolicy(policy.model, policy.tokenizer, temperature=TEMPERATURE)
    items = [chooser._choice_item(obs)]
    engine = policy.backend.choice_logps(items)[0]
    assert engine.tolist() == chooser.backend.choice_logps(items)[0].tolist()
    assert engine.exp().sum().item() == pytest.approx(1.0, abs=1e-6)
