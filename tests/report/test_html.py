"""The report page: self-contained, every chart with data, games per seat, in a real
headless Chromium; ``coplay report`` and its one-line errors."""

import json
import math
import re
import shutil
from pathlib import Path

import pytest

from coplay.cli import main
from coplay.report.html import heatmap, render, script_json
from coplay.report.runfiles import Metagame, RunFiles, load_run


def page_data(page: str) -> dict:
    m = re.search(r'<script type="application/json" id="coplay-data">(.*?)</script>', page, re.S)
    return json.loads(m.group(1))


def test_the_page_embeds_its_scripts_and_data_and_escapes_transcript_text():
    rows = [{"iteration": 0, "eval/exploitability": 0.5}, {"iteration": 1, "loss/kl": 0.1}]
    game = {"iteration": 1, "seats": ["a"], "returns": [0.0], "turns": [{"player": 0, "step": 0,
            "observation": "</script><script>alert(1)</script>", "text": "x"}]}  # fmt: skip
    page = render([RunFiles(Path("r"), "train", {}, rows, transcripts=[game])])
    assert "http" not in re.sub(r"https?://github.com/leeoniya/uPlot", "", page).split("<body>")[1]
    assert page.count("<script>") == 2 and "alert(1)</script>" not in page
    assert [c["key"] for c in page_data(page)["charts"]] == ["eval/exploitability", "loss/kl"]


def test_the_data_block_holds_no_character_the_html_parser_reads():
    key = "rollout/<!--<script>&</script>"  # a learner may be named so
    rows = [{"iteration": 0, key: 1.0}, {"iteration": 1, key: 2.0}]
    page = render([RunFiles(Path("r"), "roster", {}, rows)])
    payload = page.split('id="coplay-data">')[1].split("</script>")[0]
    assert not set("<>&") & set(payload)
    assert page_data(page)["charts"][0]["key"] == key
    assert json.loads(script_json({"a": "<&>"})) == {"a": "<&>"}


@pytest.mark.parametrize(
    ("game", "shown"),
    [({"name": "kuhn_poker"}, "kuhn_poker"), ("kuhn_poker", "kuhn_poker"), (None, "?")],
)
def test_the_header_names_the_game_however_the_config_gives_it(game, shown):
    rows = [{"iteration": 0, "loss/kl": 0.1}]
    page = render([RunFiles(Path("r"), "train", {"game": game}, rows)])
    assert f"<td>{shown}</td>" in page


def _wall_cell(page: str) -> str:
    return re.search(r"<table class=runs>.*?</tr><tr>(?:<td>.*?</td>){4}<td>(.*?)</td>", page)[1]


def test_the_wall_time_is_the_summarys_only_when_it_is_of_the_last_iteration():
    rows = [{"iteration": 1, "perf/elapsed_s": 3.0}, {"iteration": 4, "perf/elapsed_s": 9.0}]
    stale = {"iterations": 1, "wall_s": 3.5}  # a resumed run: the earlier segment's summary
    page = render([RunFiles(Path("r"), "train", {}, rows, summary=stale)])
    assert _wall_cell(page) == "9.0 s"
    done = {"iterations": 4, "wall_s": 9.5}
    assert _wall_cell(render([RunFiles(Path("r"), "train", {}, rows, summary=done)])) == "9.5 s"
    assert _wall_cell(render([RunFiles(Path("r"), "train", {}, [{"iteration": 0}])])) == "-"


def test_non_finite_metrics_are_gaps_in_their_curves(tmp_path, capsys):
    run = tmp_path / "run"
    run.mkdir()
    (run / "metrics.jsonl").write_text(
        '{"iteration": 0, "loss/kl": 0.5, "perf/elapsed_s": 1.0}\n'
        '{"iteration": 1, "loss/kl": NaN, "perf/elapsed_s": Infinity}\n'
        '{"iteration": 2, "loss/kl": -Infinity, "loss/x": 1.0, "perf/elapsed_s": 3.0}\n'
    )
    assert main(["report", str(run), "--out", str(tmp_path / "r.html")]) == 0
    charts = {c["key"]: c for c in page_data((tmp_path / "r.html").read_text())["charts"]}
    kl = charts["loss/kl"]["series"][0]
    assert (kl["iterations"], kl["values"]) == ([0], [0.5])
    x = charts["loss/x"]["series"][0]
    assert (x["iterations"], x["seconds"]) == ([2], [3.0])


