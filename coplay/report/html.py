"""One self-contained HTML page of one or more runs (``coplay report``).

Everything the page needs is inside it: the data as JSON, uPlot (a 50 kB MIT charting
library, vendored in ``static/`` with its licence) for the curves, and the page's own
script and style, so it opens offline and can be mailed or attached as one file.
Sections: what the runs are and how their config differs from the nearest preset;
curves of every logged key against iterations or wall time (``charts.py``);
throughput; the population's meta-game as a heatmap (PSRO runs, meta-sampler leagues); sample
games as conversations, one column per seat, each showing only what that seat saw.
"""

from __future__ import annotations

import html
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from importlib import resources
from typing import Any

from coplay.report.charts import (
    SECTIONS,
    TIME_KEY,
    Chart,
    build_charts,
    finite_number,
    run_labels,
)
from coplay.report.runfiles import Metagame, RunFiles
from coplay.report.transcripts import transcripts_html

PALETTE = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#17becf", "#8c564b", "#e377c2")


@dataclass(frozen=True)
class ConfigChanges:
    """How a run's config differs from the preset nearest to it."""

    preset: str | None
    """The bundled preset with the fewest differing keys (None: no preset compared)."""
    changes: tuple[tuple[str, str, str], ...]
    """(dotted key, the preset's value, the run's value) of every differing key, the
    values as JSON text ("(absent)" where one side lacks the key)."""


def _static(name: str) -> str:
    return resources.files("coplay.report").joinpath("static", name).read_text()


def _esc(value: Any) -> str:
    return html.escape(str(value))


def render(
    runs: Sequence[RunFiles], changes: Mapping[str, ConfigChanges] | None = None, *, games: int = 8
) -> str:
    """The page of ``runs`` (several overlay in the same charts); ``changes`` by run
    path; ``games``: the latest sample games shown per run."""
    changes = changes or {}
    charts = build_charts(runs)
    names = run_labels(runs)
    sections = list(dict.fromkeys(c.section for c in charts))
    body = [
        _header(runs, names),
        _config_section(runs, names, changes),
        _curves_section(sections),
        _throughput_section(runs, names),
        _metagame_section(runs, names),
        _games_section(runs, names, games),
    ]
    title = "coplay report: " + ", ".join(names)
    # A chart names its grid by number: a section's name (any metric key's namespace)
    # does not survive the HTML parser as written (a carriage return becomes a newline).
    data = {"charts": [_chart_json(c) | {"grid": sections.index(c.section)} for c in charts]}
    payload = script_json(data)
    return "\n".join(
        [
            "<!doctype html>",
            '<html lang="en"><head><meta charset="utf-8">',
            f"<title>{_esc(title)}</title>",
            f"<style>{_static('uPlot.min.css')}\n{_static('report.css')}</style>",
            "</head><body>",
            *body,
            f'<script type="application/json" id="coplay-data">{payload}</script>',
            f"<script>{_static('uPlot.iife.min.js')}</script>",
            f"<script>{_static('report.js')}</script>",
            "</body></html>",
        ]
    )


def script_json(data: Any) -> str:
    """``data`` as JSON that can sit inside a ``<script>`` element: ``<``, ``>`` and
    ``&`` are written as JSON escapes, so no key or value (a learner named
    ``<!--<script>``) can end the element or change how the HTML parser reads it."""
    text = json.dumps(data, allow_nan=False)
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def _chart_json(chart: Chart) -> dict[str, Any]:
    """The chart for the page: each run's lines in its own colour (``PALETTE`` by run
    index, the same in every chart), several lines of one run (seats, members) in
    shades of it; dashed marks grey."""
    curves = [s for s in chart.series if not s.dash]
    series = []
    for s in chart.series:
        own = [id(c) for c in curves if c.run == s.run]
        color = "#888" if s.dash else shade(run_color(s.run), own.index(id(s)), len(own))
        series.append(asdict(s) | {"color": color})
    return {"key": chart.key, "section": chart.section, "series": series}


def run_color(run: int) -> str:
    return PALETTE[run % len(PALETTE)]


def shade(color: str, i: int, n: int) -> str:
    """The ``i``-th of ``n`` shades of ``color`` (``#rrggbb``), dark to light; the colour
    itself when ``n`` is 1."""
    if n < 2:
        return color
    t = -0.5 + i / (n - 1)  # -0.5 (towards black) .. 0.5 (towards white)
    rgb = [int(color[k : k + 2], 16) for k in (1, 3, 5)]
    target = 255 if t > 0 else 0
    return "#" + "".join(f"{round(c + (target - c) * abs(t)):02x}" for c in rgb)


