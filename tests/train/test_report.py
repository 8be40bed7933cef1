"""The report's config comparison: the nearest preset and the keys that differ."""

import json

from coplay.train.report import config_changes, flatten, write_report
from coplay.train.settings import build_config, to_yaml


def test_flatten_names_every_leaf_by_its_dotted_key():
    assert flatten({"a": {"b": 1, "c": [1, 2], "d": {}}, "e": None}) == {
        "a.b": 1,
        "a.c": [1, 2],
        "a.d": {},
        "e": None,
    }


def test_a_run_is_compared_with_the_preset_it_is_nearest_to():
    cfg = build_config(preset="leduc-selfplay", overrides=["train.iterations=3", "train.seed=4"])
    changes = config_changes(cfg.model_dump(mode="json"))
    assert changes.preset == "leduc-selfplay"
    assert dict((k, (a, b)) for k, a, b in changes.changes) == {
        "train.iterations": (str(build_config(preset="leduc-selfplay").train.iterations), "3"),
        "train.seed": ("0", "4"),
    }


def test_a_key_one_side_lacks_is_shown_absent():
    data = build_config(preset="kuhn-selfplay").model_dump(mode="json")
    del data["train"]["report"]
    data["train"]["extra"] = {"x": 1}
    changes = config_changes(data)
    assert changes.preset == "kuhn-selfplay"
    assert changes.changes == (
        ("train.extra.x", "(absent)", "1"),
        ("train.report", "false", "(absent)"),
    )


def test_write_report_reads_the_run_and_writes_one_page(tmp_path):
    cfg = build_config(preset="kuhn-selfplay", overrides=["train.iterations=7"])
    (tmp_path / "config.yaml").write_text(to_yaml(cfg))
    rows = [{"iteration": 0, "eval/exploitability": 0.45}, {"iteration": 1, "loss/kl": 0.01}]
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    page = write_report([tmp_path], tmp_path / "r.html").read_text()
    assert "Nearest preset: <b>kuhn-selfplay</b> (1 key differs)" in page
    assert "No transcripts" in page and "No population" in page


def test_a_config_holding_a_date_is_shown_as_written(tmp_path):
    # YAML reads 2024-01-01 as a date, which json.dumps refused: the report failed with
    # "Object of type date is not JSON serializable".
    cfg = build_config(preset="kuhn-selfplay")
    (tmp_path / "config.yaml").write_text(to_yaml(cfg) + "notes: {started: 2024-01-01}\n")
    (tmp_path / "metrics.jsonl").write_text(json.dumps({"iteration": 0}) + "\n")
    page = write_report([tmp_path], tmp_path / "r.html").read_text()
    assert page.count("2024-01-01") == 2  # in the changes and the full config
