"""The report's curves: every numeric key of the runs' metric rows, grouped into charts.

Keys are discovered, not listed: each ``namespace/...`` key becomes a chart in its
namespace's section, keys that differ only by a seat (``rollout/return_seat0``,
``..._seat1``) share one chart, and a population's per-member weights and win rates
(``league/weight/<member>``, ``psro/weight_seat0/<member>``) share one chart per kind.
Several runs overlay in the same charts. Each series keeps its points against both
iterations and wall time (``perf/elapsed_s``), so the page can switch axes.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, field

from coplay.report.runfiles import RunFiles

SECTIONS = {
    "eval": "Evaluation",
    "rollout": "Rollout",
    "loss": "Learner",
    "adv": "Advantages",
    "league": "League",
    "psro": "PSRO",
    "perf": "Throughput and time",
}
"""Known namespaces, in page order, with their titles; others follow by name."""

REFERENCES = {"exploitability": 0.0, "nash_conv": 0.0}
"""Known reference values by a key's last part: an exact Nash equilibrium's."""

PAIRED = {"psro/best_response_value": ("psro/response_value", "exact best response")}
"""Keys drawn as the reference of another key's chart: key -> (chart, label)."""

SEAT = re.compile(r"^(?P<chart>.+)_seat(?P<seat>\d+)$")
MEMBER = re.compile(r"^(?P<chart>(?:league|psro)/(?:weight|win_rate)(?:_seat\d+)?)/(?P<member>.+)$")
TIME_KEY = "perf/elapsed_s"


@dataclass
class Series:
    """One line: a run's values of one key against iterations and wall seconds."""

    label: str
    run: int
    """Index of the run it belongs to (its colour family)."""
    iterations: list[int] = field(default_factory=list)
    seconds: list[float] = field(default_factory=list)
    values: list[float] = field(default_factory=list)
    dash: bool = False
    """Drawn dashed: an initial or reference value, not a curve."""


@dataclass
class Chart:
    key: str
    section: str
    series: list[Series] = field(default_factory=list)


def chart_of(key: str) -> tuple[str, str]:
    """(chart, series label within a run) of a metric key."""
    if key in PAIRED:
        return PAIRED[key]
    if m := MEMBER.match(key):
        return m["chart"], m["member"]
    if m := SEAT.match(key):
        return m["chart"], f"seat {m['seat']}"
    return key, ""


def section_of(chart: str) -> str:
    return chart.split("/", 1)[0] if "/" in chart else "other"


def build_charts(runs: Sequence[RunFiles]) -> list[Chart]:
    """Every chart of the runs' numeric keys, in section order, then by key."""
    charts: dict[str, Chart] = {}
    for r, run in enumerate(runs):
        prefix = f"{run.name} " if len(runs) > 1 else ""
        lines: dict[tuple[str, str], Series] = {}
        for row in run.metrics:
            seconds = row.get(TIME_KEY) if finite_number(row.get(TIME_KEY)) else 0.0
            for key, value in row.items():
                if key == "iteration" or not finite_number(value):
                    continue
                name, label = chart_of(key)
                line = lines.get((name, label))
                if line is None:
                    line = lines[(name, label)] = Series((prefix + label).strip() or run.name, r)
                    chart = charts.setdefault(name, Chart(name, section_of(name)))
                    chart.series.append(line)
                _add_point(line, row["iteration"], float(seconds), float(value))
        _add_marks(charts, lines, r, prefix)
    order = {name: i for i, name in enumerate(SECTIONS)}
    return sorted(charts.values(), key=lambda c: (order.get(c.section, len(order)), c.key))


def finite_number(value: object) -> bool:
    """A finite number. NaN and infinities, which Python's json reads from a metrics
    file, have no JSON form for the page: their points are left out (a gap), as is an
    integer too large for a float (JSON integers have no size limit)."""
    if not isinstance(value, int | float) or isinstance(value, bool):
        return False
    try:
        return math.isfinite(value)
    except OverflowError:
        return False


def _add_point(line: Series, iteration: int, seconds: float, value: float) -> None:
    if line.iterations and line.iterations[-1] == iteration:  # a repeated row: keep the last
        line.seconds[-1], line.values[-1] = seconds, value
        return
    line.iterations.append(iteration)
    line.seconds.append(seconds)
    line.values.append(value)


def _add_marks(charts: dict[str, Chart], lines: dict, run: int, prefix: str) -> None:
    """Dashed lines of a run: each evaluation curve's initial value (row 0: the
    evaluation before training) and the known reference of its key (0 for
    exploitability)."""
    for (name, label), line in list(lines.items()):
        if line.dash or not line.iterations:
            continue
        marks = []
        if section_of(name) == "eval" and line.iterations[0] == 0 and len(line.iterations) > 1:
            marks.append((f"{prefix}{label} initial".strip(), line.values[0]))
        reference = REFERENCES.get(name.rsplit("/", 1)[-1])
        if reference is not None and not any(s.label == "reference" for s in charts[name].series):
            marks.append(("reference", reference))
        for mark, value in marks:
            flat = Series(mark, run, dash=True)
            for i in (0, -1):
                _add_point(flat, line.iterations[i], line.seconds[i], value)
            charts[name].series.append(flat)
