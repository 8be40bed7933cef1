"""The loop's standard hooks: when they evaluate, log and save, and what they keep."""

import json
from types import SimpleNamespace

import pytest

from coplay.envs.registry import make_env
from coplay.policies.scripted import RandomPolicy
from coplay.rollout.engine import play_episodes
from coplay.train import hooks as hooks_mod
from coplay.train.hooks import Evaluate, Log, Report, Save


@pytest.fixture
def batch():
    bot = RandomPolicy(seed=0)
    episodes = play_episodes(lambda: make_env("kuhn_poker"), [[bot, bot]] * 3, [0, 1, 2])
    return SimpleNamespace(episodes=tuple(episodes))


def counting_evaluate():
    calls = []

    def evaluate(run):
        calls.append(run)
        return {"eval/n": float(len(calls))}

    return evaluate, calls


def test_evaluate_runs_every_few_iterations_and_at_the_last(tmp_path, batch):
    evaluate, calls = counting_evaluate()
    hook = Evaluate(evaluate, every=3, last=7)
    run = SimpleNamespace(out=tmp_path)
    assert hook.initial(run) == {"eval/n": 1.0}
    done = [it for it in range(1, 8) if hook.after(run, it, batch, {})]
    assert done == [3, 6, 7] and len(calls) == 4
    assert hook.state() == {"initial": {"eval/n": 1.0}, "last": {"eval/n": 4.0}}
    assert not (tmp_path / "transcripts.jsonl").exists()  # transcripts=0 writes none


def test_evaluate_keeps_its_evaluations_through_a_resume(tmp_path, batch):
    evaluate, _ = counting_evaluate()
    first = Evaluate(evaluate, every=1, last=2)
    first.initial(SimpleNamespace(out=tmp_path))
    resumed = Evaluate(evaluate, every=1, last=2)
    resumed.load(json.loads(json.dumps(first.state())), SimpleNamespace(out=tmp_path))
    assert resumed.evals == first.evals and resumed.name == "evaluate"


def test_evaluate_writes_a_few_transcripts_with_each_evaluation(tmp_path, batch):
    evaluate, _ = counting_evaluate()
    hook = Evaluate(evaluate, every=2, last=4, transcripts=2)
    run = SimpleNamespace(out=tmp_path)
    for it in range(1, 5):
        hook.after(run, it, batch, {})
    lines = [json.loads(x) for x in (tmp_path / "transcripts.jsonl").read_text().splitlines()]
    assert [r["iteration"] for r in lines] == [2, 2, 4, 4]
    assert [r["seed"] for r in lines] == [0, 1, 0, 1]


def test_log_appends_the_iterations_row_with_the_elapsed_seconds(tmp_path, batch):
    hook = Log(before_s=100.0)
    out = hook.after(SimpleNamespace(out=tmp_path), 5, batch, {"loss/total": 0.5})
    row = json.loads((tmp_path / "metrics.jsonl").read_text())
    assert row["iteration"] == 5 and row["loss/total"] == 0.5
    assert row["perf/elapsed_s"] == out["perf/elapsed_s"] >= 100.0  # earlier segments count


def test_save_writes_the_state_when_due_and_at_the_end(tmp_path, batch, monkeypatch):
    saved, checkpoints = [], []
    monkeypatch.setattr(hooks_mod, "save_state", lambda run, hooks, it: saved.append(it))
    run = SimpleNamespace(out=tmp_path)
    hook = Save(every=2, end=5, hooks=[], checkpoint=lambda run, f: checkpoints.append(f.name))
    for it in range(1, 6):
        hook.after(run, it, batch, {})
    assert saved == [2, 4, 5] and hook.saved == 5
    assert checkpoints == ["iter_000002", "iter_000004"]  # the end's is the final one
    saved.clear()
    only_end = Save(every=0, end=3, hooks=[], checkpoint=lambda run, f: checkpoints.append(f))
    for it in range(1, 4):
        only_end.after(run, it, batch, {})
    assert saved == [3] and len(checkpoints) == 2


def test_report_tells_progress_each_iterations_metrics(batch):
    told = []
    hook = Report(lambda it, m: told.append((it, m)))
    metrics = {"loss/total": 1.0}
    assert hook.after(None, 3, batch, metrics) == {}
    assert told == [(3, metrics)] and told[0][1] is not metrics  # a copy


def test_report_tells_where_the_segment_starts_before_its_first_iteration(batch):
    # A run resumed after iteration 90: the progress ETA counts from 90, not from 0.
    told = []
    hook = Report(lambda it, m: told.append((it, m)))
    assert hook.before(None, 91) == {} and hook.before(None, 92) == {}
    hook.after(None, 91, batch, {"loss/total": 1.0})
    assert told == [(90, {}), (91, {"loss/total": 1.0})]
