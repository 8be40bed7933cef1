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

REFERENCES = {"exploitability": 0.0, "nash_conv": 0.0, "cce_gap": 0.0, "ce_gap": 0.0}
"""Known reference values by a key's last part: an exact equilibrium's (a CCE's gap for
``cce_gap``, a CE's for ``ce_gap``). A sampled
estimate of the same quantity (``eval/exploitability_sampled``) shares its reference."""

SAMPLED = "_sampled"

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


def run_labels(runs: Sequence[RunFiles]) -> list[str]:
    """Each run's label: the shortest suffix of its path that no other run shares
    (``runs/a`` and ``other/a``), or its plain name when it is the only run."""
    parts = [run.path.resolve().parts for run in runs]
    if len(runs) == 1:
        return [runs[0].name]
    labels = []
    for i, mine in enumerate(parts):
        others = [p for j, p in enumerate(parts) if j != i]
        k = 1
        while k < len(mine) and any(p[-k:] == mine[-k:] for p in others):
            k += 1
        labels.append("/".join(mine[-k:]).lstrip("/"))
    return labels


def build_charts(runs: Sequence[RunFiles]) -> list[Chart]:
    """Every chart of the runs' numeric keys, in section order, then by key."""
    charts: dict[str, Chart] = {}
    names = run_labels(runs)
    for r, run in enumerate(runs):
        prefix = names[r] if len(runs) > 1 else ""
        lines: dict[tuple[str, str], Series] = {}
        for row in run.metrics:
            seconds = row.get(TIME_KEY) if finite_number(row.get(TIME_KEY)) else 0.0
            for key, value in row.items():
                if key == "iteration" or not finite_number(value):
                    continue
                name, label = chart_of(key)
                line = lines.get((name, label))
                if line is None:
                    line = lines[(name, label)] = Series(_join(prefix, label) or names[r], r)
                    chart = charts.setdefault(name, Chart(name, section_of(name)))
                    chart.series.append(line)
                _add_point(line, row["iteration"], float(seconds), float(value))
        _add_initials(charts, lines, r, prefix)
    for chart in charts.values():
        _add_reference(chart)
    order = {name: i for i, name in enumerate(SECTIONS)}
    return sorted(charts.values(), key=lambda c: (order.get(c.section, len(order)), c.key))


def _join(*words: str) -> str:
    return " ".join(w for w in words if w)


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


def _add_initials(charts: dict[str, Chart], lines: dict, run: int, prefix: str) -> None:
    """Dashed lines of a run: each evaluation curve's initial value (row 0: the
    evaluation before training)."""
    for (name, label), line in list(lines.items()):
        if line.dash or section_of(name) != "eval" or len(line.iterations) < 2:
            continue
        if line.iterations[0] != 0:
            continue
        flat = Series(_join(prefix, label, "initial"), run, dash=True)
        for i in (0, -1):
            _add_point(flat, line.iterations[i], line.seconds[i], line.values[0])
        charts[name].series.append(flat)


def _add_reference(chart: Chart) -> None:
    """A dashed line at the known reference of the chart's key (0 for exploitability),
    across every run's iterations and seconds."""
    reference = REFERENCES.get(chart.key.rsplit("/", 1)[-1].removesuffix(SAMPLED))
    curves = [s for s in chart.series if not s.dash and s.iterations]
    if reference is None or not curves:
        return
    flat = Series("reference", curves[0].run, dash=True)
    flat.iterations = [min(s.iterations[0] for s in curves), max(s.iterations[-1] for s in curves)]
    flat.seconds = [min(s.seconds[0] for s in curves), max(s.seconds[-1] for s in curves)]
    flat.values = [reference, reference]
    chart.series.append(flat)
