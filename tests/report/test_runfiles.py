"""Reading a run directory back: rows, transcripts, the meta-game, one-line errors."""

import json
import math

import pytest

from coplay.report.runfiles import (
    load_run,
    read_jsonl,
    read_transcripts,
    run_kind,
    transcripts_file,
)


def write_run(path, rows, *, config="game: {name: kuhn_poker}\n"):
    path.mkdir(parents=True, exist_ok=True)
    (path / "config.yaml").write_text(config)
    (path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_a_run_reads_back_its_rows_config_and_kind(tmp_path):
    run = write_run(tmp_path / "a", [{"iteration": 0, "eval/x": 1.0}, {"iteration": 1}])
    (run / "league.yaml").write_text("sampler: pfsp\n")
    (run / "metagame.json").write_text('{"members": ["snap:0"], "payoffs": [[[0.5]]]}')
    files = load_run(run)
    assert [r["iteration"] for r in files.metrics] == [0, 1]
    assert files.config == {"game": {"name": "kuhn_poker"}}
    assert files.kind == "league" and files.name == "a"
    assert files.metagame.members == ("snap:0",) and files.metagame.payoffs == (((0.5,),),)


@pytest.mark.parametrize(
    ("trace", "kind"),
    [
        ("league.yaml", "league"),
        ("snapshots/", "league"),
        ("psro.yaml", "psro"),
        ("psro.jsonl", "psro"),
        ("responses/", "psro"),
        ("roster.yaml", "roster"),
        ("transcripts.jsonl", "train"),
    ],
)
def test_the_kind_of_a_run_is_told_by_its_traces_when_its_settings_are_lost(tmp_path, trace, kind):
    run = write_run(tmp_path / "a", [{"iteration": 0}])
    if trace.endswith("/"):
        (run / trace).mkdir()
    else:
        (run / trace).write_text("")
    assert run_kind(run) == kind and load_run(run).kind == kind


def test_a_corrupt_line_is_named_by_file_and_line(tmp_path):
    path = tmp_path / "metrics.jsonl"
    path.write_text('{"iteration": 0}\n{"iteration": 1, oops}\n{"iteration": 2}\n')
    with pytest.raises(ValueError, match=r"metrics.jsonl:2 is not valid JSON"):
        read_jsonl(path)


def test_bytes_that_are_not_utf8_are_named_by_file_and_line(tmp_path):
    run = write_run(tmp_path / "a", [{"iteration": 0}])
    (run / "metrics.jsonl").write_bytes(b'{"iteration": 0}\n{"iteration": 1, "x": "\xe9"}\n')
    with pytest.raises(ValueError, match=r"metrics.jsonl:2 is not UTF-8 text \(invalid"):
        load_run(run)
    write_run(run, [{"iteration": 0}])
    (run / "summary.json").write_bytes(b'{\n"x": "\xff"}')
    with pytest.raises(ValueError, match=r"summary.json:2 is not UTF-8 text \(invalid start"):
        load_run(run)


def test_a_last_line_still_being_written_is_skipped(tmp_path):
    path = tmp_path / "metrics.jsonl"
    path.write_text('{"iteration": 0}\n{"iteration": 1, "loss/x"')
    assert read_jsonl(path) == [{"iteration": 0}]
    path.write_bytes('{"iteration": 0}\n{"iteration": 1, "loss/é'.encode()[:-1])  # cut in é
    assert read_jsonl(path) == [{"iteration": 0}]


def test_missing_and_empty_runs_are_one_line_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match="no such run directory"):
        load_run(tmp_path / "nowhere")
    (tmp_path / "bare").mkdir()
    with pytest.raises(FileNotFoundError, match="has no metrics.jsonl or psro.jsonl"):
        load_run(tmp_path / "bare")
    write_run(tmp_path / "empty", [])
    with pytest.raises(ValueError, match="metrics.jsonl is empty"):
        load_run(tmp_path / "empty")
    write_run(tmp_path / "noit", [{"loss/x": 1.0}])
    with pytest.raises(ValueError, match="row 1 has no integer 'iteration'"):
        load_run(tmp_path / "noit")


def test_a_psro_run_reads_its_outer_log_and_its_latest_response_transcripts(tmp_path):
    run = tmp_path / "psro"
    (run / "responses" / "01").mkdir(parents=True)
    (run / "responses" / "02").mkdir(parents=True)
    (run / "psro.yaml").write_text("iterations: 2\n")
    (run / "psro.jsonl").write_text('{"iteration": 0, "psro/exploitability": 0.4}\n')
    (run / "responses" / "01" / "transcripts.jsonl").write_text('{"iteration": 1, "turns": []}\n')
    (run / "responses" / "02" / "transcripts.jsonl").write_text('{"iteration": 2, "turns": []}\n')
    files = load_run(run)
    assert files.kind == "psro" and files.metrics[0]["psro/exploitability"] == 0.4
    assert [t["iteration"] for t in files.transcripts] == [2]
    assert files.transcripts_path == run / "responses" / "02" / "transcripts.jsonl"


def test_a_run_with_games_but_no_metric_row_yet_is_read_with_a_warning(tmp_path):
    # A PSRO run during its first response: psro.jsonl is empty, the response has games.
    run = tmp_path / "psro"
    (run / "responses" / "00").mkdir(parents=True)
    (run / "psro.jsonl").write_text("")
    games = run / "responses" / "00" / "transcripts.jsonl"
    games.write_text('{"iteration": 1, "turns": []}\n')
    with pytest.warns(UserWarning) as caught:
        files = load_run(run)
    assert [str(w.message) for w in caught] == [
        f"{run / 'psro.jsonl'} is empty: the run has logged no metrics yet, only games ({games})"
    ]
    assert files.metrics == [] and [t["iteration"] for t in files.transcripts] == [1]