def test_the_heatmap_colours_each_payoff_and_shows_its_value():
    table = heatmap(Metagame(("m0", "m1"), (((0.0, 0.5), (-0.5, None)),)))
    assert 'rgba(31,119,180,1.00)" data-value="0.5">0.500' in table
    assert 'rgba(214,39,40,1.00)" data-value="-0.5">-0.500' in table
    assert "<td>-</td>" in table and "<th>m1</th>" in table


def test_an_infinite_payoff_leaves_the_other_cells_coloured():
    table = heatmap(Metagame(("m0", "m1"), (((math.inf, 0.5), (-0.25, None)),)))
    assert 'rgba(31,119,180,1.00)" data-value="0.5">0.500' in table
    assert 'rgba(214,39,40,0.50)" data-value="-0.25">-0.250' in table
    assert '<td data-value="inf">inf</td>' in table


def test_bad_files_of_a_run_are_one_line_not_a_traceback(tmp_path, capsys):
    run = tmp_path / "run"
    run.mkdir()
    huge = "1" + "0" * 400  # a JSON integer no float holds
    (run / "metrics.jsonl").write_text(
        f'{{"iteration": 0, "loss/x": {huge}, "perf/elapsed_s": {huge}}}\n'
    )
    assert main(["report", str(run), "--out", str(tmp_path / "r.html")]) == 0
    capsys.readouterr()
    transcripts = run / "transcripts.jsonl"
    transcripts.write_text('{"iteration": 0, "turns": [{"player": 0, "logprobs": [800.0]}]}\n')
    assert main(["report", str(run), "--out", str(tmp_path / "r.html")]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"coplay report: error: {transcripts}:1 is not a transcript record")
    transcripts.unlink()
    (run / "metagame.json").write_text('{"members": ["a"], "payoffs": [[["x"]]]}')
    assert main(["report", str(run), "--out", str(tmp_path / "r.html")]) == 2
    err = capsys.readouterr().err
    assert err == f"coplay report: error: {run / 'metagame.json'}: payoffs[0][0][0] must be a " \
        "number or null, got 'x'\n"  # fmt: skip


def test_coplay_report_writes_one_file_for_several_runs(tiny_run, tmp_path, capsys):
    out = tmp_path / "both.html"
    assert main(["report", str(tiny_run), str(tiny_run), "--out", str(out)]) == 0
    assert f"written: {out}" in capsys.readouterr().out
    series = page_data(out.read_text())["charts"][0]["series"]
    assert {s["run"] for s in series} == {0, 1}


def test_bad_input_is_one_error_line_and_status_2(tiny_run, tmp_path, capsys):
    broken = tmp_path / "broken"
    shutil.copytree(tiny_run, broken, ignore=shutil.ignore_patterns("checkpoints", "state"))
    lines = (broken / "metrics.jsonl").read_text().splitlines(keepends=True)
    (broken / "metrics.jsonl").write_text(lines[0] + "{not json\n" + "".join(lines[1:]))
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "metrics.jsonl").write_text("")
    cases = {
        str(tmp_path / "nowhere"): f"{tmp_path / 'nowhere'}: no such run directory",
        str(empty): f"{empty / 'metrics.jsonl'} is empty: the run has logged no iteration yet",
        str(broken): f"{broken / 'metrics.jsonl'}:2 is not valid JSON (Expecting property name "
        "enclosed in double quotes)",
    }
    for run, message in cases.items():
        assert main(["report", run]) == 2
        assert capsys.readouterr().err == f"coplay report: error: {message}\n"


