"""Metric sinks: TensorBoard's own reader and the wandb offline files hold the values of
metrics.jsonl; a missing extra or an unknown name is one line when the config is built."""

import errno
import json
import time

import pytest

from coplay.report import loggers
from coplay.report.loggers import Opening, check_logger, closed_after, open_loggers
from coplay.train.config import ConfigError
from coplay.train.settings import build_config

ROWS = {
    0: {"eval/exploitability": 0.4576, "eval/random/win": 0.4375},
    1: {"eval/exploitability": 0.4553, "loss/kl": 1.5e-4, "rollout/return_seat0": -0.25},
    2: {"eval/exploitability": 0.4412, "loss/kl": 3.25e-4, "loss/skipped": float("nan")},
}


def jsonl_rows(out):
    return [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]


def tensorboard_scalars(folder):
    pytest.importorskip("tensorboard", reason="the tensorboard extra is not installed")
    from tensorboard.backend.event_processing import event_accumulator as ea

    acc = ea.EventAccumulator(str(folder), size_guidance={ea.SCALARS: 0})
    acc.Reload()
    return {tag: {e.step: e.value for e in acc.Scalars(tag)} for tag in acc.Tags()["scalars"]}


def test_tensorboard_events_read_back_hold_the_values_of_metrics_jsonl(tmp_path):
    pytest.importorskip("tensorboard", reason="the tensorboard extra is not installed")
    sinks = open_loggers(["tensorboard"], Opening(tmp_path))
    for step, row in ROWS.items():
        sinks.log(step, row)
    sinks.close()
    from_jsonl = {}
    for row in jsonl_rows(tmp_path):
        for key, value in row.items():
            if key != "iteration" and value is not None:  # NaN: null in JSON, none in TB
                from_jsonl.setdefault(key, {})[row["iteration"]] = value
    scalars = tensorboard_scalars(tmp_path / "tensorboard")
    assert (
        set(scalars)
        == set(from_jsonl)
        == {
            "eval/exploitability",
            "eval/random/win",
            "loss/kl",
            "rollout/return_seat0",
        }
    )
    for key, by_step in from_jsonl.items():
        assert scalars[key] == pytest.approx(by_step, rel=1e-6), key  # float32 in events


def test_a_resumed_segment_replaces_the_tensorboard_steps_it_redoes(tmp_path):
    pytest.importorskip("tensorboard", reason="the tensorboard extra is not installed")
    first = open_loggers(["tensorboard"], Opening(tmp_path))
    for step in (0, 1, 2):
        first.log(step, {"loss/kl": float(step)})
    first.close()  # killed after step 2; the saved state is at step 1
    again = open_loggers(["tensorboard"], Opening(tmp_path, first_step=2))
    again.log(2, {"loss/kl": 20.0})
    again.close()
    assert tensorboard_scalars(tmp_path / "tensorboard")["loss/kl"] == {0: 0.0, 1: 1.0, 2: 20.0}


def test_wandb_offline_writes_its_run_files_inside_the_run_directory(tmp_path, monkeypatch):
    pytest.importorskip("wandb", reason="the wandb extra is not installed")
    monkeypatch.delenv("WANDB_MODE", raising=False)
    sinks = open_loggers(["wandb"], Opening(tmp_path, config={"train": {"seed": 7}}))
    for step, row in ROWS.items():
        sinks.log(step, row)
    sinks.close()
    (run,) = (tmp_path / "wandb").glob("offline-run-*")
    (records,) = run.glob("run-*.wandb")
    data = written(records, json.dumps(ROWS[2]["loss/kl"]).encode())  # the last row
    # each history item is stored as its key and the value's JSON text
    for row in ROWS.values():
        for key, value in row.items():
            if value == value:  # NaN is left out
                assert key.encode() in data and json.dumps(value).encode() in data, key
    assert jsonl_rows(tmp_path)[1]["loss/kl"] == 1.5e-4  # metrics.jsonl is always written


def written(path, marker, seconds=30.0):
    """The file's bytes once ``marker`` is in them: wandb's service process writes the
    records after ``finish`` returns."""
    deadline = time.monotonic() + seconds
    while marker not in (data := path.read_bytes()) and time.monotonic() < deadline:
        time.sleep(0.2)
    return data


def test_a_missing_extra_is_one_config_line_naming_what_to_install(monkeypatch):
    monkeypatch.setattr(loggers.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(ValueError, match=r"pip install 'coplay\[wandb\]'"):
        check_logger("wandb")
    with pytest.raises(ConfigError) as err:
        build_config(overrides=["train.loggers=[tensorboard]"])
    assert str(err.value) == (
        "invalid config: train.loggers: logger tensorboard needs the optional extra "
        "'tensorboard': pip install 'coplay[tensorboard]' (got ['tensorboard'])"
    )


def test_an_unknown_logger_names_the_registered_ones():
    with pytest.raises(
        ConfigError, match="unknown logger 'mlflow'; available: jsonl, tensorboard, wandb"
    ):
        build_config(overrides=["train.loggers=[jsonl,mlflow]"])
    assert build_config(overrides=["train.loggers=[]"]).train.loggers == []


class Full:
    """A sink whose disk is full: every write fails."""

    def log(self, step, metrics):
        raise OSError(errno.ENOSPC, "No space left on device")

    def close(self):
        raise OSError(errno.ENOSPC, "No space left on device")


class Recording:
    def __init__(self):
        self.rows, self.closed = [], False

    def log(self, step, metrics):
        self.rows.append((step, dict(metrics)))

    def close(self):
        self.closed = True


def test_a_sink_that_fails_keeps_no_other_from_its_row_or_its_close():
    # The sinks after a failing one got no row and were never closed (wandb's run
    # left unfinished after TensorBoard's disk filled up).
    before, after = Recording(), Recording()
    sinks = loggers.Loggers([before, Full(), after])
    with pytest.raises(OSError, match="No space left on device"):
        sinks.log(3, {"loss/kl": 0.5})
    with pytest.raises(OSError, match="No space left on device"):
        sinks.close()
    assert before.rows == after.rows == [(3, {"loss/kl": 0.5})]
    assert before.closed and after.closed


class FullDisk:
    def close(self):
        raise OSError(28, "No space left on device")


def test_a_close_that_fails_after_an_error_leaves_that_error_to_be_raised():
    # Closed in a ``finally``, the full disk's OSError replaced the error on its way
    # out: a Ctrl-C's RunInterrupted, or the fault that stopped the run.
    with pytest.raises(KeyboardInterrupt), closed_after(FullDisk()):
        raise KeyboardInterrupt
    with pytest.raises(OSError, match="No space left"), closed_after(FullDisk()):
        pass  # nothing else to report: the close's own error
