"""CLI smoke runs with tiny budgets, and one-line errors for bad input."""

import json
import os
import shutil
from dataclasses import replace
from pathlib import Path

import pytest
import torch
import yaml
from transformers import AutoModelForCausalLM, AutoTokenizer

from coplay.cli import COMMANDS, main
from tests.policies.test_remote import completion, serving_fake

TINY = [
    "train.iterations=2",
    "train.eval_every=1",
    "train.eval_episodes=20",
    "rollout.games_per_iter=16",
    "model.tiny.hidden_size=32",
    "model.tiny.intermediate_size=64",
]
SHAPELESS = [o for o in TINY if not o.startswith("model.tiny.")]
"""TINY without the tiny model's shape: beside model.path that is named in a warning."""


@pytest.fixture(scope="module")
def kuhn_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("run") / "kuhn"
    assert main(["train", "--quiet", "--out", str(out), *TINY]) == 0
    return out


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


@pytest.mark.parametrize("opponent", ["random", "nash"])
def test_eval_prints_results(kuhn_run, capsys, opponent):
    assert main(["eval", str(kuhn_run), "--opponent", opponent, "--episodes", "50"]) == 0
    out = capsys.readouterr().out
    assert "win" in out and "mean_return" in out and "exploitability" in out


def test_eval_exact_adds_each_seats_exact_outcome(kuhn_run, capsys):
    assert main(["eval", str(kuhn_run), "--opponent", "nash", "--episodes", "10", "--exact"]) == 0
    out = capsys.readouterr().out
    assert "seat 0 (exact)" in out and "seat 1 (exact)" in out and "argmax" in out


def test_eval_costly_lists_the_positions_worth_changing(kuhn_run, capsys):
    argv = ["eval", str(kuhn_run), "--opponent", "nash", "--episodes", "10", "--costly", "2"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "costliest positions, seat 0" in out and "costliest positions, seat 1" in out
    assert main([*argv[:-1], "-1"]) == 2
    assert "--costly must be 0 (off) or positive" in capsys.readouterr().err


def test_eval_exact_on_a_game_without_openspiel_is_a_clear_error(tmp_path, capsys):
    out = tmp_path / "talk"
    over = ["game.name=signalling", "train.iterations=1", "rollout.games_per_iter=4"]
    assert main(["train", "--quiet", "--out", str(out), *over, "train.eval_opponents=[]"]) == 0
    capsys.readouterr()
    assert main(["eval", str(out), "--episodes", "4", "--exact"]) == 2
    printed = capsys.readouterr()
    assert "no OpenSpiel backend" in printed.err
    assert "4/4 episodes" not in printed.out + printed.err  # refused before the match


def test_games_and_presets_list(capsys):
    assert main(["games"]) == 0 and "kuhn_poker" in capsys.readouterr().out
    assert main(["presets"]) == 0 and "tictactoe-selfplay" in capsys.readouterr().out


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


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["train", "--preset", "nope"], "unknown preset"),
        (["train", "game.name=chess_x"], "unknown game"),
        (["train", "train.iterations=0"], "train.iterations"),
        (
            ["train", "model.backend=nope"],
            "model.backend: unknown model backend 'nope': use one of hf",
        ),
        (
            ["train", "model.backend=vllm", "model.engine.kv_cach_gb=1"],
            "model.engine.kv_cach_gb: Extra inputs are not permitted",
        ),
        (["train", "model.engine.max_model_len=64"], "model.backend=hf starts none"),
        (["train", "--config", "/nonexistent.yaml"], "does not exist"),
        (["eval", "/nonexistent/run"], "/nonexistent/run does not exist"),
        (["eval", "/nonexistent/run", "--game", "kuhn_poker"], "does not exist"),
    ],
)
def test_bad_input_gives_one_error_line(argv, message, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1


def test_eval_rejects_unknown_opponent(kuhn_run, capsys):
    assert main(["eval", str(kuhn_run), "--opponent", "grandmaster"]) == 2
    assert "unknown opponent" in capsys.readouterr().err


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


def test_config_command_lists_keys(capsys):
    assert main(["config", "--preset", "kuhn-selfplay", "train.iterations=7"]) == 0
    out = capsys.readouterr().out
    assert "train.iterations" in out and "7" in out


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


@pytest.mark.parametrize("command", [["eval", "nash"], ["tournament", "random", "nash"]])
def test_a_seed_out_of_range_is_one_error_line(command, capsys):
    with pytest.raises(SystemExit):
        main([*command, "--game", "kuhn_poker", "--seed", "-1"])
    assert "argument --seed: a seed is 0 to 2147483647, got -1" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("command", "port", "message"),
    [
        (["play", "random", "--game", "kuhn_poker", "--web"], "99999", "a port is 0 to 65535"),
        (["serve", "runs/x"], "99999", "a port is 1 to 65535"),
        # 0 would serve on a free port but tell the clients remote:http://...:0
        (["serve", "runs/x"], "0", "a port is 1 to 65535, got 0"),
    ],
)
def test_a_port_out_of_range_is_one_error_line(command, port, message, capsys):
    with pytest.raises(SystemExit):
        main([*command, "--port", port])
    assert message in capsys.readouterr().err


@pytest.mark.parametrize(
    "option", [["--preset", "leduc-selfplay"], ["--config", "c.yaml"], ["--out", "x"]]
)
def test_resume_refuses_options_it_would_ignore(kuhn_run, capsys, option):
    assert main(["train", "--quiet", "--resume", str(kuhn_run), *option]) == 2
    assert f"{option[0]} cannot go with --resume" in capsys.readouterr().err


def test_tournament_prints_matrix_and_ratings_and_writes_json(tmp_path, capsys):
    out = tmp_path / "t.json"
    argv = ["tournament", "--game", "kuhn_poker", "--players", "random", "nash"]
    assert main([*argv, "--episodes", "20", "--seed", "1", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "mean return of row vs column" in printed and "Elo" in printed and "α-rank" in printed
    data = json.loads(out.read_text())
    assert data["players"] == ["random", "nash"] and data["episodes_per_match"] == 20
    ret = data["mean_return"]
    assert ret[0][1]["value"] == pytest.approx(-ret[1][0]["value"])  # zero-sum, same games
    assert data["wins"][0][1] + data["wins"][1][0] + data["draws"][0][1] == 20
    assert sum(data["ratings"]["alpharank"]) == pytest.approx(1.0)


@pytest.mark.parametrize(
    ("players", "message"),
    [
        (["random"], "at least 2 policies"),
        (["random", "random"], "list each player once"),
        (["random", "grandmaster"], "unknown opponent"),
        (["random", "remote:http://127.0.0.1:9/v1"], "remote:URL#model"),
        (["random", "remote:http://127.0.0.1:9/v1#m"], "cannot reach"),
    ],
)
def test_tournament_bad_players_give_one_error_line(players, message, capsys):
    argv = ["tournament", "--game", "kuhn_poker", "--players", *players, "--episodes", "2"]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1


def test_tournament_refuses_a_single_player_game_in_one_line(capsys):
    # The lone seat counted every game as a win in a cross-play matrix of nonsense.
    argv = ["tournament", "--game", "frozen_lake", "--players", "random", "nash"]
    assert main([*argv, "--episodes", "2"]) == 2
    err = capsys.readouterr().err
    assert err == (
        "coplay tournament: error: a tournament needs a game of 2 or more players; "
        "'frozen_lake' has 1\n"
    )


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--workers", "2"], "--workers 2 needs Ray, which is not installed: pip install"),
        (["--workers", "-1"], "--workers must be 0 or more, got -1"),
        (["--ray-address", "auto"], "--ray-address needs --workers N (N > 0)"),
    ],
)
def test_tournament_workers_without_ray_or_bad_give_one_error_line(
    extra, message, capsys, monkeypatch
):
    monkeypatch.setattr("coplay.distributed.config.find_spec", lambda name: None)  # no ray
    argv = ["tournament", "--game", "kuhn_poker", "--players", "random", "nash", *extra]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--workers", "2"], "--workers 2 needs Ray, which is not installed: pip install"),
        (["--workers", "-1"], "--workers must be 0 or more, got -1"),
        (["--ray-address", "auto"], "--ray-address needs --workers N (N > 0)"),
    ],
)
def test_eval_workers_without_ray_or_bad_give_one_error_line(
    kuhn_run, extra, message, capsys, monkeypatch
):
    monkeypatch.setattr("coplay.distributed.config.find_spec", lambda name: None)  # no ray
    assert main(["eval", str(kuhn_run), "--episodes", "2", *extra]) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1


