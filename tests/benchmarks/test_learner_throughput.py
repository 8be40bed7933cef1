"""Smoke test of the learner benchmark: both arms, the split of each, bad input."""

import pytest
import torch

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
    assert "paired learner/raw" in out and "rest" in out


def test_without_split_nothing_is_wrapped(bench):
    result = bench.main(["--preset", "kuhn-selfplay", "--repeats", "1", *TINY])
    assert result["split_median_s"] is None


def test_an_unknown_preset_is_one_error_line(bench, capsys):
    with pytest.raises(SystemExit):
        bench.main(["--preset", "no-such-preset"])
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert "error:" in last and "no-such-preset" in last
