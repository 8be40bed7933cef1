"""Run state: saved by walking the run's parts; no pickle in a run directory; one error
line naming each bad state file; a resumed roster equals an uninterrupted one.

Resume equals uninterrupted for a single learner is tested with the loop
(tests/train/test_loop.py), for leagues and PSRO with their drivers.
"""

import json
import pickle
import re
import shutil
import warnings

import pytest
import torch

from coplay.cli import main
from coplay.report.atomic import atomic_dir
from coplay.train.checkpoints.safe_tree import save_tree
from coplay.train.checkpoints.state import (
    RUN_KEYS,
    RUN_STATE,
    StateError,
    load_state,
    load_weights,
    read_state,
    save_state,
    state_records,
)
from coplay.train.hooks import Hook
from coplay.train.loop import run_loop
from coplay.train.roster import train_roster, validate_roster
from coplay.train.settings import build_config
from coplay.train.trainer import setup
from tests.train.rosters import TINY as ROSTER_TINY
from tests.train.rosters import TWO_ROLES

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


def test_a_resume_trains_at_the_lr_its_config_records(run):
    # The optimizer and schedule restored the saved lr: a run resumed with optim.lr=0.01
    # logged the old one while its config.yaml named the new.
    assert _resume(run, "optim.lr=0.01") == 0
    rows = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    assert rows[-1]["iteration"] == 2
    # kuhn-selfplay's linear decay to a tenth, over the 2 iterations the run now has
    # (the 1-iteration run it continues had already decayed: its lr was 0.0005 / 10).
    assert rows[-1]["loss/lr"] == pytest.approx(0.01 * 0.1)


def test_a_state_holds_no_pickle(finished_run):
    state = finished_run / "state"
    files = sorted(p.relative_to(state).as_posix() for p in state.rglob("*") if p.is_file())
    assert files == ["run.json", "run.safetensors"]
    tree = json.loads((state / "run.json").read_text())["tree"]
    assert sorted(tree) == [
        "ahead",
        "eval_samplers",
        "hooks",
        "iteration",
        "models",
        "planning",
        "played_ahead",
        "rngs",
        "samplers",
        "tokenizers",
        "trainees",
    ]
    assert {p.rsplit(".", 1)[-1] for p in files} == {"json", "safetensors"}
    for path in state.rglob("*"):
        if path.is_file():  # pickles start with PROTO 0x80, torch.save's zip with PK
            assert path.read_bytes()[:2] not in (b"PK",) and path.read_bytes()[:1] != b"\x80"


def _rows(run):
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    return [{k: v for k, v in r.items() if not k.startswith("perf/")} for r in rows]


def test_a_training_bot_and_an_evaluation_opponent_of_one_name_both_resume(tmp_path):
    # The opponent in training and the evaluation opponent are both "random": each
    # keeps its own generator, so the resumed run evaluates as the whole one does.
    args = [*TINY, "train.opponent=random", "train.save_every=1", "train.eval_episodes=20"]
    whole, part = tmp_path / "whole", tmp_path / "part"
    assert main(["train", "--quiet", "--out", str(whole), *args, "train.iterations=2"]) == 0
    assert main(["train", "--quiet", "--out", str(part), *args]) == 0
    assert main(["train", "--quiet", "--resume", str(part), "train.iterations=2"]) == 0
    assert _rows(part) == _rows(whole)


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
        path = run / "state" / "run.json"
        doc = json.loads(path.read_text())
        change(doc["tree"])
        path.write_text(json.dumps(doc))

    return edit


def _half(path):
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


def _legacy(run):
    (run / "state" / "run.json").unlink()
    (run / "state" / "run.pt").write_bytes(pickle.dumps({"iteration": 1}))


UNKNOWN = {"$record": {"type": "os.system", "fields": {"command": "echo hi"}}}

