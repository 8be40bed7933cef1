"""A run's settings as text: presets, YAML files and dotted overrides.

``build_config`` merges a bundled preset (``coplay/presets/*.yaml``), a YAML file and
``key=value`` overrides, in that order, and validates them into a ``RunConfig``
(``coplay.train.config``): one error line per problem, and a warning naming a setting
given that the run would not use. ``to_yaml`` and ``describe`` write a config back.
"""

from __future__ import annotations

import warnings
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from coplay.train.config import ConfigError, GameConfig, RunConfig
from coplay.train.config_errors import (
    format_validation_error,
    refuse_bool_numbers,
    refuse_huge_numbers,
)

DEFAULT_PRESET = "kuhn-selfplay"
"""The preset of a run that names neither a preset nor a config file."""


def base_preset(preset: str | None, file: str | Path | None) -> str | None:
    """The preset a run starts from: the one named (an unknown name, the empty one too,
    is a ConfigError listing the presets); else, with a config file, none (the file
    goes over the built-in defaults); else ``DEFAULT_PRESET``."""
    if preset is not None:
        _check_preset(preset)
        return preset
    return None if file else DEFAULT_PRESET


def preset_names() -> list[str]:
    """Names of the bundled presets."""
    files = resources.files("coplay.presets").iterdir()
    return sorted(f.name.removesuffix(".yaml") for f in files if f.name.endswith(".yaml"))


@dataclass(frozen=True)
class PresetInfo:
    """A bundled preset as ``coplay presets`` lists it."""

    name: str
    game: str
    purpose: str
    """The first line of the preset's header comment."""


def preset_info(name: str) -> PresetInfo:
    """Name, game and one-line purpose of a bundled preset."""
    text = _preset_text(name)
    first = text.splitlines()[0] if text else ""
    purpose = first.removeprefix("#").strip() if first.startswith("#") else ""
    game = ((yaml.safe_load(text) or {}).get("game") or {}).get("name", GameConfig().name)
    return PresetInfo(name, game, purpose)


def _check_preset(name: str) -> None:
    if name not in preset_names():
        raise ConfigError(f"unknown preset {name!r}; presets: {', '.join(preset_names())}")


def _preset_text(name: str) -> str:
    _check_preset(name)
    return resources.files("coplay.presets").joinpath(f"{name}.yaml").read_text()


def load_preset(name: str) -> dict[str, Any]:
    """The raw mapping of a bundled preset."""
    return yaml.safe_load(_preset_text(name)) or {}


def load_yaml(
    path: str | Path, what: str = "config file", *, empty_ok: bool = True
) -> dict[str, Any]:
    """A YAML mapping from a file, with a clear error if it is not one (``what`` names
    the file's kind in it). A file a run saved is never empty (``empty_ok=False``): read
    as no settings, an emptied one resumed the run with the defaults."""
    path = Path(path)
    if path.is_dir():
        raise ConfigError(f"{what} {path} is a directory, not a YAML file")
    if not path.exists():
        raise ConfigError(f"{what} {path} does not exist")
    # A pipe too: ``--config <(...)`` names one. Not a device, which may never end.
    if not (path.is_file() or path.is_fifo()):
        raise ConfigError(f"{what} {path} is not a file")
    try:
        data = yaml.load(path.read_text(encoding="utf-8"), Loader=_UniqueKeys)  # noqa: S506
    except yaml.YAMLError as err:
        raise ConfigError(f"{what} {path} is not valid YAML: {err}".splitlines()[0]) from err
    except UnicodeDecodeError as err:
        raise ConfigError(f"{what} {path} is not UTF-8 text ({err.reason})") from None
    if data is None and not empty_ok:
        raise ConfigError(f"{what} {path} is empty: the settings the run saved there are lost")
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"{what} {path} must hold a mapping, not {type(data).__name__}")
    return data


MERGE_TAG = "tag:yaml.org,2002:merge"
"""The tag of YAML's merge key (``<<: *anchor``)."""


class _UniqueKeys(yaml.SafeLoader):
    """PyYAML's safe loader, refusing a key given twice in one mapping: the plain loader
    keeps the last, so a second ``train:`` block would drop the first without a word.
    Merge keys (``<<: *defaults``) work as in the plain loader: a merged key is a
    default that a key of the mapping's own may override."""

    def __init__(self, stream) -> None:
        super().__init__(stream)
        self._checked: set[int] = set()

    def flatten_mapping(self, node) -> None:
        # Every mapping, a merge's source too, is flattened before it is built, and
        # flattening mixes the merged keys in with its own: check its own keys first,
        # once (a source merged twice is flattened again).
        if id(node) not in self._checked:
            self._checked.add(id(node))
            keys = set()
            for key_node, _ in node.value:
                if key_node.tag == MERGE_TAG:
                    continue
                key = self.construct_object(key_node)
                if not isinstance(key, Hashable):
                    continue  # the loader itself names a key that cannot be one
                if key in keys:
                    raise yaml.constructor.ConstructorError(
                        None, None, f"found the key {key!r} twice", key_node.start_mark
                    )
                keys.add(key)
        super().flatten_mapping(node)


def merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    """Deep merge of mappings; ``over`` wins."""
    out = dict(base)
    for k, v in over.items():
        out[k] = merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


YAML_OPENERS = ("[", "{", '"', "'")
"""How a YAML list, mapping or quoted text starts: an override value that starts so is
meant as YAML, and one that does not parse is refused rather than taken as text."""


