"""Smoke test of the collector benchmark: passes split by place, the frozen heap, bad input."""

import pytest

from coplay.train import loop as train_loop

BENCHMARK = "collector"

TINY = ["rollout.games_per_iter=8", "train.eval_episodes=4", "train.exact=false"]


@pytest.mark.parametrize("freeze", [True, False])
def test_a_short_run_counts_passes_in_and_out_of_the_loop(bench, capsys, monkeypatch, freeze):
    monkeypatch.setattr(train_loop, "FROZEN_FROM", 2)  # as a long loop freezes
    args = ["--preset", "kuhn-selfplay", "--iterations", "2", *TINY]
    result = bench.main(args if freeze else ["--no-freeze", *args])
    assert set(result["passes"]) == {"loop", "outside"}
    assert all(len(gens) == 3 for gens in result["passes"].values())
    assert 0.0 <= result["loop_gc_share"] < 1.0
    assert result["loop_s"] < result["wall_s"]
    # The loop leaves the libraries and the model out of its passes, unless told not to.
    assert (result["frozen_objects"] > 10_000) is freeze is result["frozen"]
    assert "collector" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("args", "named"),
    [(["train.iterations=zero"], "train.iterations"), (["--iterations", "0"], "--iterations")],
)
def test_a_bad_setting_is_one_error_line(bench, capsys, args, named):
    with pytest.raises(SystemExit):
        bench.main(["--preset", "kuhn-selfplay", *args])
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert "error:" in last and named in last
