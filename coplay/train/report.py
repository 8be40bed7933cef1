"""The HTML report of runs (``coplay report``, ``train.report``): their files read back
(``coplay.report.runfiles``), each config compared with the nearest bundled preset,
rendered by ``coplay.report.html``.

A run directory keeps its full resolved config, not the preset it started from (a
run may come from a preset, a file, overrides or a resume), so the report names the
preset whose validated config differs from the run's in the fewest keys, and lists
those keys.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from coplay.report.atomic import write_text
from coplay.report.html import ConfigChanges, render
from coplay.report.runfiles import load_run
from coplay.train.config import ConfigError
from coplay.train.settings import build_config, preset_names

ABSENT = "(absent)"


def flatten(data: Any, prefix: str = "") -> dict[str, Any]:
    """``{"a": {"b": 1}}`` -> ``{"a.b": 1}``; lists and scalars are leaves."""
    if not isinstance(data, dict) or (prefix and not data):
        return {prefix.removesuffix("."): data}
    out: dict[str, Any] = {}
    for key, value in data.items():
        out |= flatten(value, f"{prefix}{key}.")
    return out


@functools.cache
def _preset_leaves(name: str) -> dict[str, Any] | None:
    """A preset's full config, flattened; None for one this machine cannot build (a
    game of an extra that is not installed)."""
    try:
        return flatten(build_config(preset=name).model_dump(mode="json"))
    except (ConfigError, ValueError, ImportError):
        return None


def diff(preset: dict[str, Any], run: dict[str, Any]) -> tuple[tuple[str, str, str], ...]:
    """(key, preset value, run value) of every key whose values differ, as JSON text."""
    keys = sorted(set(preset) | set(run))
    # default=str: a config.yaml edited by hand may hold what YAML reads as a date
    text = lambda d, k: json.dumps(d[k], default=str) if k in d else ABSENT  # noqa: E731
    return tuple((k, text(preset, k), text(run, k)) for k in keys if preset.get(k) != run.get(k))


def config_changes(config: dict[str, Any]) -> ConfigChanges:
    """The preset nearest ``config`` (fewest differing keys; ties by name) and the keys
    that differ from it."""
    if not config:
        return ConfigChanges(None, ())
    run = flatten(config)
    best: tuple[int, str, tuple] | None = None
    for name in preset_names():
        leaves = _preset_leaves(name)
        if leaves is None:
            continue
        changes = diff(leaves, run)
        if best is None or len(changes) < best[0]:
            best = (len(changes), name, changes)
    return ConfigChanges(None, ()) if best is None else ConfigChanges(best[1], best[2])


def write_report(runs: Sequence[str | Path], out: str | Path, *, games: int = 8) -> Path:
    """Read ``runs`` and write their report to ``out`` (atomically); returns ``out``."""
    loaded = [load_run(p) for p in runs]
    changes = {str(r.path): config_changes(r.config) for r in loaded}
    out = Path(out)
    write_text(out, render(loaded, changes, games=games))
    return out