def split_override(item: str) -> tuple[list[str], Any]:
    """``a.b=3`` -> ``(["a", "b"], 3)``; values are parsed as YAML scalars or lists."""
    key, sep, raw = item.partition("=")
    if not sep or not key.strip():
        raise ConfigError(f"override {item!r} must look like key=value (e.g. train.iterations=50)")
    parts = [part.strip() for part in key.split(".")]
    if not all(parts):  # ``a..b``, ``.a``, ``a.``: no key is named there
        raise ConfigError(
            f"override {item!r}: the key {key.strip()!r} has an empty part between its dots "
            "(e.g. train.iterations=50)"
        )
    try:
        value = yaml.safe_load(raw) if raw.strip() else None
    except yaml.YAMLError as err:
        if raw.strip().startswith(YAML_OPENERS):
            # Taken as text, ``[random,`` would reach the run as an opponent's name.
            why = getattr(err, "problem", None) or str(err).splitlines()[0]
            raise ConfigError(f"override {item!r}: the value is not valid YAML ({why})") from None
        value = raw  # not YAML (``@name``, ``a: b: c``): the text itself
    return parts, value


def parse_override(item: str) -> dict[str, Any]:
    """``a.b=3`` -> ``{"a": {"b": 3}}``."""
    parts, value = split_override(item)
    out: Any = value
    for part in reversed(parts):
        out = {part: out}
    return out


def build_config(
    *,
    preset: str | None = None,
    file: str | Path | None = None,
    overrides: list[str] | tuple[str, ...] = (),
    recorded: bool = False,
) -> RunConfig:
    """Preset, then file, then overrides, validated into a ``RunConfig``; what the file
    and the overrides set that the run ignores is named in a warning (``warn_ignored``).
    ``recorded``: the file is a run's own ``config.yaml`` (``--resume``), which records
    every setting the run had rather than what a user gave."""
    data: dict[str, Any] = load_preset(preset) if preset else {}
    given: list[dict[str, Any]] = []
    if file:
        own = load_yaml(file)
        data = merge(data, own)
        given += [] if recorded else [own]
    for item in overrides:
        data = apply_override(data, item)
        given.append(parse_override(item))
    cfg = validate(data)
    warn_ignored(cfg, given)
    return cfg


class IgnoredSetting(UserWarning):
    """A setting that was given but that the run does not use."""


def warn_ignored(cfg: RunConfig, given: Sequence[Mapping[str, Any]]) -> None:
    """Warn, in one line, of the ``model.tiny`` keys that ``given`` (a config file, each
    override) set when ``model.path`` gives the model, whose shape is then the
    checkpoint's. A preset's are not given: the text presets set the tiny model that
    their SFT step builds, and are then trained from its checkpoint with ``model.path``."""
    if cfg.model.path is None:
        return
    keys = dict.fromkeys(f"model.tiny.{k}" for layer in given for k in _tiny_keys(layer))
    if keys:
        verb = "is" if len(keys) == 1 else "are"
        warnings.warn(
            f"{', '.join(keys)} {verb} ignored: model.path ({cfg.model.path}) gives the "
            "model and its shape",
            IgnoredSetting,
            stacklevel=3,
        )


def _tiny_keys(layer: Mapping[str, Any]) -> list[str]:
    model = layer.get("model")
    tiny = model.get("tiny") if isinstance(model, dict) else None
    return list(tiny) if isinstance(tiny, dict) else []


def apply_override(data: dict[str, Any], item: str) -> dict[str, Any]:
    """A copy of ``data`` with ``key=value`` set. The value *replaces* what is at the
    key (mappings are not merged), so ``algo.params={}`` clears a preset's parameters."""
    parts, value = split_override(item)
    out = dict(data)
    node = out
    for depth, part in enumerate(parts[:-1], start=1):
        child = node.get(part)
        if child is not None and not isinstance(child, dict):
            # Replacing it with a mapping would drop the value without a word (a file's
            # game: leduc_poker and game.max_turns=50 would train the default game).
            key = ".".join(parts[:depth])
            raise ConfigError(f"{item}: {key} is {child!r}, not a section with keys")
        node[part] = dict(child) if isinstance(child, dict) else {}
        node = node[part]
    node[parts[-1]] = value
    return out


def validate(data: dict[str, Any]) -> RunConfig:
    """Validate a raw mapping, turning pydantic's report into one line per problem."""
    refuse_huge_numbers(data)
    try:
        cfg = RunConfig.model_validate(data)
    except ValidationError as err:
        raise ConfigError(format_validation_error(err, data)) from None
    refuse_bool_numbers(data, cfg)
    return cfg


def to_yaml(cfg: RunConfig) -> str:
    """The full resolved config as YAML (written to every run directory)."""
    return yaml.safe_dump(cfg.model_dump(mode="json"), sort_keys=False)


def describe(model: BaseModel, prefix: str = "") -> list[tuple[str, str, str]]:
    """(dotted key, value, meaning) for every leaf field, from the field docstrings."""
    rows = []
    for name, field in type(model).model_fields.items():
        value = getattr(model, name)
        key = f"{prefix}{name}"
        if isinstance(value, BaseModel):
            rows.extend(describe(value, key + "."))
        else:
            doc = " ".join((field.description or "").split())
            rows.append(
                (
                    key,
                    _scalar_text(value),
                    doc,
                )
            )
    return rows


def _scalar_text(value: Any) -> str:
    """A value as one line of YAML flow style (``0``, ``[random]``, ``null``)."""
    return yaml.safe_dump(value, default_flow_style=True).strip().removesuffix("...").strip()