BAD_STATES = {
    "no state folder": (
        lambda r: shutil.rmtree(r / "state"),
        "{r} has no saved state to resume from ({r}/state/run.json missing; it stopped "
        "before its first save: start it again with --out {r} --force)",
    ),
    "only a pickled run.pt": (
        _legacy,
        "{r} has no saved state to resume from ({r}/state/run.json missing; run.pt is "
        "an older pickled state, which is not loaded as it could run code)",
    ),
    "no run.safetensors": (
        lambda r: (r / "state" / "run.safetensors").unlink(),
        "{r}/state/run.safetensors is missing",
    ),
    "empty run.safetensors": (
        lambda r: (r / "state" / "run.safetensors").write_bytes(b""),
        "{r}/state/run.safetensors is not a valid safetensors file (truncated or corrupt): ",
    ),
    "truncated run.safetensors": (
        lambda r: _half(r / "state" / "run.safetensors"),
        "{r}/state/run.safetensors is not a valid safetensors file (truncated or corrupt): ",
    ),
    "garbage run.json": (
        lambda r: (r / "state" / "run.json").write_bytes(b"\x80\x04garbage"),
        "{r}/state/run.json is not valid JSON: ",
    ),
    "run.json lacking a key": (
        _edit_json(lambda t: t.pop("trainees")),
        "{r}/state/run.json is incomplete: it lacks trainees",
    ),
    "run.json lacking a learner's optimizer": (
        _edit_json(lambda t: t["trainees"]["learner"].pop("optimizer")),
        "{r}/state/run.json does not fit this run: it has no entry 'optimizer'",
    ),
    "run.json naming an unknown record": (
        _edit_json(lambda t: t["trainees"]["learner"].update(adv_state=UNKNOWN)),
        "{r}/state/run.json names an unknown record type 'os.system' "
        "(allowed: Decision, EmptyState, Episode, Observation, Opening, Plan, Played, "
        "RestartState, Sample, Start, Trajectory, Turn)",
    ),
    "run.json with a value of the wrong kind": (
        _edit_json(lambda t: t["rngs"].update(torch=5)),
        "{r}/state/run.json does not fit this run: ",
    ),
    "run.json with a CUDA generator state of the wrong kind": (
        _edit_json(lambda t: t["rngs"].update(cuda=[5])),
        "{r}/state/run.json: rngs.cuda is not a list of CUDA generator states",
    ),
    "run.json of other learners": (
        _edit_json(lambda t: t["trainees"].update(other=t["trainees"].pop("learner"))),
        "{r}/state/run.json has learners ['other'] but the run has ['learner']",
    ),
    "run.json with weights of another model": (
        _edit_json(lambda t: t["models"].update(learner={})),
        "{r}/state/run.json does not fit this run's model: it lacks ",
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


def test_a_state_of_another_tokenizer_is_refused_not_resumed(run, capsys):
    # The tiny model's tokenizer is trained again from the game's text on resume: where
    # that text (or the library) changed, the saved weights would read other words.
    state = run / "state" / "run.json"
    saved = json.loads(state.read_text())
    prints = saved["tree"]["tokenizers"]
    assert prints  # a fingerprint per learner
    saved["tree"]["tokenizers"] = {name: "0" * 64 for name in prints}
    state.write_text(json.dumps(saved))
    capsys.readouterr()
    assert _resume(run) == 2
    err = capsys.readouterr().err
    assert "tokenizer, built again for this run, is not the one" in err
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
    head = f"coplay train: error: {run}/state/run.json does not fit this run's model"
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


# --- the CUDA generators ------------------------------------------------------------------
# No GPU where the tests usually run: torch.cuda answers as a machine with some would.


def _cuda_states(devices):
    """Generator states of ``devices`` CUDA devices: seed ``i + 1``, offset 0 (valid ones)."""
    return [torch.tensor([i + 1, *[0] * 15], dtype=torch.uint8) for i in range(devices)]


def _fake_cuda(monkeypatch, devices, initialised=True):
    """torch.cuda as a machine with ``devices`` GPUs answers; returns the states set."""
    restored = []
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: initialised)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: devices)
    monkeypatch.setattr(torch.cuda, "get_rng_state_all", lambda: _cuda_states(devices))
    monkeypatch.setattr(torch.cuda, "set_rng_state_all", restored.extend)
    return restored


def _resumed_run(run):
    return setup(build_config(file=run / "config.yaml"), run, fresh=False)


def test_a_state_keeps_every_cuda_generator_and_a_resume_sets_them(run, monkeypatch):
    saving = _resumed_run(run)
    with monkeypatch.context() as m:
        _fake_cuda(m, devices=2)
        save_state(saving, [], 1)
    saved = read_state(run, RUN_STATE, RUN_KEYS)["rngs"]["cuda"]
    assert [s.tolist() for s in saved] == [s.tolist() for s in _cuda_states(2)]
    resumed = _resumed_run(run)
    restored = _fake_cuda(monkeypatch, devices=2)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert load_state(resumed, []) == 1
    assert [s.tolist() for s in restored] == [s.tolist() for s in _cuda_states(2)]


def test_a_state_saved_before_cuda_started_keeps_no_cuda_generator(run, monkeypatch):
    saving = _resumed_run(run)
    _fake_cuda(monkeypatch, devices=1, initialised=False)
    save_state(saving, [], 1)  # asking for the states would have initialised CUDA
    assert read_state(run, RUN_STATE, RUN_KEYS)["rngs"]["cuda"] == []


def _save_cuda_states(run, states):
    """Rewrite the run's state with ``states`` as its CUDA generators (None: without the
    entry, as states were written before they were kept)."""
    tree = read_state(run, RUN_STATE, RUN_KEYS)
    tree["rngs"].pop("cuda", None)
    if states is not None:
        tree["rngs"]["cuda"] = states
    save_tree(tree, run / "state", RUN_STATE, records=state_records())


@pytest.mark.parametrize("states", [None, []], ids=["before they were kept", "saved without"])
def test_a_state_without_cuda_generators_resumes_on_a_gpu_as_seeded(run, monkeypatch, states):
    _save_cuda_states(run, states)
    resumed = _resumed_run(run)
    restored = _fake_cuda(monkeypatch, devices=1)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert load_state(resumed, []) == 1
    assert restored == []


