"""Progress of long commands: plain lines at a steady interval when not on a terminal."""

import io

import pytest
from rich.console import Console

from coplay.report.progress import PlainProgress, interval_s, track


class Clock:
    def __init__(self):
        self.now = 100.0

    def __call__(self):
        return self.now


def plain(every_s=10.0):
    out = io.StringIO()
    clock = Clock()
    console = Console(file=out, width=200)
    return PlainProgress("eval", 1000, "episodes", console, every_s, clock=clock), clock, out


def test_a_line_every_interval_with_the_eta_of_the_rate_so_far():
    bar, clock, out = plain(every_s=10.0)
    clock.now += 4
    bar.advance(100)  # before the interval: nothing
    assert out.getvalue() == ""
    clock.now += 8  # 12 s in, 400 of 1000 done: 18 s to go at this rate
    bar.advance(400)
    clock.now += 3
    bar.advance(500)  # 3 s after the last line: nothing
    assert out.getvalue().splitlines() == ["eval: 400/1000 episodes, 12 s elapsed, ETA 18 s"]
    clock.now += 85
    bar.finish()
    assert out.getvalue().splitlines()[-1] == "eval: 1000/1000 episodes, 1 min 40 s elapsed"


def test_a_status_follows_the_counts():
    bar, clock, out = plain(every_s=0.0)
    clock.now += 1
    bar.advance(10, "exploitability=0.300")
    assert out.getvalue().strip().endswith("ETA 1 min 39 s, exploitability=0.300")


def test_track_writes_plain_lines_to_stderr_when_not_a_terminal(monkeypatch, capsys):
    monkeypatch.setenv("COPLAY_PROGRESS_EVERY_S", "0")
    with track("tournament", 3, "games", console=Console(file=io.StringIO())) as advance:
        for done in (1, 2, 3):
            advance(done)
    err = capsys.readouterr().err.splitlines()
    assert err[0].startswith("tournament: 1/3 games, 0 s elapsed, ETA")
    assert err[-1] == "tournament: 3/3 games, 0 s elapsed"


def test_track_writes_nothing_when_quiet_or_when_the_work_fails(monkeypatch, capsys):
    monkeypatch.setenv("COPLAY_PROGRESS_EVERY_S", "0")
    with track("train", 2, "iterations", quiet=True) as advance:
        advance(2)
    with pytest.raises(RuntimeError), track("eval", 2, "episodes") as advance:
        raise RuntimeError("stop")
    assert capsys.readouterr().err == ""


@pytest.mark.parametrize(("raw", "seconds"), [("", 10.0), ("2.5", 2.5), ("0", 0.0)])
def test_interval_from_the_environment(monkeypatch, raw, seconds):
    monkeypatch.setenv("COPLAY_PROGRESS_EVERY_S", raw)
    assert interval_s() == seconds


@pytest.mark.parametrize("raw", ["soon", "-1", "nan", "inf"])
def test_a_bad_interval_is_a_one_line_error(monkeypatch, raw):
    monkeypatch.setenv("COPLAY_PROGRESS_EVERY_S", raw)
    with pytest.raises(ValueError, match="COPLAY_PROGRESS_EVERY_S must be"):
        interval_s()


def test_a_resumed_count_leaves_the_count_it_started_at_out_of_the_eta():
    # Resumed at 90 of 100, 10 s an iteration: 9 to go is 90 s, not 10 s * 9 / 91.
    out, clock = io.StringIO(), Clock()
    bar = PlainProgress("train", 100, "iterations", Console(file=out), 0.0, clock, baseline=90)
    clock.now += 10
    bar.advance(91)
    assert out.getvalue().splitlines() == ["train: 91/100 iterations, 10 s elapsed, ETA 1 min 30 s"]


def test_without_a_start_the_first_count_told_is_where_the_work_started():
    # A resumed run tells its saved iteration once its state has loaded, 25 s in.
    out, clock = io.StringIO(), Clock()
    bar = PlainProgress("train", 100, "iterations", Console(file=out), 0.0, clock, baseline=None)
    clock.now += 25
    bar.advance(90)
    clock.now += 10
    bar.advance(91)
    assert out.getvalue().splitlines() == [
        "train: 90/100 iterations, 25 s elapsed",  # nothing done here yet: no ETA
        "train: 91/100 iterations, 35 s elapsed, ETA 1 min 30 s",
    ]


def test_track_takes_the_count_the_work_starts_at(monkeypatch, capsys):
    monkeypatch.setenv("COPLAY_PROGRESS_EVERY_S", "0")
    with track("train", 4, "iterations", start=None, console=Console(file=io.StringIO())) as adv:
        adv(2)
    assert capsys.readouterr().err.splitlines()[0] == "train: 2/4 iterations, 0 s elapsed"
