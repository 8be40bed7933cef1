"""Reading a run directory back: rows, transcripts, the meta-game, one-line errors."""

import json

import pytest

from coplay.report.runfiles import load_run, read_jsonl


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


def test_a_corrupt_line_is_named_by_file_and_line(tmp_path):
    path = tmp_path / "metrics.jsonl"
    path.write_text('{"iteration": 0}\n{"iteration": 1, oops}\n{"iteration": 2}\n')
    with pytest.raises(ValueError, match=r"metrics.jsonl:2 is not valid JSON"):
        read_jsonl(path)


def test_a_last_line_still_being_written_is_skipped(tmp_path):
    path = tmp_path / "metrics.jsonl"
    path.write_text('{"iteration": 0}\n{"iteration": 1, "loss/x"')
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
