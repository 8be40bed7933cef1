"""Host-to-device copies that wait for nothing, and device-to-host copies read later."""

import warnings
from pathlib import Path

import pytest
import torch
from pydantic import ValidationError

import coplay
from coplay.envs.registry import make_env
from coplay.models import devices
from coplay.models.build import ModelConfig, build_policy
from coplay.models.devices import HostCopy, set_host_threads, to_device
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


@pytest.fixture
def threads(monkeypatch):
    """What ``set_host_threads`` asks of torch, with torch's own count left alone."""
    asked = []
    monkeypatch.setattr(torch, "set_num_threads", asked.append)
    monkeypatch.setattr(devices, "_torch_threads", None)
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    return asked


def test_a_gpu_run_keeps_the_host_at_one_thread(threads):
    set_host_threads("cuda", None)
    set_host_threads("cuda:1", None)
    assert threads == [1, 1]


def test_the_cpu_keeps_torchs_default(threads):
    set_host_threads("cpu", None)
    assert threads == []


def test_a_cpu_run_after_a_gpu_run_gets_torchs_default_back(threads, monkeypatch):
    monkeypatch.setattr(torch, "get_num_threads", lambda: 6)
    set_host_threads("cuda", None)
    set_host_threads("cpu", None)
    set_host_threads("cpu", 3)
    set_host_threads("cpu", None)
    assert threads == [1, 6, 3, 6]


def test_a_thread_count_given_wins(threads, monkeypatch):
    set_host_threads("cpu", 3)
    set_host_threads("cuda", 4)
    monkeypatch.setenv("OMP_NUM_THREADS", "8")
    set_host_threads("cuda", 2)
    assert threads == [3, 4, 2]


def test_omp_num_threads_is_left_to_torch(threads, monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "8")
    set_host_threads("cuda", None)
    assert threads == []


def test_a_run_sets_its_threads_when_its_policy_is_built(threads):
    cfg = ModelConfig(threads=2)
    build_policy(cfg, corpus=["a b c"] * 50, seed=0)
    assert threads == [2]


@pytest.mark.parametrize("bad", [0, -1, "many"])
def test_a_bad_thread_count_is_refused(bad):
    with pytest.raises(ValidationError, match="threads"):
        ModelConfig(threads=bad)
