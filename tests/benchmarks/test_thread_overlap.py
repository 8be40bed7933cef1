"""Smoke test of the thread-overlap benchmark: every timing, the pair's wall time, bad input."""

import pytest

BENCHMARK = "thread_overlap"


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
