"""CLI smoke runs with tiny budgets, and one-line errors for bad input."""

import json

import pytest
from transformers import AutoModelForCausalLM, AutoTokenizer

from coplay.cli import main

TINY = [
    "train.iterations=2",
    "train.eval_every=1",
    "train.eval_episodes=20",
    "rollout.games_per_iter=16",
    "model.tiny.hidden_size=32",
    "model.tiny.intermediate_size=64",
]


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


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["train", "--preset", "nope"], "unknown preset"),
        (["train", "game.name=chess_x"], "unknown game"),
        (["train", "train.iterations=0"], "train.iterations"),
        (["train", "--config", "/nonexistent.yaml"], "does not exist"),
        (["eval", "/nonexistent/run"], "cannot tell which game"),
        (["eval", "/nonexistent/run", "--game", "kuhn_poker"], "neither a checkpoint"),
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


def test_resume_of_a_directory_without_a_run_fails_cleanly(tmp_path, capsys):
    assert main(["train", "--resume", str(tmp_path)]) == 2
    assert "does not exist" in capsys.readouterr().err