def test_check_env_passes_registered_and_example_games(capsys, monkeypatch):
    monkeypatch.chdir(Path(__file__).resolve().parents[1])  # where examples/ lives
    assert main(["check-env", "frozen_lake", "--episodes", "3", "size=3", "slippery=true"]) == 0
    out = capsys.readouterr().out
    assert all(name in out for name in ("determinism", "private_info", "returns"))
    assert "fail" not in out
    assert main(["check-env", "examples.bidding:make", "--episodes", "3"]) == 0


BROKEN_ENV = """
from coplay.envs.frozen_lake import FrozenLake


class TooRich(FrozenLake):
    def returns(self):
        return [5.0]


def make(**params):
    return TooRich(**params)
"""


def test_check_env_exits_1_on_a_defect_and_says_what(tmp_path, capsys, monkeypatch):
    (tmp_path / "too_rich_lake.py").write_text(BROKEN_ENV)
    monkeypatch.chdir(tmp_path)
    assert main(["check-env", "too_rich_lake:make", "--episodes", "2", "size=3"]) == 1
    out = capsys.readouterr().out
    assert "fail" in out and "returns() [5.0] leave" in out and "fix:" in out


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["check-env", "nope"], "unknown game 'nope'"),
        (["check-env", "frozen_lake", "size=99"], "size must be an integer in 2..12"),
        (["check-env", "frozen_lake", "holes"], "must look like key=value"),
        (["check-env", "frozen_lake", "size=4", "size=8"], "game parameter 'size' is given twice"),
        (["check-env", "sokoban", "--episodes", "0"], "episodes must be a positive integer"),
        (["check-env", "nosuchpkg.mod:make"], "no module 'nosuchpkg.mod'"),
    ],
)
def test_check_env_user_errors_exit_2_in_one_line(argv, message, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1


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


# --- the command line does what it says ---------------------------------------------------


def _config_values(out: str) -> dict[str, str]:
    """key -> value of the rows of a printed ``coplay config`` table."""
    rows = [line.split("│") for line in out.splitlines() if line.startswith("│")]
    return {r[1].strip(): r[2].strip() for r in rows if r[1].strip()}


def test_overrides_may_stand_before_between_and_after_options(capsys):
    argv = ["config", "train.iterations=7", "--preset", "kuhn-selfplay", "train.seed=3"]
    assert main(argv) == 0
    values = _config_values(capsys.readouterr().out)
    assert (values["train.iterations"], values["train.seed"]) == ("7", "3")
    with pytest.raises(SystemExit):  # options stay checked
        main(["config", "train.seed=3", "--bogus", "x"])
    assert "unrecognized arguments: --bogus" in capsys.readouterr().err


def test_config_train_and_help_agree_on_the_base_of_a_config_file(tmp_path, capsys):
    f = tmp_path / "mine.yaml"
    f.write_text("train: {iterations: 1, eval_every: 1, eval_episodes: 8, eval_opponents: []}\n")
    assert main(["config", "--config", str(f)]) == 0
    shown = capsys.readouterr().out
    assert f"config ({f})" in shown  # no preset: the file over the built-in defaults
    values = _config_values(shown)
    out = tmp_path / "run"
    argv = ["train", "--quiet", "--config", str(f), "--out", str(out), *TINY[3:]]
    assert main(argv) == 0
    trained = yaml.safe_load((out / "config.yaml").read_text())
    assert values["algo.estimator"] == trained["algo"]["estimator"] == "rae"  # not the preset's
    assert values["rollout.group_size"] == str(trained["rollout"]["group_size"])
    with pytest.raises(SystemExit):
        main(["config", "--help"])
    assert "none: the file alone" in capsys.readouterr().out


def test_games_list_the_families_and_presets_their_game_and_purpose(capsys):
    assert main(["games"]) == 0
    out = capsys.readouterr().out
    assert "openspiel:<name>" in out and "textarena:<id>" in out and "package.module:" in out
    assert main(["presets"]) == 0
    row = next(x for x in capsys.readouterr().out.splitlines() if "│ kuhn3-selfplay" in x)
    assert "kuhn_poker" in row and "three-player Kuhn poker" in row


def test_piped_tables_keep_whole_keys_and_headers(capsys):
    from coplay.train.settings import build_config, describe

    assert main(["config"]) == 0
    out = capsys.readouterr().out
    keys = [k for k, _, _ in describe(build_config(preset="kuhn-selfplay"))]
    assert set(keys) <= set(_config_values(out))  # every key whole, on its own row
    assert main(["tournament", "--game", "kuhn_poker", "--players", "random", "nash"]) == 0
    assert "OpenSkill mu ± sigma" in capsys.readouterr().out


def test_piped_eval_prints_progress_lines_with_an_eta(kuhn_run, capsys, monkeypatch):
    monkeypatch.setenv("COPLAY_PROGRESS_EVERY_S", "0")
    assert main(["eval", str(kuhn_run), "--episodes", "40"]) == 0
    captured = capsys.readouterr()
    assert "eval: 40/40 episodes" in captured.err.splitlines()[-1]
    assert "eval:" not in captured.out  # results alone on stdout


@pytest.fixture(scope="module")
def bidding_run(tmp_path_factory):
    """A run on a user's own game (examples/bidding.py, module:factory)."""
    out = tmp_path_factory.mktemp("bidding") / "run"
    over = ["game.name=examples.bidding:make", "train.iterations=1", "rollout.games_per_iter=8"]
    over += ["train.eval_opponents=[random]"]
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(Path(__file__).resolve().parents[1])
        assert main(["train", "--quiet", "--out", str(out), *over, *TINY[4:]]) == 0
    return out


def test_a_custom_game_evaluates_and_plays_tournaments_without_naming_it(
    bidding_run, capsys, monkeypatch
):
    monkeypatch.chdir(Path(__file__).resolve().parents[1])
    assert main(["eval", str(bidding_run), "--episodes", "8"]) == 0
    assert "on examples.bidding:make" in capsys.readouterr().out
    argv = ["tournament", "--players", str(bidding_run), "random", "--episodes", "4"]
    assert main(argv) == 0
    assert "examples.bidding:make: mean return" in capsys.readouterr().out
    assert main([*argv[:-2], "--game", "examples.nope:make", "--episodes", "4"]) == 2
    assert "no module 'examples.nope'" in capsys.readouterr().err


def test_a_lora_roster_run_evaluates_by_role_and_never_its_bare_base(tmp_path, capsys):
    roster = tmp_path / "roster.yaml"
    roster.write_text(
        "policies: {first: {kind: learner}, second: {kind: learner}}\n"
        "seats: [first, second]\nlora: {rank: 2, alpha: 4}\n"
    )
    out = tmp_path / "run"
    over = ["magnet=null", "loss.kl=null"]
    over += ["train.iterations=1", "train.eval_opponents=[]", *TINY[3:]]
    assert main(["train", "--quiet", "--roster", str(roster), "--out", str(out), *over]) == 0
    capsys.readouterr()
    assert main(["eval", str(out), "--role", "second", "--episodes", "8"]) == 0
    assert "final/second vs random on kuhn_poker" in capsys.readouterr().out
    assert main(["eval", str(out), "--episodes", "8"]) == 2
    assert "roster run with policies first, second" in capsys.readouterr().err
    base = out / "checkpoints" / "final" / "base"
    assert main(["eval", str(base), "--episodes", "8"]) == 2
    assert "untrained base of a LoRA roster run" in capsys.readouterr().err
    assert main(["eval", str(out), "--role", "base", "--episodes", "8"]) == 0


def test_a_key_is_never_sent_over_plain_http_off_this_machine(capsys, monkeypatch):
    monkeypatch.setenv("EXAMPLE_KEY", "secret")
    players = ["random", "remote:http://api.example.com/v1#m@EXAMPLE_KEY"]
    assert main(["tournament", "--game", "kuhn_poker", "--players", *players]) == 2
    err = capsys.readouterr().err.strip()
    assert "refusing to send an API key over plain http:// to api.example.com" in err
    assert len(err.splitlines()) == 1 and "secret" not in err


# --- no run is ever silently destroyed ------------------------------------------------


def _copy(run, dest):
    import shutil

    shutil.copytree(run, dest)
    return dest


def test_train_refuses_a_directory_that_holds_a_run(kuhn_run, capsys):
    before = (kuhn_run / "metrics.jsonl").read_bytes()
    assert main(["train", "--quiet", "--out", str(kuhn_run), *TINY]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "already holds a run" in err
    assert f"--resume {kuhn_run}" in err and "--force" in err
    assert (kuhn_run / "metrics.jsonl").read_bytes() == before


def test_force_moves_the_old_run_aside_and_starts_clean(kuhn_run, tmp_path, capsys):
    run = _copy(kuhn_run, tmp_path / "run")
    (run / "checkpoints" / "iter_000099").mkdir()  # stale: the new run must not show it
    (run / "metrics.jsonl").write_text('{"iteration": 99}\n')
    over = [*TINY, "train.iterations=1", "train.save_every=1"]
    assert main(["train", "--quiet", "--force", "--out", str(run), *over]) == 0
    assert sorted(p.name for p in (run / "checkpoints").iterdir()) == ["final", "iter_000001"]
    rows = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["iteration"] for r in rows] == [0, 1]
    (old,) = tmp_path.glob("run.old-*")
    assert (old / "checkpoints" / "iter_000099").is_dir()
    assert f"moved the old run in {run} to {old}" in capsys.readouterr().out.replace("\n", "")


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
    run = _copy(kuhn_run, tmp_path / "run")
    files = {p: p.read_bytes() for p in run.rglob("*") if p.is_file()}
    assert main(["train", "--quiet", "--resume", str(run), override]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1
    assert {p: p.read_bytes() for p in run.rglob("*") if p.is_file()} == files


def test_resume_repairs_a_half_written_metrics_line(kuhn_run, tmp_path, capsys):
    run = _copy(kuhn_run, tmp_path / "run")
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


def test_debug_shows_the_traceback(tmp_path):
    from coplay.train.config import ConfigError

    with pytest.raises(ConfigError, match="holds no run to resume"):
        main(["--debug", "train", "--resume", str(tmp_path)])
    with pytest.raises(ConfigError, match="holds no run to resume"):
        main(["train", "--resume", str(tmp_path), "--debug"])


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


TOURNEY = ["tournament", "--game", "kuhn_poker", "--episodes", "10"]


def test_tournament_that_cannot_write_still_prints_its_results(tmp_path, capsys, monkeypatch):
    def full_disk(path, text):
        raise OSError(28, "No space left on device", str(path))

    monkeypatch.setattr("coplay.report.atomic.write_text", full_disk)
    out = tmp_path / "t.json"
    assert main([*TOURNEY, "--players", "random", "nash", "--out", str(out)]) == 2
    captured = capsys.readouterr()
    assert "mean return of row vs column" in captured.out and "Elo" in captured.out
    # stderr holds the progress line too; the error is one line of its own
    errors = [line for line in captured.err.splitlines() if line.startswith("coplay ")]
    assert errors == [
        f"coplay tournament: error: cannot write results to {out}: No space left on device"
    ]


def test_tournament_refuses_an_out_under_a_file_before_playing(tmp_path, capsys):
    (tmp_path / "afile").write_text("")
    out = tmp_path / "afile" / "t.json"
    assert main([*TOURNEY, "--players", "random", "nash", "--out", str(out)]) == 2
    captured = capsys.readouterr()
    assert "mean return" not in captured.out  # refused before a game was played
    assert captured.err == (
        f"coplay tournament: error: cannot write {out}: {tmp_path / 'afile'} is a file\n"
    )


def test_tournament_refuses_to_overwrite_results_unless_forced(tmp_path, capsys):
    out = tmp_path / "t.json"
    out.write_text("{}")
    argv = [*TOURNEY, "--players", "random", "nash", "--out", str(out)]
    assert main(argv) == 2
    assert "--force" in capsys.readouterr().err and out.read_text() == "{}"
    assert main([*argv, "--force"]) == 0
    assert json.loads(out.read_text())["complete"] is True
    (old,) = tmp_path.glob("t.json.old-*")
    assert old.read_text() == "{}"


class _FailingRemote:
    """A remote player whose endpoint goes down at its first request."""

    policy_id = "remote"

    def act(self, observations):
        raise ConnectionError("cannot reach http://127.0.0.1:9/v1: connection refused")


def test_tournament_saves_partial_results_when_a_player_fails(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(
        "coplay.policies.remote.remote_from_spec", lambda spec, api_key=None: _FailingRemote()
    )
    out = tmp_path / "t.json"
    players = ["random", "nash", "remote:http://127.0.0.1:9/v1#m"]
    assert main([*TOURNEY, "--players", *players, "--out", str(out)]) == 2
    captured = capsys.readouterr()
    assert "mean return of row vs column" in captured.out  # the matches played are shown
    err = captured.err.strip()
    assert "cannot reach" in err and len(err.splitlines()) == 1
    data = json.loads(out.read_text())
    assert data["complete"] is False and "random vs remote" in data["stopped"]
    ret = data["mean_return"]
    assert ret[0][1]["value"] == pytest.approx(-ret[1][0]["value"])  # random vs nash played
    assert ret[0][2]["value"] is None and ret[2][2]["value"] is None  # not played
    assert data["wins"][0][1] + data["wins"][1][0] + data["draws"][0][1] == 10


def test_ctrl_c_outside_training_is_one_line(capsys, monkeypatch):
    def interrupt(args):
        raise KeyboardInterrupt

    monkeypatch.setitem(COMMANDS, "games", replace(COMMANDS["games"], run=interrupt))
    assert main(["games"]) == 130
    assert capsys.readouterr().err == "coplay games: interrupted\n"


# --- the bad-input table of docs/results.md, command by command ---------------------------


BAD_INPUT = {
    "--out holds a run": (
        ["train", "--quiet", "--out", "{run}"],
        "{run} already holds a run; continue it with --resume {run}, or pass --force",
    ),
    "--out is a file": (["train", "--quiet", "--out", "{file}"], "output {file} is a file"),
    "--out under a file": (
        ["train", "--quiet", "--out", "{file}/run"],
        "cannot create {file}/run: {file} is a file",
    ),
    "--resume with --force": (
        ["train", "--quiet", "--resume", "{run}", "--force"],
        "--force starts a new run; it cannot go with --resume",
    ),
    "--resume changing the game": (
        ["train", "--quiet", "--resume", "{run}", "game.name=leduc_poker"],
        "cannot resume {run}: the saved weights do not fit the new config "
        "(game.name: 'kuhn_poker' -> 'leduc_poker')",
    ),
    "--resume ending before its saved iteration": (
        ["train", "--quiet", "--resume", "{run}", "train.iterations=1"],
        "{run} has already trained 2 iterations; train.iterations=1 would end before that",
    ),
    "override of the wrong type": (
        ["train", "--quiet", "--out", "{tmp}/x", "train.iterations=many"],
        "invalid config: train.iterations: Input should be a valid integer",
    ),
    "psro --out holds a run": (
        ["psro", "--out", "{run}"],
        "{run} already holds a run; continue it with --resume {run}, or pass --force",
    ),
    "league --out holds a run": (
        ["league", "--out", "{run}"],
        "{run} already holds a run; continue it with --resume {run}, or pass --force",
    ),
    "league --resume of a training run": (
        ["league", "--resume", "{run}"],
        "{run} is a training run, not a league run (it has no league.yaml); "
        "resume it with coplay train --resume {run}",
    ),
    "psro --resume of an empty folder": (
        ["psro", "--resume", "{tmp}"],
        "{tmp} holds no psro run to resume (it has no psro.yaml and config.yaml)",
    ),
    "league --resume with --force": (
        ["league", "--resume", "{run}", "--force"],
        "--force starts a new run; it cannot go with --resume",
    ),
    "tournament --out exists": (
        [*TOURNEY, "--players", "random", "nash", "--out", "{run}/summary.json"],
        "{run}/summary.json already exists; pass --force to move it aside",
    ),
}


@pytest.mark.parametrize("case", sorted(BAD_INPUT))
def test_bad_input_is_one_error_line_with_exit_status_2(case, kuhn_run, tmp_path, capsys):
    argv, message = BAD_INPUT[case]
    (tmp_path / "afile").write_text("")
    names = {"run": kuhn_run, "file": tmp_path / "afile", "tmp": tmp_path}
    before = (kuhn_run / "config.yaml").read_bytes(), (kuhn_run / "summary.json").read_bytes()
    capsys.readouterr()
    assert main([a.format(**names) for a in argv]) == 2
    err = [line for line in capsys.readouterr().err.splitlines() if line.startswith("coplay ")]
    assert len(err) == 1 and ": error: " + message.format(**names) in err[0], err
    # a refusal leaves the run as it was
    assert before == (
        (kuhn_run / "config.yaml").read_bytes(),
        (kuhn_run / "summary.json").read_bytes(),
    )


def test_a_text_checkpoint_keeps_its_format_and_is_never_scored_exactly(tmp_path, capsys):
    import coplay

    out = tmp_path / "text"
    over = [*TINY[:1], "train.eval_opponents=[]", "rollout.games_per_iter=4"]
    text = ["model.mode=text", "model.max_new_tokens=4", "model.text.answer=think-boxed"]
    assert main(["train", "--quiet", "--out", str(out), *over, *text]) == 0
    policy = coplay.load_policy(out)
    assert (policy.mode, policy.text.answer) == ("text", "think-boxed")
    assert policy.tokenizer.chat_template
    # its exact rows are those of its sampled answers, each with K and an interval
    assert main(["eval", str(out), "--episodes", "4", "--samples", "2", "--exact"]) == 0
    shown = capsys.readouterr().out
    assert "exploitability (sampled, K=2)" in shown and "(exact)" not in shown


@pytest.fixture(scope="module")
def writer(tmp_path_factory) -> Path:
    """A saved tiny text-mode Kuhn model: an opponent whose choice scores are no
    distribution of its play."""
    from coplay.models.loading import PlayedGame, save_policy
    from tests.eval.writers import writing_lm

    folder = tmp_path_factory.mktemp("writer") / "writer"
    save_policy(writing_lm(0), folder, game=PlayedGame("kuhn_poker", {}))
    return folder


def test_eval_exact_and_costly_read_a_text_opponent_by_its_sampled_answers(
    kuhn_run, writer, capsys
):
    # --exact against a writing checkpoint played every game, then died before the table.
    argv = ["eval", str(kuhn_run), "--opponent", str(writer), "--episodes", "4", "--samples", "2"]
    assert main([*argv, "--exact", "--costly", "1"]) == 0
    shown = capsys.readouterr().out
    for seat in (0, 1):
        assert f"exact loss seat{seat} (opponent sampled, K=2)" in shown
        assert f"costliest positions, seat {seat}" in shown
    assert "opponent's invalid answers (sampled, K=2)" in shown
    assert "seat 0 (exact)" not in shown  # no row claims the opponent's choice scores


def test_eval_of_a_text_policy_against_a_text_opponent_samples_both(writer, capsys):
    argv = ["eval", str(writer), "--opponent", str(writer), "--episodes", "4", "--samples", "2"]
    assert main([*argv, "--exact"]) == 0
    shown = capsys.readouterr().out
    assert "exact loss seat1 (sampled, K=2)" in shown
    assert "opponent's invalid answers (sampled, K=2)" in shown


def _penalty_run(writer: Path, out: Path, max_turns: int = 3) -> Path:
    """The writer's checkpoint as the final one of a run trained with
    game.invalid.on_fail=penalty and game.max_turns (its config.yaml)."""
    shutil.copytree(writer, out / "checkpoints" / "final")
    game = {"name": "kuhn_poker", "invalid": {"on_fail": "penalty"}, "max_turns": max_turns}
    (out / "config.yaml").write_text(yaml.safe_dump({"game": game}))
    return out


def _sampled_exploitability(shown: str) -> str:
    return next(line for line in shown.splitlines() if "exploitability (sampled" in line)


def test_eval_of_a_runs_checkpoint_plays_under_the_runs_game_settings(
    writer, tmp_path, capsys, monkeypatch
):
    # It played and sampled with the defaults (forfeits, the game's length) whatever the
    # run trained with: a penalty run's sampled exploitability of 0.46 read 2.0 here.
    import coplay.eval.matches as matches

    played = []
    real = matches.play_match
    monkeypatch.setattr(matches, "play_match", lambda *a, **kw: played.append(kw) or real(*a, **kw))
    run = _penalty_run(writer, tmp_path / "run")
    argv = ["--episodes", "4", "--samples", "4"]
    assert main(["eval", str(run), *argv]) == 0
    in_run = capsys.readouterr().out
    assert main(["eval", str(writer), *argv]) == 0
    alone = capsys.readouterr().out
    assert played[0]["max_turns"] == 3 and played[0]["invalid"].on_fail == "penalty"
    assert played[1]["max_turns"] is None and played[1]["invalid"].on_fail == "forfeit"
    assert f"game settings (from {run / 'config.yaml'}): invalid answers on_fail=penalty" in (
        in_run.replace("\n", "")
    )
    assert "max_turns=3" in in_run and "defaults: no run config found" in alone
    assert _sampled_exploitability(in_run) != _sampled_exploitability(alone)


def test_tournament_plays_under_the_runs_game_settings_which_must_agree(
    writer, tmp_path, capsys, monkeypatch
):
    import coplay.eval.crossplay as crossplay

    asked = []
    real = crossplay.cross_play
    monkeypatch.setattr(
        crossplay, "cross_play", lambda *a, **kw: asked.append(kw) or real(*a, **kw)
    )
    run = _penalty_run(writer, tmp_path / "run")
    argv = ["tournament", "--players", str(run), "random", "--episodes", "2"]
    assert main(argv) == 0
    assert asked[0]["max_turns"] == 3 and asked[0]["invalid"].on_fail == "penalty"
    assert "invalid answers on_fail=penalty" in capsys.readouterr().out.replace("\n", "")
    other = _penalty_run(writer, tmp_path / "other", max_turns=4)
    assert main(["tournament", "--players", str(run), str(other), "--episodes", "2"]) == 2
    err = capsys.readouterr().err
    assert "the checkpoints' runs play kuhn_poker under different settings" in err
    assert len(err.splitlines()) == 1


SPELLINGS = [[], ["--game", "kuhn_poker"], ["--game", "openspiel:kuhn_poker"]]
"""The checkpoint's game: as it records it, and named by --game two ways."""


@pytest.fixture(scope="module")
def three_player_run(tmp_path_factory) -> Path:
    """A run of a tiny choice-mode policy trained on three-player Kuhn with penalties:
    its checkpoint and config.yaml record both."""
    from coplay.envs.registry import make_env
    from coplay.models.build import ModelConfig, build_policy
    from coplay.models.loading import PlayedGame, save_policy
    from coplay.train.trainer import game_text

    text = game_text(lambda: make_env("kuhn_poker", players=3), episodes=20)
    cfg = ModelConfig.model_validate({"tiny": {"hidden_size": 32, "intermediate_size": 64}})
    policy = build_policy(cfg, corpus=text.texts, actions=text.actions, seed=0)
    run = tmp_path_factory.mktemp("three") / "run"
    save_policy(
        policy, run / "checkpoints" / "final", game=PlayedGame("kuhn_poker", {"players": 3})
    )
    game = {"name": "kuhn_poker", "params": {"players": 3}, "invalid": {"on_fail": "penalty"}}
    (run / "config.yaml").write_text(yaml.safe_dump({"game": game}))
    return run


def _seats(shown: str) -> int:
    return sum(f"mean return, seat {s} " in shown for s in range(4))


@pytest.mark.parametrize("game", SPELLINGS, ids=["recorded", "registered", "family"])
def test_eval_plays_the_checkpoints_game_as_trained_however_spelled(three_player_run, capsys, game):
    # --game openspiel:kuhn_poker played two-player Kuhn with the defaults, and said the
    # run's config was not found.
    assert main(["eval", str(three_player_run), *game, "--episodes", "4"]) == 0
    shown = capsys.readouterr().out
    assert _seats(shown) == 3 and "game parameters" not in shown
    assert f"(from {three_player_run / 'config.yaml'}): invalid answers on_fail=penalty" in shown


@pytest.mark.parametrize("game", SPELLINGS, ids=["recorded", "registered", "family"])
def test_eval_plays_the_parameters_given_and_says_they_are_not_the_trained_ones(
    three_player_run, capsys, game
):
    assert main(["eval", str(three_player_run), *game, "players=2", "--episodes", "4"]) == 0
    shown = capsys.readouterr().out
    said = (
        "game parameters played: players=2; the checkpoint was trained on this game with players=3"
    )
    assert _seats(shown) == 2 and shown.count(said) == 1
    assert main(["eval", str(three_player_run), *game, "players=3", "--episodes", "4"]) == 0
    assert "game parameters" not in capsys.readouterr().out


def test_play_and_tournament_keep_a_checkpoints_parameters_however_the_game_is_spelled(
    three_player_run,
):
    from coplay.cli.common import players_game

    final = str(three_player_run / "checkpoints" / "final")
    for game in ("kuhn_poker", "openspiel:kuhn_poker"):
        assert players_game(game, [final, "random"]) == (game, {"players": 3})
    assert players_game("leduc_poker", [final, "random"]) == ("leduc_poker", {})


@pytest.mark.parametrize("game", [None, "kuhn_poker", "openspiel:kuhn_poker"])
def test_checkpoints_that_spell_one_game_two_ways_must_agree_on_its_parameters(monkeypatch, game):
    # --game openspiel:kuhn_poker played the 2-player checkpoint at 3 players, the first
    # one's; without --game, one game with the same parameters was "two games".
    from types import SimpleNamespace

    from coplay.cli import common
    from coplay.models.loading import PlayedGame

    games = {"three": PlayedGame("kuhn_poker", {"players": 3})}
    monkeypatch.setattr(common, "is_checkpoint_player", lambda spec: spec in games)
    monkeypatch.setattr(
        common, "saved_player", lambda spec: SimpleNamespace(game=lambda: games[spec])
    )
    games["two"] = PlayedGame("openspiel:kuhn_poker", {})
    with pytest.raises(
        ValueError, match="the checkpoints play openspiel:kuhn_poker with different"
    ):
        common.players_game(game, ["three", "two"])
    games["two"] = PlayedGame("openspiel:kuhn_poker", {"players": 3})
    assert common.players_game(game, ["three", "two"]) == (game or "kuhn_poker", {"players": 3})


server = pytest.fixture(serving_fake, name="server")


def test_eval_plays_a_remote_endpoint_and_reads_it_exactly_by_its_sampled_answers(
    kuhn_run, server, capsys
):
    # coplay serve prints a remote: player "for coplay eval --opponent", which refused it.
    server.reply = lambda body: (200, completion("[Bet]"))
    argv = ["eval", str(kuhn_run), "--opponent", f"remote:{server.url}#m", "--episodes", "4"]
    assert main([*argv, "--samples", "2", "--exact"]) == 0
    shown = capsys.readouterr().out
    assert "exact loss seat0 (opponent sampled, K=2)" in shown and server.requests
    assert main([*argv[:3], "remote:nohost#m"]) == 2  # malformed: refused before playing
    assert "base_url must start with http" in capsys.readouterr().err


# --- data on the console is text: ``[word]`` and ``:name:`` are never markup or emoji ---


def test_brackets_in_config_values_and_help_are_printed_as_they_are(capsys):
    assert main(["config", 'model.text.stop=["[/x]", ":smile:"]']) == 0  # was a MarkupError
    values = _config_values(capsys.readouterr().out)
    assert values["train.eval_opponents"] == "[random, nash]"
    assert values["model.text.stop"] == "['[/x]', ':smile:']"
    assert main(["config"]) == 0
    assert "e.g. [mypkg.parts]: they" in capsys.readouterr().out
    assert main(["games"]) == 0
    assert "pip install 'coplay[textarena]'" in capsys.readouterr().out


def test_a_run_directory_with_brackets_is_named_whole(kuhn_run, tmp_path, capsys):
    out = tmp_path / "exp[seed1]"
    assert main(["train", "--quiet", "--out", str(out), *TINY, "train.iterations=1"]) == 0
    printed = capsys.readouterr().out
    assert f"coplay train kuhn_poker -> {out}" in printed
    assert f"run directory: {out}" in printed
    argv = [*TOURNEY, "--players", str(out), "[/nash]"]
    assert main(argv) == 2  # a player name is data in the error line too
    assert "unknown opponent '[/nash]'" in capsys.readouterr().err
    assert main([*TOURNEY, "--players", str(out), "random"]) == 0
    assert "exp[seed1]" in capsys.readouterr().out  # its column header


def test_check_env_colours_its_results_without_markup(capsys):
    from coplay.cli.common import console

    with console.capture() as captured:
        assert main(["check-env", "kuhn_poker", "--episodes", "2"]) == 0
    assert "[green]" not in captured.get() and "│ pass" in captured.get()


# --- --force moves nothing aside before the rest of the command is checked ---------------


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (
            ["train", "--out", "{run}", "model.path={run}/checkpoints/final"],
            "model.path {run}/checkpoints/final is inside {run}, which --force would move aside",
        ),
        (["train", "--out", "{run}", "--roster", "{tmp}/missing.yaml"], "does not exist"),
        (["train", "--out", "{run}", "train.opponent=bogus"], "unknown opponent 'bogus'"),
        (["train", "--out", "{run}", "train.eval_opponents=[bogus]"], "unknown opponent"),
        (["train", "--out", "{run}", "model.path={tmp}"], "no Hugging Face checkpoint at {tmp}"),
        (["league", "--out", "{run}", "--bots", "bogus"], "unknown opponent 'bogus'"),
        (["psro", "--out", "{run}", "--config", "{run}/config.yaml"], "--config {run}/config."),
    ],
)
def test_force_moves_nothing_before_the_other_arguments_are_checked(
    argv, message, kuhn_run, tmp_path, capsys
):
    run = _copy(kuhn_run, tmp_path / "run")
    files = {p: p.read_bytes() for p in run.rglob("*") if p.is_file()}
    names = {"run": run, "tmp": tmp_path}
    assert main([*(a.format(**names) for a in argv), "--force", *SHAPELESS]) == 2
    err = capsys.readouterr().err.strip()
    assert message.format(**names) in err and len(err.splitlines()) == 1
    assert {p: p.read_bytes() for p in run.rglob("*") if p.is_file()} == files
    assert not list(tmp_path.glob("run.old-*"))


def test_force_puts_the_old_run_back_when_the_new_one_fails_unwritten(
    kuhn_run, tmp_path, capsys, monkeypatch
):
    from coplay.train import trainer

    def refused(cfg, out, fresh=True):
        raise ValueError("refused while setting up")

    monkeypatch.setattr(trainer, "setup", refused)
    run = _copy(kuhn_run, tmp_path / "run")
    files = {p: p.read_bytes() for p in run.rglob("*") if p.is_file()}
    assert main(["train", "--quiet", "--out", str(run), "--force", *TINY]) == 2
    captured = capsys.readouterr()
    assert captured.err == "coplay train: error: refused while setting up\n"
    assert f"put the old run back in {run}" in captured.out
    assert {p: p.read_bytes() for p in run.rglob("*") if p.is_file()} == files
    assert not list(tmp_path.glob("run.old-*"))


def test_demos_force_keeps_the_old_file_when_the_player_or_game_is_bad(tmp_path, capsys):
    out = tmp_path / "d.jsonl"
    out.write_text("mine\n")
    for bad in (["--player", "bogus"], ["--player", "nash", "players=3"], ["--game", "nogame"]):
        argv = ["demos", "--game", "kuhn_poker", "--out", str(out), "--force", *bad]
        assert main(argv) == 2
        assert len(capsys.readouterr().err.splitlines()) == 1
        assert out.read_text() == "mine\n" and not list(tmp_path.glob("d.jsonl.old-*"))


def test_force_of_the_current_directory_is_one_error_line(kuhn_run, tmp_path, capsys, monkeypatch):
    run = _copy(kuhn_run, tmp_path / "run")
    monkeypatch.chdir(run)
    assert main(["train", "--quiet", "--out", ".", "--force", *TINY]) == 2
    assert capsys.readouterr().err == (
        f"coplay train: error: cannot move {run} aside: it holds the current directory; "
        "run from outside it\n"
    )
    assert not list(tmp_path.glob("run.old-*"))


# --- checks made before the work they would throw away -----------------------------------


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (
            ["--game", "dilemma", "--costly", "2"],
            "game 'dilemma' has no OpenSpiel backend; exact evaluation needs one",
        ),
        (["--samples", "0"], "--samples must be positive, got 0"),
    ],
)
def test_eval_refuses_costly_and_samples_before_playing(
    kuhn_run, capsys, monkeypatch, extra, message
):
    def no_match(*args, **kwargs):
        raise AssertionError("the match was played before the refusal")

    monkeypatch.setattr("coplay.eval.matches.play_match", no_match)
    assert main(["eval", str(kuhn_run), "--episodes", "2000", *extra]) == 2
    assert capsys.readouterr().err == f"coplay eval: error: {message}\n"


