"""The learner benchmark: its arms and their split, the plain arm's update equal to the
learner's, bad input."""

import copy

import numpy as np
import pytest
import torch

from coplay.train import learner_update as update_module
from coplay.train.settings import build_config

BENCHMARK = "learner_throughput"

TINY = ["rollout.games_per_iter=16", "optim.minibatch_size=16", "optim.epochs=1"]


def test_a_short_run_times_both_arms_and_splits_each_into_its_parts(bench, capsys):
    backward = torch.Tensor.backward
    result = bench.main(["--preset", "kuhn-selfplay", "--repeats", "2", "--split", *TINY])
    assert set(result["median_s"]) == {"learner", "raw"}
    assert result["learner/raw"] > 0
    for rows in result["split_s"].values():
        assert len(rows) == 2
        for row in rows:
            assert set(row) == {"forward", "backward", "step", "rest"}
            assert min(row["forward"], row["backward"], row["step"]) > 0
            assert row["rest"] > 0  # no part counted twice: they fit in the arm's time
    assert torch.Tensor.backward is backward  # the wrappers are gone after
    out = capsys.readouterr().out
    assert "learner/raw" in out and "paired" in out and "rest" in out


def test_the_plain_arm_is_timed_beside_the_others_with_its_ratios(bench, capsys):
    result = bench.main(["--preset", "kuhn-selfplay", "--repeats", "3", "--plain", *TINY])
    assert set(result["median_s"]) == {"learner", "raw", "plain"}
    assert all(len(v) == 3 for v in result["seconds"].values())
    assert result["learner/plain"] * result["plain/raw"] == pytest.approx(result["learner/raw"])
    out = capsys.readouterr().out
    assert "learner/plain" in out and "plain/raw" in out


CUDA = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=CUDA)])
def test_the_plain_arm_makes_the_learners_update(bench, monkeypatch, device):
    """Same samples, minibatches and starting state: the plain arm reads what the
    learner reports of each step, and leaves the same weights and magnet (on a GPU
    too, its tensors moved there)."""
    cfg = build_config(preset="kuhn-selfplay", overrides=[*TINY, f"model.device={device}"])
    with bench.one_rollout(cfg) as (_, trainee, episodes):
        learner = trainee.learner
        samples = bench.samples_of(trainee, episodes)
        model, magnet, opt = learner.policy.model, learner.reference.model, learner.optimizer
        start = [copy.deepcopy(x.state_dict()) for x in (model, magnet, opt)]
        version = learner.policy.version
        steps = []
        step = update_module._minibatch_step
        monkeypatch.setattr(
            update_module, "_minibatch_step", lambda *a: steps.append(step(*a)) or steps[-1]
        )
        update_module.update(learner, samples, np.random.default_rng(3))
        after = [copy.deepcopy(x.state_dict()) for x in (model, magnet)]
        for x, state in zip((model, magnet, opt), start, strict=True):
            x.load_state_dict(state)
        learner.policy.version = version
        plan = bench.prepare(learner, samples, 3, learner.epochs)
        assert all(len(micros) == 1 for micros, _ in plan)  # a step's metrics are its pass's
        reference = bench.reference_plan(learner, samples)
        seen = bench.plain_update(learner, plan, reference, bench.objective(learner))
    assert len(seen) == len(steps) == 3
    for plain, step_metrics in zip(seen, steps, strict=True):
        for key, value in plain.items():
            assert value == pytest.approx(step_metrics[key], rel=1e-4, abs=1e-6), key
    for x, state in zip((model, magnet), after, strict=True):
        for key, value in x.state_dict().items():
            torch.testing.assert_close(value, state[key], rtol=1e-4, atol=1e-5)


def test_a_preset_with_a_term_the_plain_arm_lacks_is_one_error_line(bench, capsys):
    with pytest.raises(SystemExit):
        bench.main(["--preset", "signalling", "--repeats", "1", "--plain"])
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert "error:" in last and "signalling term" in last


def test_without_split_nothing_is_wrapped(bench):
    result = bench.main(["--preset", "kuhn-selfplay", "--repeats", "1", *TINY])
    assert result["split_median_s"] is None


def test_an_unknown_preset_is_one_error_line(bench, capsys):
    with pytest.raises(SystemExit):
        bench.main(["--preset", "no-such-preset"])
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert "error:" in last and "no-such-preset" in last


def test_split_on_a_gpu_model_is_one_error_line(bench, capsys):
    with pytest.raises(SystemExit):
        bench.main(["--preset", "kuhn-selfplay", "--split", "model.device=cuda"])
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert "error:" in last and "--split" in last and "model.device=cuda" in last
