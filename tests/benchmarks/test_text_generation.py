"""Smoke test of the free-text sampling benchmark: both arms, equal token counts."""

import importlib.util
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]


def _bench():
    spec = importlib.util.spec_from_file_location(
        "text_generation", ROOT / "benchmarks/text_generation.py"
    )
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_quick_run_times_both_arms_on_both_models(capsys):
    # ``compare`` raises unless both arms made batch x new_tokens tokens.
    rows = _bench().main(["--quick", "--threads", "1"])
    assert [(r["model"], r["batch"], r["new_tokens"]) for r in rows] == [
        ("tiny", 4, 4),
        ("qwen2", 4, 4),
    ]
    for r in rows:
        assert set(r["median_s"]) == {"sample_text", "generate"}
        assert all(s > 0 for s in r["median_s"].values())
        assert r["ratio"] == r["median_s"]["generate"] / r["median_s"]["sample_text"]
    assert "ratio" in capsys.readouterr().out


def test_a_device_it_does_not_measure_is_one_error_line(capsys):
    bad = ["xla"] + ([] if torch.cuda.is_available() else ["cuda"])
    for device in bad:
        with pytest.raises(SystemExit):
            _bench().main(["--quick", "--device", device])
        err = capsys.readouterr().err.strip().splitlines()[-1]
        assert f"--device {device}" in err and "Traceback" not in err


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")
def test_quick_run_on_a_gpu(capsys):
    rows = _bench().main(["--quick", "--device", "cuda"])
    assert all(r["ratio"] > 0 for r in rows)
    assert "NVIDIA" in capsys.readouterr().out or torch.version.hip


def test_both_arms_sample_without_building_a_graph():
    # sample_text ran with autograd on, recording a backward graph at every step that
    # generate (and the engine, under no_grad) never builds: its arm read slow.
    bench = _bench()
    policy = bench.kuhn_policy()
    prompts = bench.kuhn_prompts(policy, 4)
    grads = []
    hook = policy.model.register_forward_hook(
        lambda module, args, out: grads.append(out.logits.requires_grad)
    )
    try:
        assert bench.ours(policy.model, prompts, 3) == bench.theirs(policy.model, prompts, 3) == 12
    finally:
        hook.remove()
    assert grads and not any(grads)
