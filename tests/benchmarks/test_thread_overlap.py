"""Smoke test of the thread-overlap benchmark: every timing, and the pair's wall time."""

import importlib.util
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_a_short_run_times_both_arms_alone_and_together(capsys):
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        spec = importlib.util.spec_from_file_location(
            "thread_overlap", ROOT / "benchmarks/thread_overlap.py"
        )
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        med = mod.main(["--games", "4", "--game-games", "10", "--repeats", "1"])
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))
        sys.modules.pop("rollout_throughput", None)
    assert set(med) == {"raw", "game", "wall", "raw_t", "game_t"}
    assert all(v > 0 for v in med.values())
    # The pair ends when its slower part does.
    assert med["wall"] >= max(med["raw_t"], med["game_t"])
    assert "wall / sum alone" in capsys.readouterr().out
