"""Roster state: a resumed roster run equals an uninterrupted one."""

import json

import pytest

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
        "loss.kl_coef=0.1",
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
    with pytest.raises(FileNotFoundError, match="no saved roster state"):
        train_roster(validate_roster(TWO_ROLES), cfg, tmp_path / "empty", resume=True)
