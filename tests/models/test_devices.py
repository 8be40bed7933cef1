"""Host-to-device copies that wait for nothing, and device-to-host copies read later."""

import warnings
from pathlib import Path

import pytest
import torch

import coplay
from coplay.envs.registry import make_env
from coplay.models.devices import HostCopy, to_device
from coplay.models.tiny import TinyModelConfig, build_tiny_model
from coplay.models.tokenizer import train_tokenizer
from coplay.policies.lm import LMPolicy

CUDA = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


def test_on_the_cpu_both_are_the_tensor_itself():
    t = torch.arange(6).view(2, 3)
    assert to_device(t, "cpu") is t
    assert HostCopy(t).get() is t


@CUDA
def test_a_copy_to_the_gpu_waits_for_nothing():
    host = torch.arange(1000)
    with _syncs_refused():
        with pytest.raises(RuntimeError, match="synchroniz"):  # the check can fail
            host.to("cuda")
        on_gpu = to_device(host, "cuda")
    assert torch.equal(on_gpu.cpu(), host)


@CUDA
def test_a_copy_to_the_host_is_read_after_the_work_before_it():
    a = torch.randn(2048, 2048, device="cuda")
    with _syncs_refused():
        b = a @ a  # queued
        copy = HostCopy(b)  # queued behind it: no wait here
    assert torch.equal(copy.get(), b.cpu())


@CUDA
def test_queuing_a_choice_pass_waits_for_nothing_of_coplays_own():
    # ``submit`` must leave the host free while the pass runs; a sync in coplay's own
    # code (a blocking copy, a host read) would hold it. The model's own code may
    # sync (transformers' mask checks): those are listed, not failed.
    env = make_env("tic_tac_toe")
    env.reset(0)
    obs = env.observe(0)
    corpus = [obs.text, "Action: " + " ".join(f"[{i}]" for i in range(9))] * 20
    tok = train_tokenizer(corpus, vocab_size=320)
    model = build_tiny_model(TinyModelConfig(vocab_size=320), vocab_size=len(tok), seed=0)
    policy = LMPolicy(model.to("cuda"), tok, seed=0)
    observations = [obs] * 3 + [env.observe(0)] * 2
    policy.submit(observations)()  # prompts encoded, inputs kept: the steady state
    torch.cuda.synchronize()
    syncs = _syncs_during(lambda: policy.submit(observations))
    ours = Path(coplay.__file__).parent
    mine = [f"{f}:{n}" for f, n in syncs if Path(f).is_relative_to(ours)]
    assert not mine, f"coplay syncs while queuing: {mine}; all syncs: {syncs}"


class _syncs_refused:
    def __enter__(self):
        torch.cuda.synchronize()
        torch.cuda.set_sync_debug_mode("error")

    def __exit__(self, *exc):
        torch.cuda.set_sync_debug_mode("default")


def _syncs_during(fn) -> list[tuple[str, int]]:
    """Where each device sync warned while ``fn`` ran: (file, line) of the Python call."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.cuda.set_sync_debug_mode("warn")
        try:
            fn()
        finally:
            torch.cuda.set_sync_debug_mode("default")
    return [(w.filename, w.lineno) for w in caught if "synchroniz" in str(w.message)]
