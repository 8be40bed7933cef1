"""safe_tree: nested plain data and tensors round-trip through JSON + safetensors, no pickle."""

import json
import math
import pickle
from collections import OrderedDict
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
import pytest
import torch

from coplay.train.checkpoints.safe_tree import TreeFileError, load_tree, records_of, save_tree


@dataclass(frozen=True)
class Point:
    x: int
    label: str
    tags: tuple[str, ...] = ()


class Pair(NamedTuple):
    left: float
    right: tuple[int, ...]


class Empty(NamedTuple):
    pass


RECORDS = records_of(Point, Pair, Empty)


def _tree():
    return {
        "big": [2**127 + 3, -(2**200), 0, -1],
        "floats": [0.1, -0.0, 1e-310, 1.0, math.inf, -math.inf],
        "flags": (True, False, None, 1, 0),
        "nested": ((1, (2, [3, (4,)])), [], (), {}),
        "keys": {1: "int", 2.5: "float", (1, "a"): "tuple", "$odd": "dollar", "": "empty"},
        "records": [Point(3, "p", ("a", "b")), Pair(0.5, (1, 2)), Empty()],
        "record keys": {Point(1, "k"): 1},
        "tensors": {
            "scalar": torch.tensor(2.5),
            "empty": torch.zeros(0, 3),
            "bf16": torch.arange(6, dtype=torch.bfloat16).reshape(2, 3),
            "int64": torch.tensor([2**62, -5]),
            "uint8": torch.tensor([0, 255], dtype=torch.uint8),
            "bool": torch.tensor([True, False]),
            "strided": torch.arange(12.0).reshape(3, 4).t(),
        },
        "arrays": [np.arange(5, dtype=np.int32), np.eye(2), np.array([2**40], dtype=np.uint64)],
        "ordered": OrderedDict([("b", 1), ("a", 2)]),
    }


def _same(a, b):
    """Equal values of exactly the same types, all the way down."""
    assert type(a) is type(b), (a, b)
    if isinstance(a, torch.Tensor):
        assert (a.dtype, a.shape) == (b.dtype, b.shape) and torch.equal(a, b)
    elif isinstance(a, np.ndarray):
        assert a.dtype == b.dtype and np.array_equal(a, b)
    elif isinstance(a, dict):
        assert list(a) == list(b)
        for k in a:
            assert type(k) is type(next(x for x in b if x == k))
            _same(a[k], b[k])
    elif isinstance(a, (list, tuple)) and not hasattr(a, "_fields"):
        assert len(a) == len(b)
        for x, y in zip(a, b, strict=True):
            _same(x, y)
    elif isinstance(a, float):
        assert a == b and math.copysign(1, a) == math.copysign(1, b)
    else:
        assert a == b


def test_a_tree_comes_back_with_exact_values_and_types(tmp_path):
    tree = _tree()
    save_tree(tree, tmp_path, "t", records=RECORDS)
    back = load_tree(tmp_path, "t", records=RECORDS)
    expected = {**tree, "ordered": {"b": 1, "a": 2}}  # any mapping comes back a dict
    _same(expected, back)
    assert back["records"][0].tags == ("a", "b") and isinstance(back["records"][1], Pair)


def test_nan_comes_back(tmp_path):
    save_tree({"v": math.nan}, tmp_path, "t", records={})
    assert math.isnan(load_tree(tmp_path, "t", records={})["v"])


def test_numpy_nan_and_inf_come_back(tmp_path):
    # np.float64 is a float subclass: its NaN was written as "np.float64(nan)", a
    # state that loading refused, so a run whose eval metric was NaN could not resume.
    tree = {"nan": np.float64("nan"), "inf": np.float64("-inf"), "x": np.float64(0.5)}
    save_tree(tree, tmp_path, "t", records={})
    back = load_tree(tmp_path, "t", records={})
    assert math.isnan(back["nan"]) and back["inf"] == -math.inf and back["x"] == 0.5


def test_only_json_and_safetensors_are_written(tmp_path):
    save_tree(_tree(), tmp_path, "t", records=RECORDS)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t.json", "t.safetensors"]
    json.loads((tmp_path / "t.json").read_text())  # strict JSON: no NaN or Infinity
    assert "NaN" not in (tmp_path / "t.json").read_text()


def test_loading_needs_no_pickle(tmp_path, monkeypatch):
    save_tree(_tree(), tmp_path, "t", records=RECORDS)

    def refuse(*args, **kwargs):
        raise AssertionError("pickle used")

    for name in ("load", "loads", "Unpickler"):
        monkeypatch.setattr(pickle, name, refuse)
    monkeypatch.setattr(torch, "load", refuse)
    assert load_tree(tmp_path, "t", records=RECORDS)["big"][1] == -(2**200)


def test_tied_and_overlapping_tensors_are_saved(tmp_path):
    w = torch.randn(4, 4)
    tree = {"a": w, "tied": w.detach(), "row": w[1], "col": w[:, 2]}
    save_tree(tree, tmp_path, "t", records={})
    back = load_tree(tmp_path, "t", records={})
    for k, v in tree.items():
        assert torch.equal(back[k], v), k