@pytest.mark.parametrize(
    "argv",
    [
        ["train", "--resume", "", *TINY],
        ["train", "--out", "", *TINY],
        ["psro", "--resume", "", "--iterations", "1", "--oracle", "exact", *TINY],
        ["league", "--out", "", *TINY],
        ["report", "x", "--out", ""],
        [*TOURNEY, "--players", "random", "nash", "--out", ""],
    ],
)
def test_an_empty_path_is_refused_not_taken_for_the_default(argv, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit):
        main(argv)
    assert "an empty path names nothing" in capsys.readouterr().err
    assert not list(tmp_path.iterdir())  # no runs/<preset> started instead


# --- players, messages and widths ---------------------------------------------------------


def test_play_takes_a_run_whose_path_holds_an_equals_sign(kuhn_run, tmp_path, monkeypatch):
    seen = {}

    def play(make_env, players, **kwargs):
        seen.update(players)
        return 0

    monkeypatch.setattr("coplay.play.setup.play", play)
    run = _copy(kuhn_run, tmp_path / "lr=0.1")
    assert main(["play", str(run), "--seed", "1"]) == 0
    assert sorted(p is None for p in seen.values()) == [False, True]  # the run and you


def test_a_nash_folder_does_not_hide_the_nash_bot(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "nash").mkdir()
    assert main([*TOURNEY, "--players", "random", "nash"]) == 0


