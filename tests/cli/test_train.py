"""``coplay train``, ``report`` and ``show``: tiny smoke runs, resumes, rosters, and runs
that are never silently destroyed."""

import json
import os
import shutil
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from coplay.cli import main
from tests.cli.helpers import SHAPELESS, TINY, copy


def test_train_writes_a_complete_run_directory(kuhn_run):
    for name in ("config.yaml", "metrics.jsonl", "summary.json", "transcripts.jsonl"):
        assert (kuhn_run / name).is_file(), name
    rows = [json.loads(line) for line in (kuhn_run / "metrics.jsonl").read_text().splitlines()]
    assert [r["iteration"] for r in rows] == [0, 1, 2]
    assert 0 < rows[-1]["eval/exploitability"] < 1
    assert {"rollout/return_seat0", "loss/total", "adv/mean", "perf/decisions_per_s"} <= set(
        rows[1]
    )
    summary = json.loads((kuhn_run / "summary.json").read_text())
    assert summary["final/eval/exploitability"] == rows[-1]["eval/exploitability"]
    transcript = json.loads((kuhn_run / "transcripts.jsonl").read_text().splitlines()[0])
    assert transcript["turns"][0]["response_ids"]


def test_checkpoint_loads_with_plain_transformers(kuhn_run):
    folder = kuhn_run / "checkpoints" / "final"
    model = AutoModelForCausalLM.from_pretrained(folder)
    tok = AutoTokenizer.from_pretrained(folder)
    ids = tok("Your card: K.", return_tensors="pt")["input_ids"]
    assert model(ids).logits.shape[-1] == model.config.vocab_size


def test_load_policy_reproduces_trained_exploitability(kuhn_run):
    import coplay
    from coplay.eval import exploitability

    policy = coplay.load_policy(kuhn_run)
    rows = (kuhn_run / "metrics.jsonl").read_text().splitlines()
    last = json.loads(rows[-1])["eval/exploitability"]
    assert exploitability(policy, "kuhn_poker").exploitability == pytest.approx(last, abs=1e-6)


def test_tictactoe_and_text_mode_smoke(tmp_path):
    args = [
        "train",
        "--quiet",
        "--preset",
        "tictactoe-selfplay",
        "--out",
        str(tmp_path / "t"),
        *TINY,
    ]
    assert main([*args, "train.eval_opponents=[random]"]) == 0
    text = [
        "train",
        "--quiet",
        "--out",
        str(tmp_path / "x"),
        *TINY,
        "model.mode=text",
        "model.max_new_tokens=4",
        "game.invalid.retries=1",
        "game.invalid.on_fail=penalty",
    ]
    assert main(text) == 0


def test_the_kuhn_text_preset_trains_with_the_entropy_of_its_actions(tmp_path):
    # A random tiny model: too short answers to parse, but every part of the preset runs
    # (the action entropy's recall, its surprisal per answer, the sampled evaluation).
    out = tmp_path / "kt"
    over = [*TINY, "model.max_new_tokens=4", "train.eval_samples=2", "train.eval_bootstrap=2"]
    assert main(["train", "--quiet", "--preset", "kuhn-text", "--out", str(out), *over]) == 0
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    trained = [r for r in rows if "loss/action_entropy" in r]
    assert [r["iteration"] for r in trained] == [1, 2]
    assert trained[0]["loss/entropy_coef"] == pytest.approx(0.3)
    assert trained[1]["loss/entropy_coef"] == pytest.approx(0.09)  # annealed to 0.3 * 0.3
    assert "eval/exploitability_sampled_ci_high" in rows[-1]


