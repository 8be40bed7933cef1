"""PSRO's outer state: saved every iteration, loaded back so a resumed run equals an
uninterrupted one."""

import hashlib
import json

import numpy as np
import pytest

from coplay.population.psro import run_psro
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
