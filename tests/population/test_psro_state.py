"""PSRO's outer state: saved every iteration, loaded back so a resumed run equals an
uninterrupted one."""

import hashlib
import json
from collections import Counter
from dataclasses import replace

import numpy as np
import pytest

from coplay.eval.meta_solution import MetaSolution
from coplay.eval.metasolvers import META_SOLVERS
from coplay.population.oracles import ORACLES, Target
from coplay.population.psro import run_psro
from coplay.train.checkpoints import rundir
from coplay.train.settings import build_config
from tests.population.psro_runs import TINY, psro_rows, tiny_psro


def test_a_run_saved_before_the_ce_gap_was_logged_resumes(tmp_path):
    cfg = tiny_psro(iterations=2, initial="random", oracle="exact", meta_solver="ce")
    run_psro(cfg, tmp_path, stop_after=0)
    state = tmp_path / "state" / "psro.json"
    saved = json.loads(state.read_text())
    for step in saved["tree"]["steps"]:
        del step["ce_gap"], step["ce_gaps"]
    state.write_text(json.dumps(saved))
    res = run_psro(cfg, tmp_path, resume=True)
    assert np.isnan(res.steps[0].ce_gap) and res.steps[0].ce_gaps == ()
    assert all(np.isfinite(s.ce_gap) and len(s.ce_gaps) == 2 for s in res.steps[1:])
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["ce_gap"][0] is None and summary["ce_gap"][1:] == pytest.approx(
        [s.ce_gap for s in res.steps[1:]]
    )


def test_a_run_saved_before_the_cce_gap_was_logged_resumes(tmp_path):
    # Its steps have no gap: they read NaN (not measured), the new steps measure it.
    cfg = tiny_psro(iterations=2, initial="random", oracle="exact")
    run_psro(cfg, tmp_path, stop_after=0)
    state = tmp_path / "state" / "psro.json"
    saved = json.loads(state.read_text())
    for step in saved["tree"]["steps"]:
        del step["cce_gap"], step["cce_gaps"]
    state.write_text(json.dumps(saved))
    res = run_psro(cfg, tmp_path, resume=True)
    assert np.isnan(res.steps[0].cce_gap) and res.steps[0].cce_gaps == ()
    assert [s.cce_gap for s in res.steps[1:]] == pytest.approx([s.nash_conv for s in res.steps[1:]])