def _header(runs: Sequence[RunFiles], names: Sequence[str]) -> str:
    rows = []
    for r, name in zip(runs, names, strict=True):
        game = r.config.get("game")
        game = game.get("name", "?") if isinstance(game, dict) else str(game or "?")
        last = r.metrics[-1]["iteration"] if r.metrics else "none logged yet"
        wall = wall_time(r)
        wall_text = "-" if wall is None else f"{wall:.1f} s"
        rows.append(
            f"<tr><td>{_esc(name)}</td><td>{_esc(r.kind)}</td><td>{_esc(game)}</td>"
            f"<td>{last}</td><td>{wall_text}</td><td><code>{_esc(r.path)}</code></td></tr>"
        )
    nav = " · ".join(
        f'<a href="#{s}">{t}</a>'
        for s, t in (
            ("config", "Config"),
            ("curves", "Curves"),
            ("throughput", "Throughput"),
            ("metagame", "Meta-game"),
            ("games", "Games"),
        )
    )
    return (
        "<header><h1>coplay report</h1>"
        f"<nav>{nav}</nav>"
        "<table class=runs><tr><th>run</th><th>kind</th><th>game</th><th>iterations</th>"
        f"<th>wall time</th><th>directory</th></tr>{''.join(rows)}</table></header>"
    )


def wall_time(run: RunFiles) -> float | None:
    """The run's wall seconds: its summary's, when the summary is of the last logged
    iteration; else the last row's ``perf/elapsed_s`` (a resumed run's report is
    written before its summary is, so the summary there is the previous segment's)."""
    if not run.metrics:
        return None
    last = run.metrics[-1]
    if run.summary.get("iterations") == last["iteration"]:
        wall = run.summary.get("wall_s")
    else:
        wall = last.get(TIME_KEY)
    return float(wall) if finite_number(wall) else None


def _config_section(
    runs: Sequence[RunFiles], names: Sequence[str], changes: Mapping[str, ConfigChanges]
) -> str:
    parts = ['<section id="config"><h2>Config</h2>']
    for r, name in zip(runs, names, strict=True):
        found = changes.get(str(r.path))
        parts.append(f"<h3>{_esc(name)}</h3>")
        if found is not None and found.preset:
            rows = "".join(
                f"<tr><td><code>{_esc(k)}</code></td><td>{_esc(a)}</td><td>{_esc(b)}</td></tr>"
                for k, a, b in found.changes
            )
            n = len(found.changes)
            what = f"{n} keys differ" if n > 1 else "1 key differs" if n else "no key differs"
            parts.append(
                f"<p>Nearest preset: <b>{_esc(found.preset)}</b> ({what}).</p>"
                + (
                    f"<table class=changes><tr><th>key</th><th>preset</th><th>this run</th></tr>{rows}</table>"
                    if rows
                    else ""
                )
            )
        # default=str: YAML reads some text of a hand-edited file as dates
        dumped = json.dumps(r.config, indent=2, default=str) if r.config else "(no config.yaml)"
        parts.append(f"<details><summary>full config</summary><pre>{_esc(dumped)}</pre></details>")
        if r.settings:  # a roster's, league's or PSRO loop's own: not in config.yaml
            dumped = json.dumps(r.settings, indent=2, default=str)
            parts.append(
                f"<details><summary>{_esc(r.settings_file)}</summary>"
                f"<pre>{_esc(dumped)}</pre></details>"
            )
    parts.append("</section>")
    return "\n".join(parts)


def _curves_section(sections: Sequence[str]) -> str:
    """The curves' heading and one grid per section, in order; the script fills them."""
    parts = [
        '<section id="curves"><h2>Curves</h2>',
        "<p class=axis>x axis: <label><input type=radio name=xaxis value=iterations checked>"
        " iteration</label> <label><input type=radio name=xaxis value=seconds> wall time (s)"
        "</label> <span class=hint>dashed: initial value (before training) and reference "
        "(0 = exact Nash)</span></p>",
    ]
    for section in sections:
        title = SECTIONS.get(section, section)
        parts.append(f'<h3>{_esc(title)}</h3><div class=grid data-section="{_esc(section)}"></div>')
    parts.append("</section>")
    return "\n".join(parts)