def test_train_report_writes_the_page_into_the_run(tiny_run):
    page = (tiny_run / "report.html").read_text()
    assert "Nearest preset: <b>kuhn-selfplay</b>" in page
    assert "<code>train.iterations</code></td><td>600</td><td>2</td>" in page


@pytest.fixture(scope="module")
def browser():
    chromium = shutil.which("chromium")
    if chromium is None:
        pytest.skip("no chromium on PATH (Debian's chromium package; .ci/run installs it)")
    sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is not installed")
    with sync_api.sync_playwright() as p:
        b = p.chromium.launch(executable_path=chromium, args=["--no-sandbox"])
        yield b
        b.close()


def test_the_report_of_a_tiny_run_loads_cleanly_in_chromium(tiny_run, browser):
    page = browser.new_page()
    errors = []
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.route("**/*", lambda r: r.continue_() if r.request.url.startswith("file:") else r.abort())
    page.goto((tiny_run / "report.html").as_uri())
    charts = page.evaluate(
        """() => window.coplayReport.charts.map(c => ({key: c.key,
             points: c.plot.data.slice(1).flat().filter(v => v != null).length,
             drawn: c.plot.root.querySelector('canvas').width > 0}))"""
    )
    assert errors == []
    keys = {c["key"] for c in charts}
    assert {"eval/exploitability", "rollout/return", "loss/kl", "perf/decisions_per_s"} <= keys
    assert all(c["points"] > 0 and c["drawn"] for c in charts), charts
    page.check("input[value=seconds]")  # wall time on the x axis: the charts are redrawn
    assert page.evaluate("window.coplayReport.axis") == "seconds"
    assert page.evaluate("window.coplayReport.charts.length") == len(charts) and errors == []
    page.close()


def test_each_seat_sees_only_its_own_card_in_the_browser(tiny_run, browser):
    page = browser.new_page()
    page.goto((tiny_run / "report.html").as_uri())
    last = json.loads((tiny_run / "transcripts.jsonl").read_text().splitlines()[-1])
    cards = {t["player"]: re.search(r"Your card: (\w)", t["observation"])[1] for t in last["turns"]}
    newest = page.locator("details.iteration").first  # the latest iteration, open
    game = newest.locator(".game").last  # its games in logged order
    for seat, card in cards.items():
        own = " ".join(game.locator(f'td[data-seat="{seat}"]').all_inner_texts())
        other = " ".join(game.locator(f'td[data-seat="{1 - seat}"]').all_inner_texts())
        assert f"You are player {seat}. Your card: {card}." in own
        assert f"Your card: {card}" not in other  # Kuhn deals two different cards
    page.close()


def test_every_chart_is_drawn_whatever_its_namespace_is_named(tmp_path, browser):
    # The script found a chart's grid by a selector built from its namespace: a quote
    # made the selector invalid, and a carriage return (read back as a newline by the
    # HTML parser) matched no grid; the charts after it were not drawn.
    keys = ['my"ns/x', "cr\rns/x", "nl\nns/x", "back\\ns/x", "zz/last"]
    rows = [{"iteration": i, **{k: float(i) for k in keys}} for i in range(2)]
    path = tmp_path / "report.html"
    path.write_text(render([RunFiles(tmp_path, "train", {}, rows)]))
    page = browser.new_page()
    errors = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.goto(path.as_uri())
    drawn = page.evaluate("window.coplayReport.charts.map(c => c.key)")
    assert errors == [] and sorted(drawn) == sorted(keys)
    page.close()


def test_runs_of_the_same_folder_name_are_told_apart_on_the_page(tmp_path):
    rows = [{"iteration": 0, "loss/kl": 0.1}, {"iteration": 1, "loss/kl": 0.2}]
    page = render([RunFiles(tmp_path / d / "a", "train", {}, rows) for d in ("runs", "other")])
    assert "<h3>runs/a</h3>" in page and "<h3>other/a</h3>" in page
    assert "<td>runs/a</td>" in page and "<td>other/a</td>" in page
    labels = [s["label"] for s in page_data(page)["charts"][0]["series"]]
    assert labels == ["runs/a", "other/a"]