def _fake_roster_run(path):
    for role in ("alice", "bob"):
        (path / "checkpoints" / "final" / role).mkdir(parents=True)
        (path / "checkpoints" / "final" / role / "config.json").write_text("{}")
    return path


@pytest.mark.parametrize(
    "argv",
    [
        [*TOURNEY, "--players", "{run}", "random"],
        ["tournament", "--players", "{run}", "random"],
        ["play", "{run}", "--game", "kuhn_poker"],
        ["eval", "{kuhn}", "--opponent", "{run}"],
    ],
)
def test_a_roster_run_as_a_player_names_its_folders_not_a_missing_role_option(
    argv, kuhn_run, tmp_path, capsys
):
    run = _fake_roster_run(tmp_path / "roster")
    assert main([a.format(run=run, kuhn=kuhn_run) for a in argv]) == 2
    assert capsys.readouterr().err.endswith(
        f"error: {run} is a roster run with policies alice, bob: pass one policy's folder, "
        f"e.g. {run / 'checkpoints' / 'final' / 'alice'}\n"
    )


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


@pytest.mark.parametrize("command", ["train", "league", "psro"])
def test_a_run_whose_saved_settings_were_emptied_is_refused_not_resumed_with_defaults(
    command, kuhn_run, tmp_path, capsys
):
    # An emptied psro.yaml resumed a finished 1-response run to 8 responses; an emptied
    # config.yaml or league.yaml resumed with the defaults, or failed far from the file.
    run = tmp_path / "run"
    shutil.copytree(kuhn_run, run)
    emptied = run / ("config.yaml" if command == "train" else f"{command}.yaml")
    emptied.write_text("")
    before = (run / "metrics.jsonl").read_bytes()
    assert main([command, "--resume", str(run), "train.iterations=3"]) == 2
    err = capsys.readouterr().err
    assert f"{emptied} is empty" in err and len(err.splitlines()) == 1
    assert (run / "metrics.jsonl").read_bytes() == before


