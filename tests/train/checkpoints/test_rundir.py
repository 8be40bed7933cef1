"""Run-directory rules: refuse or move aside a run, check a resume before writing,
repair what a kill tore, count every segment's time."""

import json
import os
from pathlib import Path

import pytest

from coplay.report.sinks import read_metrics
from coplay.train.checkpoints.rundir import (
    RunDirError,
    RunInterrupted,
    RunRepaired,
    check_done,
    check_resume,
    check_writable,
    claim,
    elapsed_before,
    holds_run,
    move_aside,
    put_back,
    repair,
    resume,
)
from coplay.train.config import ConfigError
from coplay.train.settings import IgnoredSetting, build_config, to_yaml
from coplay.train.trainer import train

TINY = [
    "train.iterations=3",
    "train.eval_every=1",
    "train.eval_episodes=10",
    "train.eval_opponents=[]",
    "rollout.games_per_iter=8",
    "model.tiny.hidden_size=32",
    "model.tiny.intermediate_size=64",
]


def _run_dir(path, overrides=()):
    path.mkdir()
    (path / "config.yaml").write_text(to_yaml(build_config(overrides=[*TINY, *overrides])))
    return path


def test_a_directory_is_a_run_once_coplay_wrote_into_it(tmp_path):
    assert not holds_run(tmp_path / "missing")
    assert not holds_run(tmp_path)
    (tmp_path / "notes.txt").write_text("mine")
    assert not holds_run(tmp_path)  # someone else's files are not a run
    (tmp_path / "checkpoints").mkdir()
    assert holds_run(tmp_path)


def test_claim_refuses_a_run_and_names_resume_and_force(tmp_path):
    run = _run_dir(tmp_path / "run")
    (run / "state").mkdir()  # it saved: there is something to resume
    with pytest.raises(RunDirError, match=r"--resume .*run.*--force") as err:
        claim(run, force=False)
    assert len(str(err.value).splitlines()) == 1
    with pytest.raises(RunDirError) as err:
        claim(run, force=False, resumable=False)
    assert "--resume" not in str(err.value) and "--force" in str(err.value)
    assert claim(tmp_path / "new", force=False) is None  # nothing there: nothing to do


def test_a_run_stopped_before_its_first_save_is_not_offered_a_resume(tmp_path):
    # --resume would answer "no saved state to resume from": the advice went in a circle.
    run = tmp_path / "run"
    run.mkdir()
    (run / "config.yaml").write_text("{}")
    (run / "metrics.jsonl").write_text("")
    with pytest.raises(RunDirError) as err:
        claim(run, force=False)
    assert "--resume" not in str(err.value) and "--force" in str(err.value)


def test_force_moves_the_old_run_aside_whole(tmp_path):
    run = _run_dir(tmp_path / "run")
    (run / "checkpoints" / "iter_000007").mkdir(parents=True)
    moved = claim(run, force=True)
    assert moved.name.startswith("run.old-") and not run.exists()
    assert (moved / "config.yaml").is_file() and (moved / "checkpoints" / "iter_000007").is_dir()
    _run_dir(run)
    assert claim(run, force=True) != moved  # a second move picks a free name


def test_force_never_moves_aside_what_the_new_run_reads(tmp_path):
    run = _run_dir(tmp_path / "run")
    (run / "checkpoints" / "final").mkdir(parents=True)
    reads = [("--roster", None), ("model.path", run / "checkpoints" / "final")]
    with pytest.raises(RunDirError, match=r"model.path .*final is inside .*run, which --force"):
        claim(run, force=True, reads=reads)
    assert (run / "config.yaml").is_file()
    assert claim(run, force=True, reads=[("--roster", tmp_path / "elsewhere")]) is not None


def test_a_moved_run_goes_back_only_while_nothing_took_its_place(tmp_path):
    run = _run_dir(tmp_path / "run")
    moved = claim(run, force=True)
    assert put_back(run, moved) and (run / "config.yaml").is_file() and not moved.exists()
    moved = claim(run, force=True)
    run.mkdir()  # the new run started writing: the old one stays aside
    assert not put_back(run, moved) and (moved / "config.yaml").is_file()