def _throughput_section(runs: Sequence[RunFiles], names: Sequence[str]) -> str:
    """Means of every ``perf/*`` key per run (elapsed time: its last value)."""
    keys = sorted({k for r in runs for row in r.metrics for k in row if k.startswith("perf/")})
    head = "".join(f"<th>{_esc(k.removeprefix('perf/'))}</th>" for k in keys)
    rows = []
    for r, name in zip(runs, names, strict=True):
        cells = []
        for k in keys:
            values = [row[k] for row in r.metrics if finite_number(row.get(k))]
            if not values:
                cells.append("<td>-</td>")
                continue
            shown = values[-1] if k == TIME_KEY else sum(values) / len(values)
            cells.append(f"<td>{_fmt(shown)}</td>")
        rows.append(f"<tr><td>{_esc(name)}</td>{''.join(cells)}</tr>")
    return (
        '<section id="throughput"><h2>Throughput</h2>'
        "<p>Mean per iteration (elapsed_s: the run's total).</p>"
        f"<table class=perf><tr><th>run</th>{head}</tr>{''.join(rows)}</table></section>"
    )


def _fmt(x: float) -> str:
    return f"{x:.4g}" if math.isfinite(x) else str(x)


def _metagame_section(runs: Sequence[RunFiles], names: Sequence[str]) -> str:
    parts = ['<section id="metagame"><h2>Meta-game</h2>']
    found = [(r, n) for r, n in zip(runs, names, strict=True) if r.metagame is not None]
    if not found:
        parts.append(
            "<p>No population in these runs (a league with the meta sampler or a PSRO run "
            "writes metagame.json). Meta-strategy weights over iterations, where logged, are "
            "among the curves (League, PSRO).</p>"
        )
    for r, name in found:
        parts.append(f"<h3>{_esc(name)}</h3>" + heatmap(r.metagame))
    parts.append("</section>")
    return "\n".join(parts)


def heatmap(game: Metagame) -> str:
    """The first player's payoff matrix as a coloured table (PSRO: rows the member in
    seat 0, columns the member in seat 1; a league's one matrix: seats averaged); blue
    above 0, red below, the value in each cell."""
    matrix = game.payoffs[0] if game.payoffs else ()
    # An infinite cell would make every other cell transparent: scale by the finite ones.
    finite = [abs(v) for row in matrix for v in row if v is not None and math.isfinite(v)]
    scale = max(finite, default=1.0) or 1.0
    head = "".join(f"<th>{_esc(m)}</th>" for m in game.members[: len(matrix[0]) if matrix else 0])
    rows = []
    for member, row in zip(game.members, matrix, strict=False):
        cells = "".join(_heat_cell(v, scale) for v in row)
        rows.append(f"<tr><th>{_esc(member)}</th>{cells}</tr>")
    caption = (
        "Expected return of the row member (seat 0) against the column member (seat 1)."
        if len(game.payoffs) > 1
        else "Mean return of the row member against the column member, both seats averaged."
    )
    return f'<p>{caption}</p><table class="heatmap"><tr><th></th>{head}</tr>{"".join(rows)}</table>'


def _heat_cell(value: float | None, scale: float) -> str:
    if value is None:
        return "<td>-</td>"
    if not math.isfinite(value):  # shown, but left out of the colour scale
        return f'<td data-value="{value}">{value}</td>'
    a = min(1.0, abs(value) / scale)
    rgb = "31,119,180" if value >= 0 else "214,39,40"
    return f'<td style="background: rgba({rgb},{a:.2f})" data-value="{value}">{value:.3f}</td>'


def _games_section(runs: Sequence[RunFiles], names: Sequence[str], games: int) -> str:
    parts = [
        '<section id="games"><h2>Sample games</h2>',
        "<p>One column per seat: what that seat saw (its private information only) and what "
        "it answered; hover an answer for its log-probabilities.</p>",
    ]
    for r, name in zip(runs, names, strict=True):
        parts.append(f"<h3>{_esc(name)}</h3>")
        if r.games_from is not None:
            parts.append(
                f"<p>Games of the latest best response only, <code>"
                f"{_esc(r.games_from)}</code>; iterations are its training's.</p>"
            )
        parts.append(transcripts_html(r.transcripts, games))
    parts.append("</section>")
    return "\n".join(parts)