# --- the second list of the command-line fuzz ------------------------------------------


@pytest.mark.parametrize("name", ["metrics.jsonl", "transcripts.jsonl"])
def test_bytes_that_are_not_utf8_are_named_on_resume_and_the_run_left_as_it_is(
    kuhn_run, tmp_path, capsys, name
):
    run = _copy(kuhn_run, tmp_path / "run")
    with (run / name).open("ab") as f:
        f.write(b'{"iteration": 3, "x": "\xff"}')
    files = {p: p.read_bytes() for p in run.rglob("*") if p.is_file()}
    assert main(["train", "--quiet", "--resume", str(run), "train.iterations=3"]) == 2
    line = len((kuhn_run / name).read_text().splitlines()) + 1
    assert capsys.readouterr().err == (
        f"coplay train: error: {run / name}:{line} is not UTF-8 text (invalid start byte)\n"
    )
    assert {p: p.read_bytes() for p in run.rglob("*") if p.is_file()} == files


@pytest.mark.parametrize(("driver", "trace"), [("league", "snapshots"), ("psro", "psro.jsonl")])
@pytest.mark.parametrize("command", ["train", "driver"])
def test_a_population_run_that_lost_its_settings_is_named_not_resumed_as_a_training_run(
    kuhn_run, tmp_path, capsys, driver, trace, command
):
    # A league without league.yaml was advised, and let, to resume as a plain run: it
    # would train on without its league.
    run = _copy(kuhn_run, tmp_path / "run")
    (run / trace).mkdir() if trace == "snapshots" else (run / trace).write_text("")
    files = {p: p.read_bytes() for p in run.rglob("*") if p.is_file()}
    command = driver if command == "driver" else command
    assert main([command, "--resume", str(run), "train.iterations=3"]) == 2
    what = f"a {driver} run, but" if command == driver else f"a {driver} run;"
    assert capsys.readouterr().err == (
        f"coplay {command}: error: {run} is {what} its settings file {driver}.yaml is "
        f"missing: put it back, then coplay {driver} --resume {run}\n"
    )
    assert {p: p.read_bytes() for p in run.rglob("*") if p.is_file()} == files