def test_move_aside_names_a_folder_given_with_dots(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "a" / "b").mkdir(parents=True)
    moved = move_aside(Path("a/b/.."))  # its name is "..", which has no name to extend
    assert moved.parent == tmp_path and moved.name.startswith("a.old-")
    with pytest.raises(RunDirError, match="holds the current directory"):
        move_aside(Path("."))


def test_an_output_that_is_a_file_or_under_one_is_refused(tmp_path):
    (tmp_path / "f").write_text("")
    with pytest.raises(RunDirError, match="is a file, not a directory"):
        check_writable(tmp_path / "f")
    with pytest.raises(RunDirError, match=r"cannot create .*f/run: .*f is a file"):
        check_writable(tmp_path / "f" / "run")


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes through a read-only mode")
def test_a_read_only_output_is_refused(tmp_path):
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o500)
    try:
        with pytest.raises(RunDirError, match=r"cannot write to .*locked: permission denied"):
            check_writable(locked / "run")
    finally:
        locked.chmod(0o700)


@pytest.mark.parametrize(
    ("override", "named"),
    [
        ("game.name=leduc_poker", "game.name: 'kuhn_poker' -> 'leduc_poker'"),
        ("model.tiny.hidden_size=64", "model.tiny.hidden_size: 32 -> 64"),
        ("game.params={players: 3}", "game.params.players: None -> 3"),
        ("train.seed=5", "train.seed: 0 -> 5"),
        # the tiny model's tokenizer is another for text mode (was "another model size?")
        ("model.mode=text", "model.mode: 'choice' -> 'text'"),
    ],
)
def test_resume_refuses_a_config_the_weights_do_not_fit(tmp_path, override, named):
    run = _run_dir(tmp_path / "run")
    before = (run / "config.yaml").read_bytes()
    with pytest.raises(ConfigError, match="saved weights do not fit") as err:
        check_resume(build_config(file=run / "config.yaml", overrides=[override]), run)
    assert named in str(err.value)
    assert (run / "config.yaml").read_bytes() == before


def test_resume_accepts_changes_that_keep_the_weights(tmp_path):
    run = _run_dir(tmp_path / "run")
    over = ["train.iterations=50", "optim.lr=0.01", "train.eval_episodes=5"]
    check_resume(build_config(file=run / "config.yaml", overrides=over), run)


def test_a_checkpoints_mode_may_change_on_resume(tmp_path):
    run = _run_dir(tmp_path / "run", ["model.path=some/checkpoint"])
    check_resume(build_config(file=run / "config.yaml", overrides=["model.mode=text"]), run)


def test_a_checkpoints_run_resumes_whatever_model_tiny_says(tmp_path):
    # model.path gives the weights and their shape; model.tiny is only named as ignored.
    run = _run_dir(tmp_path / "run", ["model.path=some/checkpoint"])
    over = ["model.tiny.hidden_size=64"]
    with pytest.warns(IgnoredSetting, match="model.tiny.hidden_size is ignored"):
        cfg = build_config(file=run / "config.yaml", overrides=over, recorded=True)
    check_resume(cfg, run)


def test_a_resume_may_not_end_before_its_saved_iteration(tmp_path):
    cfg = build_config(overrides=TINY)
    check_done(3, cfg, tmp_path)
    with pytest.raises(ConfigError, match=r"already trained 4 iterations.*iterations>=4"):
        check_done(4, cfg, tmp_path)


