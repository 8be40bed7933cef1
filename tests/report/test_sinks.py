"""Run-directory files are valid JSON, even with NaN metrics."""

import json
import math
from dataclasses import replace

import numpy as np
import pytest
import torch

from coplay.envs.registry import make_env
from coplay.policies.scripted import RandomPolicy
from coplay.report.sinks import (
    append_metrics,
    append_transcripts,
    keep_until,
    read_metrics,
    repair_jsonl,
    write_summary,
)
from coplay.rollout.engine import play_episodes
from coplay.types import Opening


def test_metrics_rows_append_and_nan_becomes_null(tmp_path):
    path = tmp_path / "metrics.jsonl"
    append_metrics(path, 0, {"eval/x": 1.0})
    append_metrics(path, 1, {"eval/x": math.nan, "loss/y": 2.0})
    rows = read_metrics(path)
    assert rows == [
        {"iteration": 0, "eval/x": 1.0},
        {"iteration": 1, "eval/x": None, "loss/y": 2.0},
    ]


def test_transcripts_hold_every_turn(tmp_path):
    r = RandomPolicy(seed=0)
    eps = play_episodes(lambda: make_env("kuhn_poker"), [[r, r]] * 3, [0, 1, 2])
    path = tmp_path / "t.jsonl"
    append_transcripts(path, eps, iteration=4)
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    assert len(rows) == 3 and rows[0]["iteration"] == 4
    assert len(rows[0]["turns"]) == eps[0].num_steps
    assert rows[0]["turns"][0]["observation"] == eps[0].turns[0].observation.text


def test_a_restarted_episode_records_the_history_it_replayed(tmp_path):
    r = RandomPolicy(seed=0)
    make = lambda: make_env("tic_tac_toe")  # noqa: E731
    prefix = (((0, "[4]"),), ((1, "[0]"),))
    (ep,) = play_episodes(make, [[r, r]], [0], prefixes=[prefix])
    append_transcripts(tmp_path / "t.jsonl", [ep], iteration=1)
    row = json.loads((tmp_path / "t.jsonl").read_text())
    assert row["prefix"] == [[[0, "[4]"]], [[1, "[0]"]]]
    assert len(row["turns"]) == ep.num_steps - 2
    assert row["opening"] is None
    append_transcripts(tmp_path / "o.jsonl", [replace(ep, opening=Opening(0, 3))], iteration=1)
    assert json.loads((tmp_path / "o.jsonl").read_text())["opening"] == {"player": 0, "index": 3}


def test_summary_is_strict_json(tmp_path):
    write_summary(tmp_path / "s.json", {"a": math.inf, "b": 1})
    assert json.loads((tmp_path / "s.json").read_text()) == {"a": None, "b": 1}


def test_nested_values_and_numpy_and_torch_scalars_are_written_as_json(tmp_path):
    path = tmp_path / "metrics.jsonl"
    append_metrics(path, 1, {"a": np.float32("nan"), "b": torch.tensor(0.5), "c": np.int64(3)})
    assert read_metrics(path) == [{"iteration": 1, "a": None, "b": 0.5, "c": 3}]
    summary = {"x": {"y": math.nan, "z": [1.0, np.float64(math.inf)]}, "t": torch.tensor(2.0)}
    write_summary(tmp_path / "s.json", summary)
    # strict: the file holds no NaN or Infinity token for json.loads to accept
    text = (tmp_path / "s.json").read_text()
    assert json.loads(text, parse_constant=lambda c: pytest.fail(f"{c} in summary.json")) == {
        "x": {"y": None, "z": [1.0, None]},
        "t": 2.0,
    }


def test_repair_drops_only_a_torn_last_line(tmp_path):
    path = tmp_path / "metrics.jsonl"
    append_metrics(path, 0, {"eval/x": 1.0})
    append_metrics(path, 1, {"eval/x": 2.0})
    whole = path.read_text()
    assert repair_jsonl(path) == 0 and path.read_text() == whole
    path.write_text(whole + '{"iteration": 2, "eval/')
    assert repair_jsonl(path) == len('{"iteration": 2, "eval/')
    assert path.read_text() == whole
    path.write_text('{"iteration": 0')  # the only line torn
    assert repair_jsonl(path) > 0 and path.read_text() == ""
    assert repair_jsonl(tmp_path / "missing.jsonl") == 0


def test_repair_gives_a_whole_last_line_its_newline_back(tmp_path):
    path = tmp_path / "metrics.jsonl"
    path.write_text('{"iteration": 0}\n{"iteration": 1}')
    assert repair_jsonl(path) == 0
    assert path.read_text() == '{"iteration": 0}\n{"iteration": 1}\n'
    append_metrics(path, 2, {})
    assert [r["iteration"] for r in read_metrics(path)] == [0, 1, 2]


@pytest.mark.parametrize("last", [b'{"iteration": 1, "x": "\xff"}\n', b'{"iteration": 1, "\xff'])
def test_bytes_that_are_not_utf8_are_named_and_the_file_left_as_it_is(tmp_path, last):
    # Appends write ASCII JSON: such a byte is no tear of a kill, and nothing is dropped.
    path = tmp_path / "psro.jsonl"
    data = b'{"iteration": 0}\n' + last
    path.write_bytes(data)
    for read in (repair_jsonl, read_metrics, lambda p: keep_until(p, 0)):
        with pytest.raises(ValueError, match=r"^\S*psro.jsonl:2 is not UTF-8 text \(invalid start"):
            read(path)
    assert path.read_bytes() == data


def test_keep_until_drops_redone_rows(tmp_path):
    path = tmp_path / "metrics.jsonl"
    for it in range(4):
        append_metrics(path, it, {"x": float(it)})
    keep_until(path, 1)
    assert [r["iteration"] for r in read_metrics(path)] == [0, 1]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["metrics.jsonl"]


def test_transcripts_record_what_the_game_paid_and_the_shaping_apart(tmp_path):
    # A text learner adds its format rewards to the episodes in place before the
    # transcripts are written: the record's returns must still be the game's.
    r = RandomPolicy(seed=0)
    (ep,) = play_episodes(lambda: make_env("kuhn_poker"), [[r, r]], [0])
    paid = ep.returns
    ep.trajectories[0].ret -= 0.5
    ep.trajectories[0].shaping -= 0.5
    ep.returns = (paid[0] - 0.5, paid[1])
    append_transcripts(tmp_path / "t.jsonl", [ep], iteration=1)
    row = json.loads((tmp_path / "t.jsonl").read_text())
    assert row["returns"] == list(paid) and row["shaping"] == [-0.5, 0.0]