@pytest.mark.parametrize("command", ["train", "config", "league"])
def test_a_config_that_is_a_directory_is_named_so(command, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "conf").mkdir()
    assert main([command, "--config", "conf"]) == 2
    assert capsys.readouterr().err == (
        f"coplay {command}: error: config file conf is a directory, not a YAML file\n"
    )
    assert [p.name for p in tmp_path.iterdir()] == ["conf"]  # no run started


@pytest.mark.parametrize("command", ["train", "config", "psro"])
def test_an_empty_preset_is_refused_with_the_list_not_taken_for_the_default(
    command, tmp_path, capsys, monkeypatch
):
    monkeypatch.chdir(tmp_path)
    assert main([command, "--preset", "", "train.iterations=1"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"coplay {command}: error: unknown preset ''; presets: ")
    assert "kuhn-selfplay" in err and len(err.splitlines()) == 1
    assert list(tmp_path.iterdir()) == []  # no runs/kuhn-selfplay started


@pytest.mark.parametrize(
    "second", ["kuhn/", "./kuhn", "kuhn/checkpoints/final", "{abs}", "../{name}/kuhn"]
)
def test_tournament_refuses_one_checkpoint_under_two_spellings(
    kuhn_run, capsys, monkeypatch, second
):
    monkeypatch.chdir(kuhn_run.parent)
    second = second.format(abs=kuhn_run, name=kuhn_run.parent.name)
    assert main([*TOURNEY, "--players", "kuhn", "random", second]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"coplay tournament: error: kuhn and {second} are the same checkpoint (")
    assert err.endswith("checkpoints/final); list each player once\n")


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (["random", "--port", "9000"], "--port is where the web page is served; add --web or"),
        (["random", "--host", "0.0.0.0"], "--host is where the web page is served; add --web or"),
        (["--watch", "random", "nash", "--seat", "1"], "--seat 1 is your seat, and with --watch"),
        (["random", "--web", "--games", "3"], "--games counts the games played in the terminal"),
    ],
)
def test_play_refuses_options_it_would_ignore(options, message, capsys, monkeypatch):
    monkeypatch.setattr("coplay.play.setup.play", lambda *a, **k: 0)  # nothing is played
    assert main(["play", "--game", "kuhn_poker", *options]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"coplay play: error: {message}") and len(err.splitlines()) == 1