@pytest.mark.parametrize("kind", ["roster", "league", "psro"])
def test_a_run_reads_back_the_settings_file_of_its_kind(tmp_path, kind):
    run = write_run(tmp_path / kind, [{"iteration": 0}])
    (run / f"{kind}.yaml").write_text("members: [a, b]\n")
    files = load_run(run)
    assert files.settings_file == f"{kind}.yaml" and files.settings == {"members": ["a", "b"]}
    plain = load_run(write_run(tmp_path / "train", [{"iteration": 0}]))
    assert plain.settings_file is None and plain.settings == {}


@pytest.mark.parametrize(
    ("names", "latest"), [(["99", "100"], "100"), (["03-r0", "03-r1", "10-r0"], "10-r0")]
)
def test_the_latest_response_is_found_by_number_not_by_name(tmp_path, names, latest):
    for name in names:
        (tmp_path / "responses" / name).mkdir(parents=True)
        (tmp_path / "responses" / name / "transcripts.jsonl").write_text("")
    assert transcripts_file(tmp_path).parent.name == latest


@pytest.mark.parametrize(
    ("record", "fault"),
    [
        ({"iteration": 1}, "'turns' must be a list of turns"),
        ({"turns": [3]}, "turn 0 is not a JSON object"),
        ({"turns": [{"player": "0"}]}, "turn 0: 'player' must be a seat index >= 0, got '0'"),
        ({"turns": [{"player": -1}]}, "turn 0: 'player' must be a seat index >= 0, got -1"),
        ({"turns": [{"player": 0, "reward": "1"}]}, "turn 0: 'reward' must be a finite number"),
        ({"turns": [{"player": 0, "logprobs": ["x"]}]}, "'logprobs' must be a list of numbers"),
        ({"iteration": "1", "turns": []}, "'iteration' must be an integer, got '1'"),
        ({"returns": ["win"], "turns": []}, "'returns' must be a list of finite numbers"),
        # the engine never writes one; the play page's replay could not parse it
        ({"returns": [math.nan, 1.0], "turns": []}, "'returns' must be a list of finite numbers"),
        ({"turns": [{"player": 0, "reward": -math.inf}]}, "turn 0: 'reward' must be a finite n"),
        # a log-probability is <= 0; exp() of a large positive one overflows
        ({"turns": [{"player": 0, "logprobs": [800.0]}]}, "'logprobs' must be a list of num"),
        ({"turns": [{"player": 0, "logprobs": [math.nan]}]}, "'logprobs' must be a list of num"),
        # a JSON integer too large for a float overflows wherever it is formatted
        ({"turns": [{"player": 0, "reward": 10**400}]}, "turn 0: 'reward' must be a finite number"),
        # an explicit null is not a missing field: the report would compare or int() it
        ({"iteration": None, "turns": []}, "'iteration' must be an integer, got None"),
        ({"turns": [{"player": 0, "step": None}]}, "turn 0: 'step' must be an integer, got None"),
        ({"turns": [{"player": 0, "text": None}]}, "turn 0: 'text' must be text, got None"),
        # the hover zips them with the log-probs: "'int' object is not iterable"
        ({"turns": [{"player": 0, "response_ids": 5}]}, "turn 0: 'response_ids' must be a list"),
        (
            {"turns": [{"player": 0, "legal_actions": [1]}]},
            "'legal_actions' must be a list of text",
        ),
    ],
)
def test_a_transcript_record_the_report_cannot_read_is_named_by_file_and_line(
    tmp_path, record, fault
):
    path = tmp_path / "transcripts.jsonl"
    good = {"iteration": 1, "turns": [{"player": 1, "step": 0, "reward": None}]}
    path.write_text(json.dumps(good) + "\n\n" + json.dumps(record) + "\n")
    with pytest.raises(
        ValueError, match=r"transcripts.jsonl:3 is not a transcript record: "
    ) as err:
        read_transcripts(path)
    assert fault in str(err.value)


def test_the_fields_the_writer_logs_as_null_are_read(tmp_path):
    path = tmp_path / "transcripts.jsonl"
    turn = {"player": 0, "step": 0, "action": None, "reward": None, "logprobs": [0.0, -math.inf]}
    record = {"iteration": 1, "forfeited_by": None, "opening": None, "turns": [turn]}
    path.write_text(json.dumps(record) + "\n")
    assert read_transcripts(path) == [record]


@pytest.mark.parametrize(
    ("payoffs", "fault"),
    [
        ([[["x", 0.5], [0.1, None]]], "payoffs[0][0][0] must be a number or null, got 'x'"),
        ([[[0.5, 0.5], [True, 0.2]]], "payoffs[0][1][0] must be a number or null, got True"),
        ([[[0.5, 10**400]]], "payoffs[0][0][1] must be a number or null"),
        ([[0.5]], "payoffs[0] is not a matrix"),
        ("0.5", "lacks members or payoffs"),
    ],
)
def test_a_metagame_cell_that_is_not_a_number_is_a_one_line_error(tmp_path, payoffs, fault):
    run = write_run(tmp_path / "a", [{"iteration": 0}])
    (run / "metagame.json").write_text(json.dumps({"members": ["a", "b"], "payoffs": payoffs}))
    with pytest.raises(ValueError, match=r"metagame.json") as err:
        load_run(run)
    assert fault in str(err.value) and "\n" not in str(err.value)


def test_an_empty_config_is_no_config(tmp_path):
    assert load_run(write_run(tmp_path / "a", [{"iteration": 0}], config="")).config == {}
