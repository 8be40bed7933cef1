"""Atomic writes: a failure part way leaves the previous version whole."""

import os
import subprocess
import sys

import pytest

from coplay.report import atomic
from coplay.report.atomic import atomic_dir, recover_dir, replace_dir, write_text


def test_write_text_replaces_and_leaves_no_temporary(tmp_path):
    path = tmp_path / "config.yaml"
    write_text(path, "a: 1\n")
    write_text(path, "a: 2\n")
    assert path.read_text() == "a: 2\n"
    assert [p.name for p in tmp_path.iterdir()] == ["config.yaml"]


def test_a_failed_write_keeps_the_previous_file(tmp_path, monkeypatch):
    path = tmp_path / "summary.json"
    write_text(path, "old")

    def crash(src, dst):
        raise OSError("disk full")

    monkeypatch.setattr("coplay.report.atomic.os.replace", crash)
    with pytest.raises(OSError, match="disk full"):
        write_text(path, "new")
    assert path.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["summary.json"]


def test_a_second_writer_during_a_write_spoils_neither(tmp_path, monkeypatch):
    # The run's report hook and `coplay report RUN` both write RUN/report.html. With one
    # temporary name for every writer, the second truncated the first's half-written
    # file and renamed it into place, and the first's rename then failed.
    path = tmp_path / "report.html"
    fsync = os.fsync

    def another_writer_meanwhile(fd):
        fsync(fd)
        monkeypatch.setattr("coplay.report.atomic.os.fsync", fsync)
        write_text(path, "B" * 1000)
        assert path.read_text() == "B" * 1000

    monkeypatch.setattr("coplay.report.atomic.os.fsync", another_writer_meanwhile)
    write_text(path, "A" * 1000)
    assert path.read_text() == "A" * 1000
    assert [p.name for p in tmp_path.iterdir()] == ["report.html"]


# Loads atomic.py alone: importing the coplay package would take seconds.
KILLED_WRITER = """
import importlib.util, os, signal, sys
from pathlib import Path
spec = importlib.util.spec_from_file_location("atomic", sys.argv[2])
atomic = importlib.util.module_from_spec(spec)
spec.loader.exec_module(atomic)
atomic.os.fsync = lambda fd: os.kill(os.getpid(), signal.SIGKILL)
atomic.write_text(Path(sys.argv[1]), "<!doctype html> half")
"""


def test_what_a_killed_writer_left_goes_at_the_next_write(tmp_path):
    path = tmp_path / "report.html"
    write_text(path, "v1")
    killed = subprocess.run(
        [sys.executable, "-c", KILLED_WRITER, str(path), atomic.__file__], check=False
    )
    assert killed.returncode == -9
    left = [p for p in tmp_path.iterdir() if p != path]
    assert len(left) == 1 and left[0].name.endswith(".tmp") and path.read_text() == "v1"
    write_text(path, "v2")
    assert [p.name for p in tmp_path.iterdir()] == ["report.html"]
    assert path.read_text() == "v2"


def test_atomic_dir_appears_only_when_the_block_finishes(tmp_path):
    final = tmp_path / "checkpoints" / "final"
    with atomic_dir(final) as tmp:
        (tmp / "weights").write_text("v1")
        assert not final.exists()
    assert (final / "weights").read_text() == "v1"
    with pytest.raises(RuntimeError), atomic_dir(final) as tmp:
        (tmp / "weights").write_text("half")
        raise RuntimeError("killed")
    assert (final / "weights").read_text() == "v1"
    assert sorted(p.name for p in final.parent.iterdir()) == ["final"]


def test_a_replace_cut_between_its_renames_is_recovered(tmp_path):
    final, new = tmp_path / "state", tmp_path / "state.tmp"
    final.mkdir()
    (final / "it").write_text("3")
    new.mkdir()
    (new / "it").write_text("4")
    final.rename(tmp_path / "state.old")  # the first rename of replace_dir, then a kill
    assert recover_dir(final)
    assert (final / "it").read_text() == "3" and not new.exists()
    assert not recover_dir(final)  # nothing to do on a whole folder
    new.mkdir()
    (new / "it").write_text("4")
    replace_dir(new, final)
    assert (final / "it").read_text() == "4"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["state"]


def test_a_symlinked_folder_is_replaced_where_it_points(tmp_path):
    # A run's state linked to another disk: the first save renamed the link aside and
    # left the data in the run folder, and the second crashed (NotADirectoryError).
    disk, run = tmp_path / "disk", tmp_path / "run"
    disk.mkdir()
    (disk / "state").mkdir()
    run.mkdir()
    (run / "state").symlink_to(disk / "state")
    for it in ("1", "2", "3"):
        with atomic_dir(run / "state") as tmp:
            (tmp / "it").write_text(it)
    assert (run / "state").is_symlink() and (disk / "state" / "it").read_text() == "3"
    assert [p.name for p in run.iterdir()] == ["state"]
    assert [p.name for p in disk.iterdir()] == ["state"]
    (disk / "state").rename(disk / "state.old")  # a replace cut between its renames
    assert recover_dir(run / "state") and (run / "state" / "it").read_text() == "3"


def test_a_stale_old_symlink_is_unlinked_not_followed(tmp_path):
    # What the first save through a symlink used to leave: state.old, a link to the
    # data elsewhere, which the next replace could neither remove nor rename onto.
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "it").write_text("1")
    run = tmp_path / "run"
    run.mkdir()
    (run / "state.old").symlink_to(elsewhere)
    with atomic_dir(run / "state") as tmp:
        (tmp / "it").write_text("2")
    with atomic_dir(run / "state") as tmp:
        (tmp / "it").write_text("3")
    assert (run / "state" / "it").read_text() == "3"
    assert [p.name for p in run.iterdir()] == ["state"]
    assert (elsewhere / "it").read_text() == "1"  # never lost
    (run / "state.old").symlink_to(elsewhere)
    assert not recover_dir(run / "state") and not (run / "state.old").is_symlink()


def test_a_symlinked_file_is_written_through_and_stays_a_link(tmp_path):
    # A report linked into a web folder: replacing the link by a file would leave the
    # page the link served stale.
    site, run = tmp_path / "site", tmp_path / "run"
    site.mkdir()
    run.mkdir()
    (site / "page.html").write_text("old")
    (run / "report.html").symlink_to(site / "page.html")
    write_text(run / "report.html", "new")
    assert (run / "report.html").is_symlink() and (site / "page.html").read_text() == "new"
    assert [p.name for p in run.iterdir()] == ["report.html"]
    assert [p.name for p in site.iterdir()] == ["page.html"]
