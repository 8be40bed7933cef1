"""The walkthrough of docs/architecture.md runs as written, and its parts take effect.

The walkthrough's blocks start with ``# walkthrough: NAME``. They run in order in one
namespace with two stand-ins, as ``tests/test_docs.py`` budgets its examples: the
preset comes back with a tiny budget (and without the KL, entropy and magnet, so the
loss is the objective plus the new term alone), and ``train`` runs the loop with the
log and save hooks but without the evaluations, which the features do not touch.
The registries are put back as they were afterwards.
"""

from __future__ import annotations

import re
from contextlib import contextmanager
from pathlib import Path

import pytest

from coplay.report.sinks import read_metrics
from coplay.train import settings as run_config
from coplay.train import trainer
from coplay.train.checkpoints.state import RUN_STATE, read_state
from coplay.train.hooks import Hook, Log, Save
from coplay.train.loop import run_loop
from coplay.train.parts.planning import PLANNING
from coplay.train.parts.terms import TERMS

DOC = Path(__file__).resolve().parents[1] / "docs" / "architecture.md"
BLOCK = re.compile(r"^```python\n# walkthrough: (?P<name>\w+)\n(?P<body>.*?)^```", re.M | re.S)
TINY = [
    "train.iterations=2",
    "rollout.games_per_iter=8",
    "model.tiny.hidden_size=32",
    "model.tiny.intermediate_size=64",
    "train.eval_opponents=[]",
    "loss.kl=null",
    "loss.entropy=null",
    "magnet=null",
]


def walkthrough() -> dict[str, str]:
    """The walkthrough's blocks by name, each with its marker line."""
    text = DOC.read_text()
    return {m["name"]: f"# walkthrough: {m['name']}\n{m['body']}" for m in BLOCK.finditer(text)}


def tiny_preset(name: str, *, load=run_config.load_preset) -> dict:
    """The preset ``name`` with the ``TINY`` budget (stands in for ``load_preset``)."""
    data = load(name)
    for item in TINY:
        data = run_config.apply_override(data, item)
    return data


class Batches(Hook):
    """Keeps the seeds of every played game."""

    def __init__(self) -> None:
        self.seeds: list[int] = []

    def after(self, run, it, batch, metrics):
        self.seeds += [e.seed for e in batch.episodes]
        return {}


@contextmanager
def registries_restored():
    """TERMS and PLANNING as they were before, whatever the block registered."""
    saved = dict(TERMS), dict(PLANNING)
    try:
        yield
    finally:
        for registry, before in zip((TERMS, PLANNING), saved, strict=True):
            registry.clear()
            registry.update(before)


def test_the_walkthrough_has_its_three_blocks_and_each_feature_is_under_40_lines():
    blocks = walkthrough()
    assert list(blocks) == ["term", "planning", "config"]
    for name in ("term", "planning"):
        lines = blocks[name].rstrip("\n").splitlines()
        assert len(lines) < 40, f"the {name} walkthrough has {len(lines)} lines"


def test_the_walkthrough_runs_and_its_term_and_planning_part_take_effect(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(run_config, "load_preset", tiny_preset)
    played = Batches()
    runs = []

    def loop_only(cfg, out):
        run = trainer.setup(cfg, Path(out))
        hooks: list[Hook] = [played, Log()]
        hooks.append(Save(cfg.train.save_every, cfg.train.iterations, hooks))
        run_loop(run, hooks, start=0, end=cfg.train.iterations)
        runs.append(run)
        return {}

    monkeypatch.setattr(trainer, "train", loop_only)
    namespace: dict = {"__name__": "__walkthrough__"}
    with registries_restored():
        for name, block in walkthrough().items():
            code = compile(block, f"{DOC.name}: {name}", "exec", dont_inherit=True)
            exec(code, namespace)  # noqa: S102
        assert TERMS["confidence"] is namespace["Confidence"]
        assert PLANNING["deals"] is namespace["Deals"]
    assert "confidence" not in TERMS and "deals" not in PLANNING

    (run,) = runs
    assert list(run.trainees[0].learner.terms) == ["confidence"]
    assert list(run.planning) == ["deals"]
    rows = read_metrics(tmp_path / "runs" / "mine" / "metrics.jsonl")
    assert [r["iteration"] for r in rows] == [1, 2]
    for row in rows:
        # The term's loss entered the objective: one micro-batch per step, so the total
        # is the policy loss plus coef times the logged mean (token-mean aggregation).
        assert row["loss/confidence"] > 0.0
        expected = row["loss/policy"] + 0.5 * row["loss/confidence"]
        assert row["loss/total"] == pytest.approx(expected, rel=1e-5, abs=1e-7)
        assert 1.0 <= row["rollout/deals_seen"] <= 4.0
    # Without the part the seeds are (seed * 1_000_003 + it) * 8 + group: 8, 9, 16, 17.
    assert played.seeds and set(played.seeds) <= {0, 1, 2, 3}
    counts = {s: played.seeds.count(s) for s in set(played.seeds)}
    assert run.plan_states["deals"] == counts
    assert rows[-1]["rollout/deals_seen"] == len(counts)
    saved = read_state(tmp_path / "runs" / "mine", RUN_STATE, ("planning",))
    assert saved["planning"]["deals"] == counts