def _member_digests(out):
    return {
        str(p.relative_to(out)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted((out / "members").rglob("*.safetensors"))
    }


@pytest.mark.parametrize("kill_at", [2, 1], ids=["after its first save", "before it"])
def test_psro_killed_and_resumed_equals_the_uninterrupted_run(tmp_path, monkeypatch, kill_at):
    from coplay.train import hooks

    cfg = tiny_psro(iterations=2)
    cfg = cfg.model_copy(
        update={
            "run": build_config(preset="kuhn-selfplay", overrides=[*TINY, "train.save_every=1"])
        }
    )
    whole = run_psro(cfg, tmp_path / "whole")
    # Stop after the first PSRO iteration, then kill the next response after its first
    # update (its state saved), or during it (no state: the response starts again), as
    # a job's time limit or Ctrl-C would.
    run_psro(cfg, tmp_path / "split", stop_after=0)
    assert len((tmp_path / "split" / "psro.jsonl").read_text().splitlines()) == 1
    real = hooks.Log.after

    def killed(self, run, it, batch, metrics):
        if run.out.name == "02" and it == kill_at:
            raise KeyboardInterrupt
        return real(self, run, it, batch, metrics)

    monkeypatch.setattr(hooks.Log, "after", killed)
    with pytest.raises(KeyboardInterrupt):
        run_psro(cfg, tmp_path / "split", resume=True)
    monkeypatch.setattr(hooks.Log, "after", real)
    split = run_psro(cfg, tmp_path / "split", resume=True)
    assert split.members == whole.members
    assert [s.exploitability for s in split.steps] == [s.exploitability for s in whole.steps]
    assert psro_rows(tmp_path / "split") == psro_rows(tmp_path / "whole")
    assert _member_digests(tmp_path / "split") == _member_digests(tmp_path / "whole")


def test_psro_resume_without_state_is_a_clear_error(tmp_path):
    with pytest.raises(FileNotFoundError, match="no saved state to resume from"):
        run_psro(tiny_psro(iterations=1), tmp_path / "none", resume=True)


def _without_timings(steps):
    # repr: NaN equals NaN there, as a run's own steps do not under ==.
    return [repr(replace(s, meta_s=0.0, train_s=0.0, elapsed_s=0.0)) for s in steps]


def test_jpsro_ce_killed_between_two_responses_resumes_into_the_uninterrupted_run(
    tmp_path, monkeypatch
):
    # recommendations=each trains several responses an iteration; the outer state is
    # saved only at the iteration's end. Killed in the second of an iteration's
    # responses, the resumed run answers the first again and ends where the whole does,
    # leaving out the same copies of members.
    cfg = tiny_psro(
        iterations=6, initial="random", oracle="exact", meta_solver="ce", recommendations="each"
    )
    seen: list[Target] = []
    real = ORACLES["exact"]

    def recorded(t: Target):
        seen.append(t)
        return real.respond(t)

    monkeypatch.setitem(ORACLES, "exact", replace(real, respond=recorded))
    whole = run_psro(cfg, tmp_path / "whole")
    answers = Counter(len(t.members) for t in seen)  # an iteration's population: its responses
    second = next(t.index for t in seen if answers[len(t.members)] > 1) + 1

    def killed(t: Target):
        if t.index == second:
            raise rundir.RunInterrupted(t.out, None)
        return real.respond(t)

    monkeypatch.setitem(ORACLES, "exact", replace(real, respond=killed))
    with pytest.raises(KeyboardInterrupt, match="interrupted during PSRO iteration"):
        run_psro(cfg, tmp_path / "split")
    assert (tmp_path / "split" / "members" / f"{second - 1:02d}" / "table.json").is_file()
    monkeypatch.setitem(ORACLES, "exact", real)
    split = run_psro(cfg, tmp_path / "split", resume=True)
    _assert_same_run(tmp_path / "split", split, tmp_path / "whole", whole)


def _assert_same_run(out, res, whole_out, whole):
    """The same members, payoffs, steps, logs and saved files, timings aside."""
    assert res.members == whole.members
    np.testing.assert_array_equal(res.payoffs, whole.payoffs)
    assert _without_timings(res.steps) == _without_timings(whole.steps)
    assert psro_rows(out) == psro_rows(whole_out)
    for name in ("metagame.json", "summary.json"):
        assert _untimed(out / name) == _untimed(whole_out / name)


def _untimed(path):
    return {k: v for k, v in json.loads(path.read_text()).items() if k != "wall_s"}


def test_lm_jpsro_ce_killed_in_a_second_response_resumes_without_training_the_first(
    tmp_path, monkeypatch
):
    # Both seats told the same member, each alike: at 2 members iteration 1 answers
    # both, responses 02 and 03. Killed in 03, the resumed run takes 02 from its
    # finished response run (its end state saved) and trains 03 again from the start.
    from coplay.train import hooks

    def same_member(payoffs):
        k = len(payoffs[0])
        uniform = np.full(k, 1 / k)
        return MetaSolution((uniform, uniform), np.eye(k) / k, correlated=True)

    monkeypatch.setitem(META_SOLVERS, "ce", same_member)
    cfg = tiny_psro(iterations=2, initial="random", meta_solver="ce", recommendations="each")
    whole = run_psro(cfg, tmp_path / "whole")
    assert whole.members == ("psro:00", "psro:01", "psro:02", "psro:03")
    real, trained, resumed = hooks.Log.after, [], []

    def logged(self, run, it, batch, metrics):
        trained.append(run.out.name)
        if run.out.name == "03" and it == 1 and not resumed:
            raise KeyboardInterrupt
        return real(self, run, it, batch, metrics)

    monkeypatch.setattr(hooks.Log, "after", logged)
    with pytest.raises(KeyboardInterrupt, match="interrupted during PSRO iteration 1"):
        run_psro(cfg, tmp_path / "split")
    trained.clear()
    resumed.append(True)
    split = run_psro(cfg, tmp_path / "split", resume=True)
    assert trained == ["03", "03"]  # 02 trains no more
    _assert_same_run(tmp_path / "split", split, tmp_path / "whole", whole)
    assert _member_digests(tmp_path / "split") == _member_digests(tmp_path / "whole")


def test_a_run_saved_before_each_responses_values_were_recorded_resumes(tmp_path):
    # Its steps have one response value and no list: they read () and the new steps
    # record theirs.
    cfg = tiny_psro(iterations=2, initial="random", oracle="exact")
    run_psro(cfg, tmp_path, stop_after=0)
    state = tmp_path / "state" / "psro.json"
    saved = json.loads(state.read_text())
    for step in saved["tree"]["steps"]:
        del step["response_values"], step["best_values"]
    state.write_text(json.dumps(saved))
    res = run_psro(cfg, tmp_path, resume=True)
    assert res.steps[0].response_values == () and np.isfinite(res.steps[0].response_value)
    assert res.steps[1].response_values == (res.steps[1].response_value,)