@pytest.mark.parametrize(("saved", "here"), [(2, 1), (1, 2), (1, 0)])
def test_another_count_of_cuda_devices_restores_those_that_match_with_a_warning(
    run, monkeypatch, saved, here
):
    _save_cuda_states(run, _cuda_states(saved))
    resumed = _resumed_run(run)
    restored = _fake_cuda(monkeypatch, devices=here)
    with pytest.warns(UserWarning) as caught:
        load_state(resumed, [])
    assert [str(w.message) for w in caught] == [
        f"{run}/state/run.json holds the generator states of {saved} CUDA device(s) but "
        f"this machine has {here}: restored the first {min(saved, here)}, any other device "
        "draws as seeded"
    ]
    assert [s.tolist() for s in restored] == [s.tolist() for s in _cuda_states(min(saved, here))]


def test_a_resume_on_other_cuda_devices_says_so_in_one_line(run, capsys):
    _save_cuda_states(run, _cuda_states(9))  # more devices than any machine the tests run on
    capsys.readouterr()
    assert _resume(run) == 0
    err = capsys.readouterr().err
    assert err.startswith(f"coplay train: warning: {run}/state/run.json holds the generator")
    assert "states of 9 CUDA device(s) but this machine has" in err and err.count("\n") == 1


def test_a_state_written_before_cuda_generators_were_kept_resumes(run, capsys):
    _save_cuda_states(run, None)
    capsys.readouterr()
    assert _resume(run) == 0
    assert capsys.readouterr().err == ""


class DrawOnDevice(Hook):
    """Draws from the CUDA generator after each iteration, as dropout in the model would."""

    def after(self, run, it, batch, metrics):
        torch.rand(16, device="cuda")
        return {}


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_a_resume_on_a_gpu_draws_from_cuda_as_the_uninterrupted_run(tmp_path):
    cfg = build_config(overrides=[*TINY, "model.device=cuda", "train.iterations=2"])
    run = setup(cfg, tmp_path / "run")
    run_loop(run, [DrawOnDevice()], start=0, end=1)
    save_state(run, [], 1)
    uninterrupted = torch.rand(64, device="cuda")
    resumed = setup(cfg, tmp_path / "run", fresh=False)  # seeds every generator again
    assert load_state(resumed, []) == 1
    assert torch.equal(torch.rand(64, device="cuda"), uninterrupted)


# --- rosters: several learners, one state ------------------------------------------------

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
    "two learners with restarts and a critic": {
        "policies": {
            "first": {"kind": "learner", "algo": {"estimator": "gae"}},
            "second": {"kind": "learner"},
        },
        "seats": ["first", "second"],
    },
}


@pytest.mark.parametrize("name", list(RESUMABLE))
def test_roster_resume_equals_uninterrupted(tmp_path, name):
    data = RESUMABLE[name]
    players = len(data["seats"])
    over = [
        *ROSTER_TINY,
        "train.iterations=3",
        "train.eval_every=1",
        "train.save_every=0",
        "train.eval_opponents=[random]",
        "rollout.group_size=2",
        "optim.lr_schedule=linear",
        "loss.kl.coef=0.1",
    ]
    if players == 3:  # three-player Kuhn; the magnet needs its own weights
        over += ["game.params={players: 3}", "magnet.ema=0.1"]
    if "restarts" in name:
        over += ["rollout.restarts={share: 0.5}", "rollout.explore={share: 0.1}"]
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
    if "restarts" in name:
        assert rows("whole")[3]["rollout/restart_groups"] > 0
    a = sorted((tmp_path / "whole" / "checkpoints" / "final").rglob("*.safetensors"))
    b = sorted((tmp_path / "split" / "checkpoints" / "final").rglob("*.safetensors"))
    assert len(a) == len(b) > 0
    for x, y in zip(a, b, strict=True):
        assert x.read_bytes() == y.read_bytes()


def test_roster_resume_without_state_is_a_clear_error(tmp_path):
    cfg = build_config(overrides=ROSTER_TINY)
    with pytest.raises(FileNotFoundError, match="no saved state"):
        train_roster(validate_roster(TWO_ROLES), cfg, tmp_path / "empty", resume=True)


def test_a_roster_state_holds_each_learner_once(tmp_path):
    root = tmp_path
    (root / "roster.yaml").write_text(json.dumps(TWO_ROLES))
    out = root / "run"
    argv = ["train", "--quiet", "--roster", str(root / "roster.yaml"), "--out", str(out)]
    assert main([*argv, *ROSTER_TINY, "train.iterations=1"]) == 0
    assert sorted(p.name for p in (out / "state").iterdir()) == ["run.json", "run.safetensors"]
    tree = json.loads((out / "state" / "run.json").read_text())["tree"]
    assert sorted(tree["trainees"]) == sorted(tree["models"]) == ["first", "second"]
    path = out / "state" / "run.json"
    doc = json.loads(path.read_text())
    doc["tree"]["trainees"]["third"] = doc["tree"]["trainees"].pop("second")
    path.write_text(json.dumps(doc))
    assert main(["train", "--quiet", "--resume", str(out), "train.iterations=2"]) == 2