def test_watching_with_alternate_seats_turns_the_policies_seats(capsys, monkeypatch):
    seen = {}

    def play(make_env, players, **kwargs):
        seen.update(kwargs)
        return 0

    monkeypatch.setattr("coplay.play.setup.play", play)
    argv = ["play", "--game", "kuhn_poker", "--watch", "random", "nash", "--seat", "alternate"]
    assert main(argv) == 0
    assert seen["rotate"] and seen["games"] == 1 and seen["web"] is None


def test_a_host_that_cannot_be_served_on_is_named_as_the_host(capsys, monkeypatch):
    monkeypatch.setattr("coplay.play.setup.play", lambda *a, **k: 0)  # nothing is served
    # 192.0.2.1 is reserved for documentation (RFC 5737): no machine has it.
    assert main(["play", "random", "--game", "kuhn_poker", "--web", "--host", "192.0.2.1"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("coplay play: error: cannot serve on 192.0.2.1:8765: ")
    assert "; pass an address of this machine as --host (" in err and "--port" not in err


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


@pytest.mark.parametrize("command", ["train", "league"])
def test_a_run_directory_as_model_path_names_its_checkpoint(kuhn_run, tmp_path, capsys, command):
    out = tmp_path / "o"
    assert main([command, "--out", str(out), *SHAPELESS, f"model.path={kuhn_run}"]) == 2
    final = kuhn_run / "checkpoints" / "final"
    assert capsys.readouterr().err == (
        f"coplay {command}: error: no Hugging Face checkpoint at {kuhn_run} (config.json "
        f"missing); {kuhn_run} is a run directory: give its checkpoint, {final}\n"
    )
    assert not out.exists()


def test_a_resumed_checkpoint_run_does_not_warn_of_its_own_tiny_settings(
    kuhn_run, tmp_path, capsys
):
    # Its config.yaml records every model.tiny key; --resume reads it as a record.
    out, final = tmp_path / "o", kuhn_run / "checkpoints" / "final"
    assert main(["train", "--out", str(out), *SHAPELESS, f"model.path={final}"]) == 0
    assert main(["train", "--resume", str(out), "train.iterations=3"]) == 0
    assert "ignored" not in capsys.readouterr().err


def test_check_env_calls_openspiel_parameters_that_break_the_game_a_user_error(capsys):
    # goofspiel of -1 cards loads in OpenSpiel, then failed at the first deal
    # ("vector::reserve"), and check-env exited 1: "the game has a defect".
    assert main(["check-env", "openspiel:goofspiel", "--episodes", "1", "num_cards=-1"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(
        "coplay check-env: error: bad parameters for game 'goofspiel', num_cards=-1"
    )
    assert len(err.splitlines()) == 1


@pytest.mark.parametrize("given", ["run", "checkpoint", "second"])
def test_the_web_page_replays_the_games_of_the_run_a_checkpoint_comes_from(
    kuhn_run, monkeypatch, given
):
    # A checkpoint inside a run (RUN/checkpoints/final) holds no transcripts: the page
    # replays the run's, whichever watched player is the saved one.
    import coplay.play.setup as setup_module

    asked = {}
    monkeypatch.setattr(setup_module, "play", lambda *a, **kw: asked.update(kw) or 0)
    final = str(kuhn_run / "checkpoints" / "final")
    watched = {"run": [str(kuhn_run), "nash"], "checkpoint": [final, "nash"]}
    watched["second"] = ["random", final]
    assert main(["play", "--web", "--watch", *watched[given]]) == 0
    assert asked["transcripts"] == kuhn_run / "transcripts.jsonl"


def test_a_three_player_tournament_shows_no_alpharank_and_says_why(tmp_path, capsys, monkeypatch):
    # Cross-play of 3 players is one policy against copies of another, not the meta-game
    # alpha-rank ranks: its column is a dash, the JSON null, and one line says why.
    import coplay.cli.tournament as tournament
    from coplay.policies.scripted import RandomPolicy

    def player(spec, game, params, *, seed):
        return RandomPolicy(seed, policy_id=spec)  # two distinct players of any game

    monkeypatch.setattr(tournament, "build_player", player)
    out = tmp_path / "t.json"
    argv = ["tournament", "--game", "openspiel:matching_pennies_3p", "--players", "random", "nash"]
    assert main([*argv, "--episodes", "4", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert tournament.NO_ALPHARANK in printed.replace("\n", " ")
    rows = [
        line for line in printed.splitlines() if line.lstrip("│ ").startswith(("random", "nash"))
    ]
    assert [row.rstrip(" │").endswith("-") for row in rows[-2:]] == [True, True]
    assert json.loads(out.read_text())["ratings"]["alpharank"] == [None, None]


def test_every_option_with_a_default_names_it_in_its_help():
    # eval --episodes and --seed had no help at all; eval --opponent, tournament and
    # check-env --episodes, show and report --games, serve --port and demos left it out.
    # play --games, --seat, --host and --port, which word their defaults themselves,
    # said "(default 1)".
    import argparse

    missing, misworded = [], []
    for command in COMMANDS.values():
        parser = argparse.ArgumentParser(prog=f"coplay {command.name}")
        command.add_arguments(parser)
        for action in parser._actions:
            text = (action.help or "") % {**vars(action), "prog": parser.prog}
            if "(default" in text.replace("(default: ", ""):
                misworded.append(f"{command.name} {action.dest}")
            if not action.option_strings or action.nargs == 0 or action.default is None:
                continue  # a positional, a flag, or a default the help words itself
            if f"(default: {action.default})" not in text:
                missing.append(f"{command.name} {action.option_strings[-1]}")
    assert missing == [] and misworded == []


def test_eval_says_samples_are_ignored_where_nothing_is_sampled(kuhn_run, capsys, monkeypatch):
    # A choice-mode run evaluated exactly: --samples 4 was taken and had no effect.
    monkeypatch.setenv("COPLAY_PROGRESS_EVERY_S", "1000")
    assert main(["eval", str(kuhn_run), "--episodes", "4", "--samples", "4"]) == 0
    assert capsys.readouterr().err.splitlines()[0] == (
        "coplay eval: warning: --samples 4 is ignored: it counts the answers of a text-mode "
        "policy or opponent, and both here play in choice mode"
    )
    assert main(["eval", str(kuhn_run), "--episodes", "4"]) == 0
    assert "--samples" not in capsys.readouterr().err


def test_resuming_a_finished_run_with_report_writes_the_report(kuhn_run, tmp_path):
    # No iteration is left, so the loop's report hook never runs: the command printed
    # the report's path and wrote no file.
    run = tmp_path / "finished"
    shutil.copytree(kuhn_run, run)
    (run / "report.html").unlink(missing_ok=True)
    assert main(["train", "--quiet", "--resume", str(run), "--report"]) == 0
    assert (run / "report.html").is_file()