def test_training_continues_from_a_local_checkpoint_against_a_fixed_opponent(kuhn_run, tmp_path):
    ckpt = kuhn_run / "checkpoints" / "final"
    out = tmp_path / "from_ckpt"
    argv = [
        "train",
        "--quiet",
        "--out",
        str(out),
        *TINY,
        f"model.path={ckpt}",
        "train.opponent=nash",
    ]
    assert main(argv) == 0
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    # Starting from the saved weights, the initial evaluation is the saved policy's.
    saved = json.loads((kuhn_run / "metrics.jsonl").read_text().splitlines()[-1])
    assert rows[0]["eval/exploitability"] == pytest.approx(saved["eval/exploitability"], abs=1e-6)
    # Against a fixed opponent the learner sits in both seats, the opponent never trains.
    assert "rollout/return_seat0" in rows[1] and "rollout/return_seat1" in rows[1]


def test_resume_extends_a_finished_run(kuhn_run, tmp_path):
    import shutil

    run = tmp_path / "extended"
    shutil.copytree(kuhn_run, run)
    assert main(["train", "--quiet", "--resume", str(run), "train.iterations=3"]) == 0
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["iteration"] for r in rows] == [0, 1, 2, 3]


def test_a_piped_resume_counts_its_eta_from_the_saved_iteration(kuhn_run, tmp_path, capsys):
    import shutil

    run = tmp_path / "resumed"
    shutil.copytree(kuhn_run, run)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("COPLAY_PROGRESS_EVERY_S", "0")
        assert main(["train", "--resume", str(run), "train.iterations=4"]) == 0
    lines = [x for x in capsys.readouterr().err.splitlines() if x.startswith("train: ")]
    # told the saved iteration first, without an ETA: none of its 2 iterations ran here
    assert lines[0].startswith("train: 2/4 iterations, ") and "ETA" not in lines[0]
    assert lines[1].startswith("train: 3/4 iterations, ") and "ETA" in lines[1]