def test_an_optimizer_and_schedule_resume_exactly(tmp_path):
    def make():
        torch.manual_seed(0)
        model = torch.nn.Linear(3, 2)
        opt = torch.optim.AdamW(model.parameters(), lr=0.1)
        sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda i: 1 - i / 10)
        return model, opt, sched

    def step(model, opt, sched):
        model(torch.ones(3)).square().sum().backward()
        opt.step()
        opt.zero_grad()
        sched.step()

    model, opt, sched = make()
    for _ in range(3):
        step(model, opt, sched)
    saved = {"model": model.state_dict(), "opt": opt.state_dict(), "sched": sched.state_dict()}
    save_tree(saved, tmp_path, "t", records={})
    step(model, opt, sched)

    m2, o2, s2 = make()
    back = load_tree(tmp_path, "t", records={})
    m2.load_state_dict(back["model"])
    o2.load_state_dict(back["opt"])
    s2.load_state_dict(back["sched"])
    step(m2, o2, s2)
    assert torch.equal(m2.weight, model.weight) and s2.get_last_lr() == sched.get_last_lr()


def test_generator_states_round_trip(tmp_path):
    rng, gen = np.random.default_rng(7), torch.Generator().manual_seed(7)
    rng.random(3), torch.rand(3, generator=gen)
    tree = {"np": rng.bit_generator.state, "torch": gen.get_state(), "cpu": torch.get_rng_state()}
    save_tree(tree, tmp_path, "t", records={})
    back = load_tree(tmp_path, "t", records={})
    rng2, gen2 = np.random.default_rng(), torch.Generator()
    rng2.bit_generator.state, _ = back["np"], gen2.set_state(back["torch"])
    assert rng2.random() == rng.random()
    assert torch.equal(torch.rand(2, generator=gen2), torch.rand(2, generator=gen))


def test_an_unregistered_type_is_refused_on_save(tmp_path):
    with pytest.raises(TypeError, match="cannot save Point at records/0: .* registered record"):
        save_tree({"records": [Point(1, "a")]}, tmp_path, "t", records={})
    with pytest.raises(TypeError, match="cannot save Pair at the root"):
        save_tree(Pair(1.0, ()), tmp_path, "t", records=records_of(Point))


def test_an_unknown_record_type_is_refused_on_load(tmp_path):
    save_tree([Point(1, "a")], tmp_path, "t", records=RECORDS)
    doc = json.loads((tmp_path / "t.json").read_text())
    doc["tree"][0]["$record"]["type"] = "os.system"
    (tmp_path / "t.json").write_text(json.dumps(doc))
    with pytest.raises(TreeFileError) as err:
        load_tree(tmp_path, "t", records=RECORDS)
    assert str(err.value) == (
        f"{tmp_path / 't.json'} names an unknown record type 'os.system' "
        "(allowed: Empty, Pair, Point)"
    )


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda d: {**d, "tree": {"$tensor": "nope"}}, "refers to a tensor 'nope' that its"),
        (lambda d: {**d, "tree": {"$eval": "1"}}, "holds an unknown entry ['$eval']"),
        (lambda d: {**d, "tree": {"$dict": [[1]]}}, "not a list of [key, value] pairs"),
        (lambda d: {**d, "tree": {"$dict": [[[1], 2]]}}, "holds a dict key that cannot be one"),
        (lambda d: {**d, "version": 99}, "has format version 99, not 1"),
        (lambda d: [1], "is not a coplay.safe_tree file"),
        (
            lambda d: {**d, "tree": {"$record": {"type": "Point", "fields": {"y": 1}}}},
            "holds a Point record with wrong fields",
        ),
    ],
)
def test_a_malformed_json_is_one_error_naming_the_file(tmp_path, edit, message):
    save_tree({"w": torch.ones(2)}, tmp_path, "t", records=RECORDS)
    doc = json.loads((tmp_path / "t.json").read_text())
    (tmp_path / "t.json").write_text(json.dumps(edit(doc)))
    with pytest.raises(TreeFileError) as err:
        load_tree(tmp_path, "t", records=RECORDS)
    assert str(err.value).startswith(str(tmp_path / "t.json")) and message in str(err.value)


@pytest.mark.parametrize(
    ("name", "corrupt", "message"),
    [
        ("t.json", lambda b: b"{not json", "t.json is not valid JSON: Expecting property name"),
        ("t.json", lambda b: b"\xff\xfe", "t.json is not valid JSON: 'utf-8' codec"),
        ("t.safetensors", lambda b: b"", "t.safetensors is not a valid safetensors file"),
        ("t.safetensors", lambda b: b[: len(b) // 2], "(truncated or corrupt)"),
        ("t.safetensors", lambda b: b"garbage!" * 64, "(truncated or corrupt)"),
    ],
)
def test_a_corrupt_file_is_one_error_naming_it(tmp_path, name, corrupt, message):
    save_tree({"w": torch.ones(64)}, tmp_path, "t", records={})
    path = tmp_path / name
    path.write_bytes(corrupt(path.read_bytes()))
    with pytest.raises(TreeFileError, match="^" + str(tmp_path)) as err:
        load_tree(tmp_path, "t", records={})
    assert message in str(err.value)


@pytest.mark.parametrize("name", ["t.json", "t.safetensors"])
def test_a_missing_file_names_it(tmp_path, name):
    save_tree({"w": torch.ones(2)}, tmp_path, "t", records={})
    (tmp_path / name).unlink()
    with pytest.raises(FileNotFoundError, match=f"{tmp_path / name} is missing"):
        load_tree(tmp_path, "t", records={})


def test_records_of_accepts_only_records():
    with pytest.raises(TypeError, match="dict is neither a dataclass nor a NamedTuple"):
        records_of(dict)
