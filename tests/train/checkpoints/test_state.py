"""Run state: no pickle in a run directory, and one error line naming each bad state file.

Resume equals uninterrupted is tested in test_trainer.py (``test_resume_equals_uninterrupted``).
"""

import json
import pickle
import re
import shutil

import pytest
import torch

from coplay.cli import main
from coplay.report.atomic import atomic_dir
from coplay.train.checkpoints.state import StateError, load_weights

TINY = [
    "train.iterations=1",
    "train.eval_every=1",
    "train.eval_episodes=8",
    "train.eval_opponents=[random]",
    "rollout.games_per_iter=8",
    "model.tiny.hidden_size=32",
    "model.tiny.intermediate_size=64",
]


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("state") / "run"
    assert main(["train", "--quiet", "--out", str(out), *TINY]) == 0
    return out


@pytest.fixture
def run(finished_run, tmp_path):
    copy = tmp_path / "run"
    shutil.copytree(finished_run, copy)
    return copy


def _resume(run, *overrides):
    return main(["train", "--quiet", "--resume", str(run), "train.iterations=2", *overrides])


def test_a_state_holds_no_pickle(finished_run):
    state = finished_run / "state"
    files = sorted(p.relative_to(state).as_posix() for p in state.rglob("*") if p.is_file())
    assert "trainer.json" in files and "trainer.safetensors" in files
    assert "policy/model.safetensors" in files and "policy/config.json" in files
    assert {p.rsplit(".", 1)[-1] for p in files} == {"json", "safetensors"}
    for path in state.rglob("*"):
        if path.is_file():  # pickles start with PROTO 0x80, torch.save's zip with PK
            assert path.read_bytes()[:2] not in (b"PK",) and path.read_bytes()[:1] != b"\x80"


def test_resume_needs_no_pickle(run, monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("a state was unpickled")

    for name in ("load", "loads", "Unpickler"):
        monkeypatch.setattr(pickle, name, refuse)
    monkeypatch.setattr(torch, "load", refuse)
    assert _resume(run) == 0
    rows = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["iteration"] for r in rows] == [0, 1, 2]


def test_a_state_is_swapped_in_whole(tmp_path):
    (tmp_path / "state").mkdir()
    (tmp_path / "state" / "old.json").write_text("{}")
    with atomic_dir(tmp_path / "state") as tmp:
        (tmp / "new.json").write_text("{}")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["state"]
    assert [p.name for p in (tmp_path / "state").iterdir()] == ["new.json"]


def _edit_json(change):
    def edit(run):
        path = run / "state" / "trainer.json"
        doc = json.loads(path.read_text())
        change(doc["tree"])
        path.write_text(json.dumps(doc))

    return edit


def _half(path):
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


def _legacy(run):
    (run / "state" / "trainer.json").unlink()
    (run / "state" / "trainer.pt").write_bytes(pickle.dumps({"iteration": 1}))


UNKNOWN = {"$record": {"type": "os.system", "fields": {"command": "echo hi"}}}

BAD_STATES = {
    "no state folder": (
        lambda r: shutil.rmtree(r / "state"),
        "{r} has no saved state to resume from ({r}/state/trainer.json missing)",
    ),
    "only a pickled trainer.pt": (
        _legacy,
        "{r} has no saved state to resume from ({r}/state/trainer.json missing; trainer.pt is "
        "an older pickled state, which is not loaded as it could run code)",
    ),
    "no trainer.safetensors": (
        lambda r: (r / "state" / "trainer.safetensors").unlink(),
        "{r}/state/trainer.safetensors is missing",
    ),
    "empty trainer.safetensors": (
        lambda r: (r / "state" / "trainer.safetensors").write_bytes(b""),
        "{r}/state/trainer.safetensors is not a valid safetensors file (truncated or corrupt): ",
    ),
    "truncated trainer.safetensors": (
        lambda r: _half(r / "state" / "trainer.safetensors"),
        "{r}/state/trainer.safetensors is not a valid safetensors file (truncated or corrupt): ",
    ),
    "garbage trainer.json": (
        lambda r: (r / "state" / "trainer.json").write_bytes(b"\x80\x04garbage"),
        "{r}/state/trainer.json is not valid JSON: ",
    ),
    "trainer.json lacking a key": (
        _edit_json(lambda t: t.pop("optimizer")),
        "{r}/state/trainer.json is incomplete: it lacks optimizer",
    ),
    "trainer.json naming an unknown record": (
        _edit_json(lambda t: t.update(adv_state=UNKNOWN)),
        "{r}/state/trainer.json names an unknown record type 'os.system' "
        "(allowed: Decision, EmptyState, Sample, Start)",
    ),
    "trainer.json with a value of the wrong kind": (
        _edit_json(lambda t: t.update(torch_rng=5)),
        "{r}/state/trainer.json does not fit this run: ",
    ),
    "truncated policy weights": (
        lambda r: _half(r / "state" / "policy" / "model.safetensors"),
        "{r}/state/policy/model.safetensors is not a valid safetensors file "
        "(truncated or corrupt): ",
    ),
    "garbage policy config.json": (
        lambda r: (r / "state" / "policy" / "config.json").write_text("not json"),
        "{r}/state/policy/config.json is not valid JSON: ",
    ),
}


@pytest.mark.parametrize("case", list(BAD_STATES))
def test_resume_from_a_bad_state_is_one_error_line(run, capsys, case):
    corrupt, message = BAD_STATES[case]
    corrupt(run)
    capsys.readouterr()
    assert _resume(run) == 2
    err = capsys.readouterr().err
    assert err.startswith("coplay train: error: " + message.format(r=run)), err
    assert len(err.splitlines()) == 1


def test_resume_that_changes_the_model_size_is_refused_before_loading(run, capsys):
    capsys.readouterr()
    before = (run / "config.yaml").read_bytes()
    assert _resume(run, "model.tiny.hidden_size=64") == 2
    err = capsys.readouterr().err
    assert err.startswith("coplay train: error: ") and "model.tiny.hidden_size" in err
    assert len(err.splitlines()) == 1
    assert (run / "config.yaml").read_bytes() == before


def test_state_of_another_model_size_than_its_config_is_one_error_line(run, capsys):
    # config.yaml edited by hand: the saved config and the weights disagree
    config = run / "config.yaml"
    config.write_text(config.read_text().replace("hidden_size: 32", "hidden_size: 64"))
    capsys.readouterr()
    assert _resume(run) == 2
    err = capsys.readouterr().err
    head = f"coplay train: error: {run}/state/policy does not fit this run's model"
    tail = r"model.embed_tokens.weight is \[(\d+), 32\] there but \[\1, 64\] here \(21 tensors"
    assert re.fullmatch(re.escape(head + " (another model size?): ") + tail + r" differ\)\n", err)
    assert len(err.splitlines()) == 1


def test_load_weights_names_missing_and_extra_tensors(tmp_path):
    model = torch.nn.Linear(2, 2)
    weights = {"weight": torch.zeros(2, 2), "scale": torch.ones(1)}
    with pytest.raises(StateError) as err:
        load_weights(model, weights, tmp_path / "w.json")
    assert str(err.value) == (
        f"{tmp_path / 'w.json'} does not fit this run's model: it lacks bias; "
        "it has scale, which the model has not"
    )
    load_weights(model, {"weight": torch.zeros(2, 2), "bias": torch.ones(2)}, tmp_path)
    assert model.bias.tolist() == [1.0, 1.0]