def test_resume_of_a_directory_without_a_run_fails_cleanly(tmp_path, capsys):
    assert main(["train", "--resume", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err == (
        f"coplay train: error: {tmp_path} holds no run to resume (it has no config.yaml); "
        f"start one with --out {tmp_path}\n"
    )


@pytest.mark.parametrize("driver", ["league", "psro"])
def test_train_resume_refuses_a_league_or_psro_run(kuhn_run, tmp_path, capsys, driver):
    # Resumed as a plain run it would train on without the league and overwrite its state.
    import shutil

    run = tmp_path / driver
    shutil.copytree(kuhn_run, run)
    (run / f"{driver}.yaml").write_text("{}\n")
    before = (run / "metrics.jsonl").read_bytes()
    assert main(["train", "--quiet", "--resume", str(run), "train.iterations=3"]) == 2
    err = capsys.readouterr().err
    assert err == (
        f"coplay train: error: {run} is a {driver} run; "
        f"resume it with coplay {driver} --resume {run}\n"
    )
    assert (run / "metrics.jsonl").read_bytes() == before


def test_a_metrics_row_that_is_not_an_object_is_named_on_resume(kuhn_run, tmp_path, capsys):
    import shutil

    run = tmp_path / "run"
    shutil.copytree(kuhn_run, run)
    lines = (run / "metrics.jsonl").read_text().splitlines()
    (run / "metrics.jsonl").write_text("\n".join([lines[0], "[1, 2]", *lines[2:]]) + "\n")
    assert main(["train", "--quiet", "--resume", str(run), "train.iterations=3"]) == 2
    err = capsys.readouterr().err
    assert (
        err
        == f"coplay train: error: {run / 'metrics.jsonl'}:2 is not a JSON object with an iteration\n"
    )


def test_report_replaces_its_own_report_but_no_other_file(kuhn_run, tmp_path, capsys):
    import shutil

    run = tmp_path / "run"
    shutil.copytree(kuhn_run, run)
    before = (run / "metrics.jsonl").read_bytes()
    assert main(["report", str(run), "--out", str(run / "metrics.jsonl")]) == 2
    assert "exists and is not a coplay report" in capsys.readouterr().err
    assert (run / "metrics.jsonl").read_bytes() == before
    assert main(["report", str(run)]) == 0
    assert main(["report", str(run)]) == 0  # its own report, written again


def test_a_broken_roster_file_is_one_error_line(tmp_path, capsys):
    roster = tmp_path / "r.yaml"
    roster.write_text("policies: [\n")
    assert main(["train", "--roster", str(roster), "--out", str(tmp_path / "o")]) == 2
    assert capsys.readouterr().err.startswith(
        f"coplay train: error: roster file {roster} is not valid YAML"
    )
    assert not (tmp_path / "o").exists()


@pytest.mark.skipif(torch.cuda.is_available(), reason="the error is for a machine without a GPU")
def test_a_gpu_device_without_a_gpu_is_one_error_line(tmp_path, capsys):
    out = tmp_path / "o"
    assert main(["train", "--quiet", "--out", str(out), *TINY, "model.device=cuda"]) == 2
    assert capsys.readouterr().err == (
        "coplay train: error: model.device is cuda, but torch sees no cuda device here\n"
    )
    assert not out.exists()


@pytest.mark.parametrize(
    "option", [["--preset", "leduc-selfplay"], ["--config", "c.yaml"], ["--out", "x"]]
)
def test_resume_refuses_options_it_would_ignore(kuhn_run, capsys, option):
    assert main(["train", "--quiet", "--resume", str(kuhn_run), *option]) == 2
    assert f"{option[0]} cannot go with --resume" in capsys.readouterr().err


def test_train_with_a_roster_file_trains_two_roles(tmp_path, capsys):
    roster = tmp_path / "roster.yaml"
    roster.write_text(
        "policies:\n"
        "  first: {kind: learner}\n"
        "  second: {kind: learner, optim: {lr: 0.002}}\n"
        "seats: [first, second]\n"
    )
    out = tmp_path / "run"
    argv = ["train", "--quiet", "--roster", str(roster), "--out", str(out), *TINY]
    assert main(argv) == 0
    assert "run directory" in capsys.readouterr().out
    assert (out / "checkpoints" / "final" / "first" / "config.json").is_file()
    assert (out / "checkpoints" / "final" / "second" / "config.json").is_file()


def test_a_roster_run_resumes_with_its_own_roster(tmp_path):
    roster = tmp_path / "roster.yaml"
    roster.write_text("policies: {me: {kind: learner}}\nseats: [me, me]\n")
    out = tmp_path / "run"
    assert main(["train", "--quiet", "--roster", str(roster), "--out", str(out), *TINY]) == 0
    roster.unlink()  # the run directory holds its own copy
    assert main(["train", "--quiet", "--resume", str(out), "train.iterations=3"]) == 0
    rows = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["iteration"] for r in rows] == [0, 1, 2, 3]


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--roster", "missing.yaml"], "roster file missing.yaml does not exist"),
        (["--roster", "r.yaml", "--resume", "somewhere"], "drop --roster"),
    ],
)
def test_bad_roster_runs_fail_in_one_line(tmp_path, monkeypatch, capsys, extra, message):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "r.yaml").write_text("policies: {me: {kind: learner}}\nseats: [me, me]\n")
    (tmp_path / "somewhere").mkdir()
    (tmp_path / "somewhere" / "config.yaml").write_text("game: {name: kuhn_poker}\n")
    assert main(["train", *extra]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1


def test_train_refuses_a_directory_that_holds_a_run(kuhn_run, capsys):
    before = (kuhn_run / "metrics.jsonl").read_bytes()
    assert main(["train", "--quiet", "--out", str(kuhn_run), *TINY]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "already holds a run" in err
    assert f"--resume {kuhn_run}" in err and "--force" in err
    assert (kuhn_run / "metrics.jsonl").read_bytes() == before


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("game.name=leduc_poker", "game.name: 'kuhn_poker' -> 'leduc_poker'"),
        ("model.tiny.hidden_size=64", "model.tiny.hidden_size: 32 -> 64"),
        ("train.iterations=1", "already trained 2 iterations"),
        ("train.iterations=-1", "train.iterations"),
    ],
)
def test_resume_with_a_bad_override_leaves_the_run_untouched(
    kuhn_run, tmp_path, capsys, override, message
):
    run = copy(kuhn_run, tmp_path / "run")
    files = {p: p.read_bytes() for p in run.rglob("*") if p.is_file()}
    assert main(["train", "--quiet", "--resume", str(run), override]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1
    assert {p: p.read_bytes() for p in run.rglob("*") if p.is_file()} == files


def test_resume_repairs_a_half_written_metrics_line(kuhn_run, tmp_path, capsys):
    run = copy(kuhn_run, tmp_path / "run")
    with (run / "metrics.jsonl").open("a") as f:
        f.write('{"iteration": 3, "loss/tot')  # a kill during the write
    assert main(["train", "--quiet", "--resume", str(run), "train.iterations=3"]) == 0
    err = capsys.readouterr().err
    assert f"warning: {run / 'metrics.jsonl'}: dropped a half-written last line" in err
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["iteration"] for r in rows] == [0, 1, 2, 3]