def test_a_finished_run_resumed_with_other_settings_keeps_its_config_and_says_so(tmp_path):
    # With no iteration left, the resume rewrote config.yaml with settings no iteration
    # of the run used.
    run = _run_dir(tmp_path / "run")
    before = (run / "config.yaml").read_bytes()
    cfg = build_config(file=run / "config.yaml", overrides=["optim.lr=0.5"])
    done = cfg.train.iterations
    with pytest.warns(
        UserWarning, match=r"trained all 3 iterations, so the changed settings \(optim\.lr\)"
    ):
        resume(run, cfg, [], lambda: (done, {}))
    assert (run / "config.yaml").read_bytes() == before
    longer = build_config(
        file=run / "config.yaml", overrides=["optim.lr=0.5", "train.iterations=4"]
    )
    resume(run, longer, [], lambda: (done, {}))
    assert (run / "config.yaml").read_text() == to_yaml(longer)  # they train iteration 4


def test_repair_drops_a_torn_line_and_warns_naming_the_file(tmp_path):
    metrics = tmp_path / "metrics.jsonl"
    metrics.write_text('{"iteration": 0}\n{"iteration": 1}\n{"iteration": 2, "loss/to')
    (tmp_path / "transcripts.jsonl").write_text('{"iteration": 1}\n')
    with pytest.warns(RunRepaired, match=r"metrics\.jsonl: dropped a half-written last line") as w:
        repair(tmp_path, ("metrics.jsonl", "transcripts.jsonl"))
    assert len(w) == 1  # the whole transcripts file needed nothing
    assert [r["iteration"] for r in read_metrics(metrics)] == [0, 1]


def test_repair_puts_back_a_state_cut_between_its_renames(tmp_path):
    (tmp_path / "state.old").mkdir()
    (tmp_path / "state.old" / "x").write_text("saved")
    (tmp_path / "state.tmp").mkdir()  # the unfinished new state
    with pytest.warns(RunRepaired, match="put back the state"):
        repair(tmp_path, ())
    assert (tmp_path / "state" / "x").read_text() == "saved"
    assert not (tmp_path / "state.old").exists() and not (tmp_path / "state.tmp").exists()


def test_elapsed_before_reads_the_latest_logged_time(tmp_path):
    metrics = tmp_path / "metrics.jsonl"
    assert elapsed_before(metrics) == 0.0
    rows = [{"iteration": 0}, {"iteration": 1, "perf/elapsed_s": 2.5}, {"iteration": 2}]
    metrics.write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert elapsed_before(metrics) == 2.5


def test_wall_time_counts_every_segment(tmp_path):
    cfg = build_config(overrides=[*TINY, "train.save_every=1"])
    first = train(cfg, tmp_path, stop_after=2)
    second = train(cfg, tmp_path, resume=True)
    rows = read_metrics(tmp_path / "metrics.jsonl")
    elapsed = [r["perf/elapsed_s"] for r in rows[1:]]
    assert elapsed == sorted(elapsed)  # one clock across the segments
    assert second["wall_s"] > first["wall_s"] >= elapsed[1]
    assert second["wall_s"] >= elapsed[-1]


def test_interrupted_says_what_was_saved_and_how_to_continue(tmp_path):
    err = RunInterrupted(tmp_path / "run", 4)
    assert str(err) == (
        f"interrupted; last saved iteration 4; continue with: coplay train --resume "
        f"{tmp_path / 'run'}"
    )
    assert isinstance(err, KeyboardInterrupt)
    assert "--force" in str(RunInterrupted(tmp_path, None))


def test_a_finished_segments_time_after_its_last_row_counts(tmp_path):
    # A finished segment's wall time holds its final checkpoint, after its last row.
    metrics, summary = tmp_path / "metrics.jsonl", tmp_path / "summary.json"
    metrics.write_text(json.dumps({"iteration": 2, "perf/elapsed_s": 2.5}) + "\n")
    summary.write_text(json.dumps({"iterations": 2, "wall_s": 3.25}))
    assert elapsed_before(metrics, summary) == 3.25
    assert elapsed_before(metrics) == 2.5
    for damaged in ("{", "[1]", '{"wall_s": "x"}', '{"wall_s": NaN}'):
        summary.write_text(damaged)
        assert elapsed_before(metrics, summary) == 2.5
