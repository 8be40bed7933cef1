"""Roster state: a resumed roster run equals an uninterrupted one."""

import json
import shutil

import pytest

from coplay.cli import main
from coplay.train.config import build_config
from coplay.train.roster import train_roster, validate_roster
from tests.train.rosters import TINY, TWO_ROLES

RESUMABLE = {
    "two learners, a bot, rotation": {
        "policies": {
            "first": {"kind": "learner"},
            "second": {"kind": "learner", "optim": {"lr": 0.002}, "algo": {"estimator": "rloo"}},
            "bot": {"kind": "bot", "name": "random"},
        },
        "seats": ["first", "second", "bot"],
        "rotate": True,
    },
    "two LoRA roles": {**TWO_ROLES, "lora": {"rank": 2}},
}


@pytest.mark.parametrize("name", list(RESUMABLE))
def test_roster_resume_equals_uninterrupted(tmp_path, name):
    data = RESUMABLE[name]
    players = len(data["seats"])
    over = [
        *TINY,
        "train.iterations=3",
        "train.eval_every=1",
        "train.save_every=0",
        "train.eval_opponents=[random]",
        "rollout.group_size=2",
        "optim.lr_schedule=linear",
        "loss.kl.coef=0.1",
    ]
    if players == 3:  # three-player Kuhn; the magnet needs its own weights
        over += ["game.params={players: 3}", "reference.ema=0.1"]
    cfg = build_config(overrides=over)
    roster = validate_roster(data)
    train_roster(roster, cfg, tmp_path / "whole")
    train_roster(roster, cfg, tmp_path / "split", stop_after=2)
    with (tmp_path / "split" / "metrics.jsonl").open("a") as f:
        f.write(json.dumps({"iteration": 3, "junk": 1}) + "\n")
    train_roster(roster, cfg, tmp_path / "split", resume=True)

    def rows(run):
        lines = (tmp_path / run / "metrics.jsonl").read_text().splitlines()
        return [
            {k: v for k, v in json.loads(x).items() if not k.startswith("perf/")} for x in lines
        ]

    assert [r["iteration"] for r in rows("split")] == [0, 1, 2, 3]
    assert rows("whole") == rows("split")
    for f in ("whole", "split"):
        assert (tmp_path / f / "checkpoints" / "final").is_dir()
    a = sorted((tmp_path / "whole" / "checkpoints" / "final").rglob("*.safetensors"))
    b = sorted((tmp_path / "split" / "checkpoints" / "final").rglob("*.safetensors"))
    assert len(a) == len(b) > 0
    for x, y in zip(a, b, strict=True):
        assert x.read_bytes() == y.read_bytes()


def test_roster_resume_without_state_is_a_clear_error(tmp_path):
    cfg = build_config(overrides=TINY)
    with pytest.raises(FileNotFoundError, match="no saved state"):
        train_roster(validate_roster(TWO_ROLES), cfg, tmp_path / "empty", resume=True)


@pytest.fixture(scope="module")
def roster_run(tmp_path_factory):
    """A finished two-learner roster run, made through the CLI."""
    root = tmp_path_factory.mktemp("roster")
    (root / "roster.yaml").write_text(json.dumps(TWO_ROLES))
    out = root / "run"
    argv = ["train", "--quiet", "--roster", str(root / "roster.yaml"), "--out", str(out)]
    assert main([*argv, *TINY, "train.iterations=1"]) == 0
    return out


def test_a_roster_state_holds_no_pickle(roster_run):
    files = sorted(p.name for p in (roster_run / "state").iterdir())
    assert files == ["roster.json", "roster.safetensors"]
    assert (roster_run / "state" / "roster.json").read_bytes()[:1] == b"{"


def _edit_roster(change):
    def edit(run):
        path = run / "state" / "roster.json"
        doc = json.loads(path.read_text())
        change(doc["tree"])
        path.write_text(json.dumps(doc))

    return edit


def _rename_learner(tree):
    tree["learners"]["third"] = tree["learners"].pop("second")


BAD_ROSTER_STATES = {
    "truncated roster.safetensors": (
        lambda r: (r / "state" / "roster.safetensors").write_bytes(b"\x10\x00"),
        "{r}/state/roster.safetensors is not a valid safetensors file (truncated or corrupt): ",
    ),
    "roster.json lacking a key": (
        _edit_roster(lambda t: t.pop("models")),
        "{r}/state/roster.json is incomplete: it lacks models",
    ),
    "roster.json of other learners": (
        _edit_roster(_rename_learner),
        "{r}/state/roster.json has learners ['first', 'third'] but the roster has "
        "['first', 'second']",
    ),
    "roster.json lacking a learner's optimizer": (
        _edit_roster(lambda t: t["learners"]["second"].pop("optimizer")),
        "{r}/state/roster.json does not fit this run: it has no entry 'optimizer'",
    ),
    "roster.json with weights of another size": (
        _edit_roster(lambda t: t["models"].update(first={})),
        "{r}/state/roster.json does not fit this run's model: it lacks ",
    ),
}


@pytest.mark.parametrize("case", list(BAD_ROSTER_STATES))
def test_roster_resume_from_a_bad_state_is_one_error_line(roster_run, tmp_path, capsys, case):
    corrupt, message = BAD_ROSTER_STATES[case]
    run = tmp_path / "run"
    shutil.copytree(roster_run, run)
    corrupt(run)
    capsys.readouterr()
    assert main(["train", "--quiet", "--resume", str(run), "train.iterations=2"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("coplay train: error: " + message.format(r=run)), err
    assert len(err.splitlines()) == 1