def test_ctrl_c_says_the_last_saved_iteration_and_the_resume_command(tmp_path, capsys, monkeypatch):
    from coplay.train import loop

    make_plan = loop.make_plan

    def interrupted_at_2(run, it):
        if it == 2:
            raise KeyboardInterrupt
        return make_plan(run, it)

    monkeypatch.setattr(loop, "make_plan", interrupted_at_2)
    out = tmp_path / "run"
    over = [*TINY, "train.iterations=3", "train.save_every=1"]
    assert main(["train", "--out", str(out), *over]) == 130
    err = capsys.readouterr().err.strip()
    assert err == (
        f"coplay train: interrupted; last saved iteration 1; continue with: "
        f"coplay train --resume {out}"
    )
    monkeypatch.setattr(loop, "make_plan", make_plan)
    assert main(["train", "--quiet", "--resume", str(out)]) == 0
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["iteration"] for r in rows] == [0, 1, 2, 3]


def test_out_that_is_a_file_or_under_one_is_one_error_line(tmp_path, capsys):
    afile = tmp_path / "afile"
    afile.write_text("")
    for out, message in [(afile, "is a file, not a directory"), (afile / "run", "is a file")]:
        assert main(["train", "--quiet", "--out", str(out), *TINY]) == 2
        err = capsys.readouterr().err.strip()
        assert message in err and str(out) in err and len(err.splitlines()) == 1


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes through a read-only mode")
def test_read_only_out_is_one_error_line(tmp_path, capsys):
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o500)
    try:
        assert main(["train", "--quiet", "--out", str(locked / "run"), *TINY]) == 2
    finally:
        locked.chmod(0o700)
    err = capsys.readouterr().err.strip()
    assert "permission denied" in err and len(err.splitlines()) == 1


def test_an_output_the_user_may_not_write_is_one_error_line(tmp_path, capsys, monkeypatch):
    # The check above cannot run as root (root writes through any mode), so here the
    # operating system's answer for the folder is a refusal, as it is for other users.
    locked = tmp_path / "locked"
    locked.mkdir()
    real = os.access
    monkeypatch.setattr(os, "access", lambda p, mode: False if Path(p) == locked else real(p, mode))
    assert main(["train", "--quiet", "--out", str(locked / "run"), *TINY]) == 2
    err = capsys.readouterr().err.strip()
    assert err == f"coplay train: error: cannot write to {locked}: permission denied"
    assert not (locked / "run").exists()


def test_train_resume_with_a_roster_says_what_the_run_is(kuhn_run, tmp_path, capsys):
    roster = tmp_path / "r.yaml"
    roster.write_text("{}")
    assert main(["train", "--resume", str(kuhn_run), "--roster", str(roster)]) == 2
    err = capsys.readouterr().err
    assert f"{kuhn_run} was trained without a roster" in err and "roster.yaml" not in err


