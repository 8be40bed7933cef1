"""Smoke test of the thread-overlap benchmark: every timing, the pair's wall time, bad input."""

import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def bench():
    # The benchmark imports its neighbours as top-level modules, as when run as a script.
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        spec = importlib.util.spec_from_file_location(
            "thread_overlap", ROOT / "benchmarks/thread_overlap.py"
        )
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        yield mod
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))
        sys.modules.pop("rollout_throughput", None)


def test_a_short_run_times_both_arms_alone_and_together(bench, capsys):
    med = bench.main(["--games", "4", "--game-games", "10", "--repeats", "1"])
    assert set(med) == {"raw", "game", "wall", "raw_t", "game_t"}
    assert all(v > 0 for v in med.values())
    # The pair ends when its slower part does.
    assert med["wall"] >= max(med["raw_t"], med["game_t"])
    assert "wall / sum alone" in capsys.readouterr().out


def test_an_unknown_game_is_one_error_line(bench, capsys):
    with pytest.raises(SystemExit):
        bench.main(["--game", "no_such_game"])
    assert "unknown game 'no_such_game'" in capsys.readouterr().err.splitlines()[-1]
