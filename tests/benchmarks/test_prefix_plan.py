"""Smoke test of the prefix-plan benchmark: every way a batch runs is timed, and each
cost per call gets a verdict."""

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_a_short_run_times_every_plan_and_judges_each_cost(monkeypatch):
    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))
    spec = importlib.util.spec_from_file_location("prefix_plan", ROOT / "benchmarks/prefix_plan.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    out = bench.main(
        ["--presets", "tictactoe-perfect", "--sizes", "24", "--repeats", "1"]
        + ["--call-tokens", "0", "100000"]
    )
    assert [b["grad"] for b in out["batches"]] == [False, True]
    for batch in out["batches"]:
        names = [p["plan"] for p in batch["plans"]]
        assert names[0] == "plain" and len(names) >= 2  # both seats: a split to weigh
        assert all(p["ms"] > 0 and p["calls"] >= 1 for p in batch["plans"])
        plain = batch["plans"][0]
        assert all(p["tokens"] < plain["tokens"] for p in batch["plans"][1:])
    assert set(out["call_tokens"]) == {0, 100000}


def _load(monkeypatch):
    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))
    spec = importlib.util.spec_from_file_location("prefix_plan", ROOT / "benchmarks/prefix_plan.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    return bench


def test_overrides_shape_the_model_and_a_bad_one_is_one_error_line(monkeypatch, capsys):
    bench = _load(monkeypatch)
    out = bench.main(
        ["--presets", "kuhn-selfplay", "--sizes", "16", "--repeats", "1", "--call-tokens", "0"]
        + ["--", "model.tiny.hidden_size=32", "model.tiny.intermediate_size=64"]
    )
    assert len(out["batches"]) == 2
    try:
        bench.main(["--presets", "kuhn-selfplay", "--", "model.tiny.hidden_size=wide"])
    except SystemExit:
        pass
    else:
        raise AssertionError("a bad override must stop the benchmark")
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert "error:" in last and "model.tiny.hidden_size" in last