def test_piped_show_is_no_wider_than_its_panels_need(kuhn_run, capsys):
    from coplay.cli.common import PIPED_PANEL_WIDTH

    assert main(["show", str(kuhn_run), "--games", "1"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines and max(map(len, lines)) == PIPED_PANEL_WIDTH


def test_report_makes_the_folders_of_its_out(kuhn_run, tmp_path, capsys):
    out = tmp_path / "new" / "dir" / "x.html"
    assert main(["report", str(tmp_path / "nowhere"), "--out", str(out)]) == 2
    assert "no such run directory" in capsys.readouterr().err
    assert not (tmp_path / "new").exists()  # no report: no folders left behind
    assert main(["report", str(kuhn_run), "--out", str(out)]) == 0
    assert out.is_file()
    (tmp_path / "afile").write_text("")
    assert main(["report", str(kuhn_run), "--out", str(tmp_path / "afile" / "x.html")]) == 2
    assert capsys.readouterr().err.endswith(f"{tmp_path / 'afile'} is a file\n")


def test_train_help_names_the_default_out_of_a_config_file(capsys):
    with pytest.raises(SystemExit):
        main(["train", "--help"])
    assert "runs/<config file's stem>" in " ".join(capsys.readouterr().out.split())


@pytest.mark.parametrize("name", ["metrics.jsonl", "transcripts.jsonl"])
def test_bytes_that_are_not_utf8_are_named_on_resume_and_the_run_left_as_it_is(
    kuhn_run, tmp_path, capsys, name
):
    run = copy(kuhn_run, tmp_path / "run")
    with (run / name).open("ab") as f:
        f.write(b'{"iteration": 3, "x": "\xff"}')
    files = {p: p.read_bytes() for p in run.rglob("*") if p.is_file()}
    assert main(["train", "--quiet", "--resume", str(run), "train.iterations=3"]) == 2
    line = len((kuhn_run / name).read_text().splitlines()) + 1
    assert capsys.readouterr().err == (
        f"coplay train: error: {run / name}:{line} is not UTF-8 text (invalid start byte)\n"
    )
    assert {p: p.read_bytes() for p in run.rglob("*") if p.is_file()} == files


def test_report_writes_through_a_symlinked_out(kuhn_run, tmp_path, capsys):
    # The link stays (a report linked into a web folder), its target is replaced.
    site = tmp_path / "site"
    site.mkdir()
    assert main(["report", str(kuhn_run), "--out", str(site / "kuhn.html")]) == 0
    (tmp_path / "report.html").symlink_to(site / "kuhn.html")
    (site / "kuhn.html").write_text((site / "kuhn.html").read_text() + "<!-- old -->")
    assert main(["report", str(kuhn_run), "--out", str(tmp_path / "report.html")]) == 0
    assert (tmp_path / "report.html").is_symlink()
    assert "<!-- old -->" not in (site / "kuhn.html").read_text()
    assert sorted(p.name for p in site.iterdir()) == ["kuhn.html"]


def test_a_resumed_checkpoint_run_does_not_warn_of_its_own_tiny_settings(
    kuhn_run, tmp_path, capsys
):
    # Its config.yaml records every model.tiny key; --resume reads it as a record.
    out, final = tmp_path / "o", kuhn_run / "checkpoints" / "final"
    assert main(["train", "--out", str(out), *SHAPELESS, f"model.path={final}"]) == 0
    assert main(["train", "--resume", str(out), "train.iterations=3"]) == 0
    assert "ignored" not in capsys.readouterr().err


def test_resuming_a_finished_run_with_report_writes_the_report(kuhn_run, tmp_path):
    # No iteration is left, so the loop's report hook never runs: the command printed
    # the report's path and wrote no file.
    run = tmp_path / "finished"
    shutil.copytree(kuhn_run, run)
    (run / "report.html").unlink(missing_ok=True)
    assert main(["train", "--quiet", "--resume", str(run), "--report"]) == 0
    assert (run / "report.html").is_file()
