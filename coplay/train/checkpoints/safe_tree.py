"""Save a nested tree of plain data and tensors without pickle, so loading runs no code.

A tree is built from dicts, lists, tuples, str, int, float, bool, None, torch tensors,
numpy arrays and records (dataclasses and NamedTuples) of a fixed set of types. It is
written as two files::

    NAME.safetensors   every tensor and array, keyed by its path in the tree
    NAME.json          the structure, with references to those keys

Loading reads data only: a record is rebuilt from a registry of allowed types that the
caller passes in (name -> type), never from an import path found in the file, so a run
directory from someone else cannot execute code when it is resumed (``torch.load`` with
pickle can). Python ints of any size, tuples versus lists, and dict keys of any of the
plain types (ints, floats, tuples) come back as they were saved.

In the JSON, str/int/float/bool/None and lists are themselves; everything else is a
one-key object whose key starts with ``$``:

    {"$tuple": [...]}             {"$float": "nan"}        {"$tensor": "optimizer/..."}
    {"$dict": [[key, value]...]}  {"$ndarray": "key"}      {"$record": {"type": "Start",
                                                                        "fields": {...}}}

A dict whose keys are all strings not starting with ``$`` is a plain JSON object.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file

FORMAT = "coplay.safe_tree"
VERSION = 1

Records = Mapping[str, type]
"""Allowed record types by the name written to the file."""


class TreeFileError(ValueError):
    """A tree file that cannot be read back; the message names the file and the fault."""


def records_of(*types: type) -> dict[str, type]:
    """A record registry of ``types`` (dataclasses or NamedTuples), keyed by class name."""
    for t in types:
        if not (dataclasses.is_dataclass(t) or _is_namedtuple(t)):
            raise TypeError(f"{t.__name__} is neither a dataclass nor a NamedTuple")
    return {t.__name__: t for t in types}


def save_tree(tree: Any, folder: Path, name: str, *, records: Records) -> None:
    """Write ``tree`` to ``folder/name.safetensors`` and ``folder/name.json``."""
    enc = _Encoder({t: n for n, t in records.items()})
    doc = {"format": FORMAT, "version": VERSION, "tree": enc.encode(tree, "")}
    save_file(enc.tensors, str(Path(folder) / f"{name}.safetensors"))
    (Path(folder) / f"{name}.json").write_text(json.dumps(doc, allow_nan=False))


def load_tree(folder: Path, name: str, *, records: Records) -> Any:
    """Read back what ``save_tree`` wrote; raises ``TreeFileError`` naming a bad file."""
    json_file = Path(folder) / f"{name}.json"
    doc = _read_json(json_file)
    if not isinstance(doc, dict) or doc.get("format") != FORMAT or "tree" not in doc:
        raise TreeFileError(f"{json_file} is not a {FORMAT} file")
    if doc.get("version") != VERSION:
        raise TreeFileError(f"{json_file} has format version {doc.get('version')!r}, not {VERSION}")
    tensors = read_safetensors(Path(folder) / f"{name}.safetensors")
    return _Decoder(json_file, tensors, records).decode(doc["tree"])


def read_safetensors(path: Path) -> dict[str, torch.Tensor]:
    """All tensors of ``path`` on the CPU; a missing or corrupt file is a user error."""
    if not path.is_file():
        raise FileNotFoundError(f"{path} is missing")
    try:
        return load_file(str(path))
    except (SafetensorError, OSError) as err:
        raise TreeFileError(
            f"{path} is not a valid safetensors file (truncated or corrupt): {err}"
        ) from err


def _read_json(path: Path) -> Any:
    if not path.is_file():
        raise FileNotFoundError(f"{path} is missing")
    try:
        return json.loads(path.read_bytes().decode("utf-8"))
    except ValueError as err:  # JSONDecodeError and UnicodeDecodeError
        raise TreeFileError(f"{path} is not valid JSON: {err}") from err


def _is_namedtuple(t: type) -> bool:
    return isinstance(t, type) and issubclass(t, tuple) and hasattr(t, "_fields")


def _child(path: str, key: Any) -> str:
    """The path of ``key`` under ``path``, e.g. ``optimizer/state/0/exp_avg``."""
    return f"{path}/{key}" if path else str(key)


def _plain_keys(d: Mapping) -> bool:
    return all(isinstance(k, str) and not k.startswith("$") for k in d)


class _Encoder:
    """Turns a tree into JSON-ready data, collecting its tensors under path keys."""

    def __init__(self, record_names: Mapping[type, str]) -> None:
        self.record_names = record_names
        self.tensors: dict[str, torch.Tensor] = {}
        self._views: dict[tuple, str] = {}  # one stored copy per distinct tensor view
        self._storages: set[int] = set()

    def encode(self, x: Any, path: str) -> Any:
        if type(x) in self.record_names:
            return self._record(x, path)
        if x is None or isinstance(x, (bool, int, str)):
            return x
        if isinstance(x, float):
            # float(x): np.float64 is a float whose repr is "np.float64(nan)", which
            # loading (rightly) refuses; a NaN eval metric must not make a state unloadable
            x = float(x)
            return x if math.isfinite(x) else {"$float": repr(x)}
        if isinstance(x, np.generic) and not isinstance(x, np.ndarray):
            return self.encode(x.item(), path)
        if isinstance(x, torch.Tensor):
            return {"$tensor": self._tensor(x, path)}
        if isinstance(x, np.ndarray):
            return {"$ndarray": self._array(x, path)}
        if type(x) is list:
            return [self.encode(v, _child(path, i)) for i, v in enumerate(x)]
        if type(x) is tuple:
            return {"$tuple": [self.encode(v, _child(path, i)) for i, v in enumerate(x)]}
        if isinstance(x, dict):
            return self._dict(x, path)
        raise TypeError(
            f"cannot save {type(x).__name__} at {path or 'the root'}: not plain data, a tensor, an array "
            "or a registered record type"
        )

    def _dict(self, d: dict, path: str) -> Any:
        if _plain_keys(d):
            return {k: self.encode(v, _child(path, k)) for k, v in d.items()}
        return {
            "$dict": [
                [self.encode(k, _child(path, "key")), self.encode(v, _child(path, k))]
                for k, v in d.items()
            ]
        }

    def _record(self, x: Any, path: str) -> Any:
        if _is_namedtuple(type(x)):
            fields = x._asdict()
        else:
            fields = {f.name: getattr(x, f.name) for f in dataclasses.fields(x) if f.init}
        body = {k: self.encode(v, _child(path, k)) for k, v in fields.items()}
        return {"$record": {"type": self.record_names[type(x)], "fields": body}}

    def _tensor(self, t: torch.Tensor, path: str) -> str:
        t = t.detach()
        view = (t.data_ptr(), t.dtype, t.device, tuple(t.shape), t.stride())
        if t.numel() and view in self._views:  # a tied weight: store it once
            return self._views[view]
        storage = t.untyped_storage().data_ptr()
        # safetensors refuses tensors sharing memory; a different view of a storage
        # already stored is written as a copy of its own
        shared = t.numel() > 0 and storage in self._storages
        self._storages.add(storage)
        key = self._key(path)
        self.tensors[key] = (t.clone() if shared else t).contiguous().cpu()
        self._views[view] = key
        return key

    def _array(self, a: np.ndarray, path: str) -> str:
        if a.dtype.kind not in "biuf":
            raise TypeError(f"cannot save the {a.dtype} array at {path}: only numeric arrays")
        key = self._key(path)
        self.tensors[key] = torch.from_numpy(np.array(a, copy=True, order="C"))
        return key

    def _key(self, path: str) -> str:
        path = path or "root"
        key, n = path, 1
        while key in self.tensors:
            key, n = f"{path}#{n}", n + 1
        return key


class _Decoder:
    """Rebuilds a tree from its JSON form; every fault names the JSON file."""

    def __init__(self, file: Path, tensors: Mapping[str, torch.Tensor], records: Records):
        self.file, self.tensors, self.records = file, tensors, records

    def fail(self, what: str) -> TreeFileError:
        return TreeFileError(f"{self.file} {what}")

    def decode(self, x: Any) -> Any:
        if x is None or isinstance(x, (bool, int, float, str)):
            return x
        if isinstance(x, list):
            return [self.decode(v) for v in x]
        if not isinstance(x, dict):
            raise self.fail(f"holds an unexpected {type(x).__name__}")
        tags = [k for k in x if k.startswith("$")]
        if not tags:
            return {k: self.decode(v) for k, v in x.items()}
        if len(x) != 1 or tags[0] not in _TAGS:
            raise self.fail(f"holds an unknown entry {sorted(x)}")
        return _TAGS[tags[0]](self, x[tags[0]])

    def _tuple(self, body: Any) -> tuple:
        return tuple(self.decode(v) for v in self._list(body, "$tuple"))

    def _dict(self, body: Any) -> dict:
        pairs = self._list(body, "$dict")
        if not all(isinstance(p, list) and len(p) == 2 for p in pairs):
            raise self.fail("holds a $dict entry that is not a list of [key, value] pairs")
        try:
            return {self.decode(k): self.decode(v) for k, v in pairs}
        except TypeError as err:  # an unhashable key
            raise self.fail(f"holds a dict key that cannot be one: {err}") from err

    def _float(self, body: Any) -> float:
        if body not in ("nan", "inf", "-inf"):
            raise self.fail(f"holds a $float that is not nan, inf or -inf: {body!r}")
        return float(body)

    def _tensor(self, key: Any) -> torch.Tensor:
        if not isinstance(key, str) or key not in self.tensors:
            raise self.fail(f"refers to a tensor {key!r} that its .safetensors file lacks")
        return self.tensors[key]

    def _ndarray(self, key: Any) -> np.ndarray:
        return self._tensor(key).numpy()

    def _record(self, body: Any) -> Any:
        if not isinstance(body, dict) or not isinstance(body.get("fields"), dict):
            raise self.fail("holds a $record without a type and fields")
        name = body.get("type")
        cls = self.records.get(name) if isinstance(name, str) else None
        if cls is None:
            known = ", ".join(sorted(self.records)) or "none"
            raise self.fail(f"names an unknown record type {name!r} (allowed: {known})")
        fields = {k: self.decode(v) for k, v in body["fields"].items()}
        try:
            return cls(**fields)
        except TypeError as err:
            raise self.fail(f"holds a {name} record with wrong fields: {err}") from err

    def _list(self, body: Any, tag: str) -> list:
        if not isinstance(body, list):
            raise self.fail(f"holds a {tag} entry that is not a list")
        return body


_TAGS = {
    "$tuple": _Decoder._tuple,
    "$dict": _Decoder._dict,
    "$float": _Decoder._float,
    "$tensor": _Decoder._tensor,
    "$ndarray": _Decoder._ndarray,
    "$record": _Decoder._record,
}
