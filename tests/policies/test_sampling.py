"""Free-text sampling: the distribution sampled from, its recorded log-probs, stops."""

import copy

import pytest
import torch

from coplay.policies import sampling
from coplay.policies.lm import LMPolicy
from coplay.policies.sampling import draw, sample_text
from coplay.policies.scoring import sampling_logps, token_logps
from tests.policies.test_scoring import kuhn_prompts

SAMPLERS = [
    {"temperature": 1.0},
    {"temperature": 0.7, "top_k": 5},
    {"temperature": 1.3, "top_p": 0.8},
    {"temperature": 0.9, "top_k": 40, "top_p": 0.6},
]


def _sample(model, prompts, seed=0, **kw):
    kw = {"max_new_tokens": 8, "temperature": 1.0, "eos_id": -1, "pad_id": 0} | kw
    return sample_text(model, prompts, generator=torch.Generator().manual_seed(seed), **kw)


@pytest.mark.parametrize("params", SAMPLERS)
def test_learner_recomputes_the_sampled_log_probs_exactly(tiny, params):
    model, tok = tiny
    prompts = kuhn_prompts(LMPolicy(model, tok))
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
    prompt = kuhn_prompts(LMPolicy(model, tok), 1)[0]
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
    monkeypatch.setattr(sampling, "_DROP_SHARE", share)
    model, tok = tiny
    prompts = kuhn_prompts(LMPolicy(model, tok))
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
    prompts = kuhn_prompts(LMPolicy(model, tok), 2)
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
    prompts = kuhn_prompts(LMPolicy(model, tok), 3)
    params = {"temperature": 0.8, "top_k": 8, "top_p": 0.7}
    answers = _sample(model, prompts, max_new_tokens=5, **params)
    pairs = [(p, ids) for p, (ids, _) in zip(prompts, answers, strict=True)]
    logp, ent, _ = token_logps(model, pairs, **params)
    (grad,) = torch.autograd.grad((logp + 0.1 * ent).sum(), model.model.embed_tokens.weight)
    assert torch.isfinite(grad).all() and grad.abs().sum() > 0


def test_a_nan_temperature_is_refused():
    # NaN passes ``temperature <= 0`` as False, and its logits / T are NaN.
    with pytest.raises(ValueError, match="temperature must be > 0, got nan"):
        sampling.check_sampling(temperature=float("nan"), top_k=0, top_p=1.0)


def test_nan_logits_are_one_error_line(tiny):
    # A NaN row's CDF has no token to invert to; its draw must still index the
    # vocabulary (past it, torch raises an IndexError, a GPU a device-side assert).
    model, tok = tiny
    broken = copy.deepcopy(model)
    with torch.no_grad():
        broken.model.norm.weight[0] = float("nan")
    prompts = kuhn_prompts(LMPolicy(model, tok), 2)
    with pytest.raises(ValueError, match="next-token distribution is NaN.*not finite"):
        _sample(broken, prompts)
