"""Charts from discovered keys: seats and members share a chart, runs overlay, marks."""

from pathlib import Path

from coplay.report.charts import build_charts, chart_of
from coplay.report.runfiles import RunFiles


def run(name, rows):
    return RunFiles(path=Path(name), kind="train", config={}, metrics=rows)


ROWS = [
    {"iteration": 0, "eval/exploitability": 0.46, "perf/elapsed_s": 0.0},
    {
        "iteration": 1,
        "eval/exploitability": 0.40,
        "rollout/return_seat0": 0.5,
        "rollout/return_seat1": -0.5,
        "perf/elapsed_s": 2.0,
        "league/weight/snap:0": 1.0,
        "flag": True,
        "loss/skipped": None,
    },
    {"iteration": 2, "eval/exploitability": 0.30, "perf/elapsed_s": 4.5},
]


def test_keys_map_to_charts_by_seat_and_member():
    assert chart_of("rollout/return_seat1") == ("rollout/return", "seat 1")
    assert chart_of("league/weight/snap:20") == ("league/weight", "snap:20")
    assert chart_of("psro/weight_seat0/psro:01") == ("psro/weight_seat0", "psro:01")
    assert chart_of("loss/kl") == ("loss/kl", "")
    assert chart_of("psro/best_response_value") == ("psro/response_value", "exact best response")


def test_every_numeric_key_is_charted_in_section_order_with_both_axes():
    charts = {c.key: c for c in build_charts([run("a", ROWS)])}
    assert list(charts) == [
        "eval/exploitability",
        "rollout/return",
        "league/weight",
        "perf/elapsed_s",
    ]
    curve, *marks = charts["eval/exploitability"].series
    assert curve.iterations == [0, 1, 2] and curve.values == [0.46, 0.40, 0.30]
    assert curve.seconds == [0.0, 2.0, 4.5]
    # dashed: the initial value (row 0) across the run, and the exact Nash reference
    assert [(m.label, m.values, m.dash) for m in marks] == [
        ("initial", [0.46, 0.46], True),
        ("reference", [0.0, 0.0], True),
    ]
    assert [s.label for s in charts["rollout/return"].series] == ["seat 0", "seat 1"]
    assert not any(s.dash for s in charts["perf/elapsed_s"].series)  # initial: eval/ only


def test_several_runs_overlay_with_their_names():
    charts = {c.key: c for c in build_charts([run("a", ROWS), run("b", ROWS[:2])])}
    labels = [(s.label, s.run) for s in charts["rollout/return"].series]
    assert labels == [("a seat 0", 0), ("a seat 1", 0), ("b seat 0", 1), ("b seat 1", 1)]
    refs = [s for s in charts["eval/exploitability"].series if s.label == "reference"]
    assert len(refs) == 1  # one reference line, not one per run


def test_an_integer_too_large_for_a_float_is_a_gap_not_an_overflow():
    rows = [
        {"iteration": 0, "loss/x": 1.0, "perf/elapsed_s": 10**400},
        {"iteration": 1, "loss/x": 10**400, "perf/elapsed_s": 2.0},
    ]
    x = {c.key: c for c in build_charts([run("a", rows)])}["loss/x"].series[0]
    assert (x.iterations, x.seconds, x.values) == ([0], [0.0], [1.0])


def test_runs_of_the_same_folder_name_are_told_apart_by_their_paths(tmp_path):
    rows = ROWS[:2]
    runs = [run(tmp_path / "runs" / "a", rows), run(tmp_path / "other" / "a", rows)]
    labels = {s.label for s in build_charts(runs)[0].series}
    assert {"runs/a", "other/a", "runs/a initial", "other/a initial"} <= labels
    from coplay.report.charts import run_labels

    assert run_labels([run(tmp_path / "runs" / "a", rows)]) == ["a"]
    assert run_labels([run(tmp_path / "a", rows), run(tmp_path / "b", rows)]) == ["a", "b"]


def test_the_reference_spans_every_run_and_labels_have_single_spaces():
    short = [
        {"iteration": 0, "eval/exploitability": 0.5},
        {"iteration": 2, "eval/exploitability": 0.4},
    ]
    long = [
        {"iteration": 0, "eval/exploitability": 0.5},
        {"iteration": 9, "eval/exploitability": 0.1},
    ]
    chart = build_charts([run("a", short), run("b", long)])[0]
    (ref,) = [s for s in chart.series if s.label == "reference"]
    assert ref.iterations == [0, 9]
    assert "a initial" in [s.label for s in chart.series]
    assert not any("  " in s.label for s in chart.series)


def test_a_sampled_exploitability_has_the_nash_reference_too():
    rows = [
        {"iteration": 0, "eval/exploitability_sampled": 0.5, "eval/nash_conv_sampled": 1.0},
        {"iteration": 1, "eval/exploitability_sampled": 0.4, "eval/nash_conv_sampled": 0.8},
    ]
    for chart in build_charts([run("a", rows)]):
        refs = [s.values for s in chart.series if s.label == "reference"]
        assert refs == [[0.0, 0.0]], chart.key