def test_each_run_keeps_its_colour_family_in_every_chart():
    first = [
        {"iteration": 0, "eval/exploitability": 0.5, "loss/kl": 0.1},
        {"iteration": 1, "eval/exploitability": 0.4, "loss/kl": 0.2},
    ]
    second = [
        {"iteration": 0, "eval/exploitability": 0.5, "loss/kl": 0.1, "rollout/return_seat0": 1.0,
         "rollout/return_seat1": -1.0},
        {"iteration": 1, "eval/exploitability": 0.3, "loss/kl": 0.3},
    ]  # fmt: skip
    page = render(
        [RunFiles(Path("a"), "train", {}, first), RunFiles(Path("b"), "train", {}, second)]
    )
    colors: dict[int, set[str]] = {}
    for chart in page_data(page)["charts"]:
        curves = [s for s in chart["series"] if not s["dash"]]
        if len({s["run"] for s in curves}) == len(curves):  # one line per run: its own colour
            for s in curves:
                colors.setdefault(s["run"], set()).add(s["color"])
        else:  # a run's seats: distinct shades
            assert len({s["color"] for s in curves}) == len(curves)
    assert all(len(c) == 1 for c in colors.values()) and len(colors) == 2
    assert colors[0] != colors[1]


def _section(page: str, name: str) -> str:
    return page.split(f'<section id="{name}">')[1].split("</section>")[0]


@pytest.mark.parametrize("kind", ["roster", "league", "psro"])
def test_the_config_section_holds_the_settings_file_of_the_runs_kind(tmp_path, kind):
    run = tmp_path / kind
    run.mkdir()
    (run / "config.yaml").write_text("game: {name: kuhn_poker}\n")
    (run / "metrics.jsonl" if kind != "psro" else run / "psro.jsonl").write_text(
        '{"iteration": 0}\n'
    )
    (run / f"{kind}.yaml").write_text("settings_only_this_file_holds: 7\n")
    config = _section(render([load_run(run)]), "config")
    assert f"<summary>{kind}.yaml</summary>" in config
    assert "settings_only_this_file_holds&quot;: 7" in config


def test_a_psro_runs_games_are_said_to_be_its_latest_responses(tmp_path):
    run = tmp_path / "psro"
    (run / "psro.jsonl").parent.mkdir()
    (run / "psro.jsonl").write_text('{"iteration": 1}\n')
    for response in ("00", "01"):
        (run / "responses" / response).mkdir(parents=True)
        record = {"iteration": 4, "seats": ["learner", f"psro:{response}"], "turns": []}
        (run / "responses" / response / "transcripts.jsonl").write_text(json.dumps(record) + "\n")
    games = _section(render([load_run(run)]), "games")
    assert "Games of the latest best response only, <code>responses/01</code>" in games
    assert "psro:01" in games and "psro:00" not in games
    train = tmp_path / "train"
    train.mkdir()
    (train / "metrics.jsonl").write_text('{"iteration": 1}\n')
    (train / "transcripts.jsonl").write_text(json.dumps({"iteration": 1, "turns": []}) + "\n")
    assert "best response" not in _section(render([load_run(train)]), "games")


def test_coplay_report_of_a_run_with_games_but_no_metrics_yet_shows_the_games(tmp_path, capsys):
    run = tmp_path / "run"
    run.mkdir()
    (run / "metrics.jsonl").write_text("")
    record = {"iteration": 0, "game": "kuhn_poker", "seed": 5, "turns": [{"player": 0}]}
    (run / "transcripts.jsonl").write_text(json.dumps(record) + "\n")
    assert main(["report", str(run)]) == 0
    err = capsys.readouterr().err
    assert err.startswith("coplay report: warning: ") and err.count("\n") == 1
    assert "the run has logged no metrics yet" in err
    page = (run / "report.html").read_text()
    assert "<td>none logged yet</td>" in page and 'data-seed="5"' in _section(page, "games")
