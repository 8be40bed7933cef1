"""Save and restore a roster run so that a resumed run equals an uninterrupted one.

The trainer's ``state.py`` does this for one learner; a roster has several, and
LoRA learners share one model. The state is ``run/state/roster.json`` with its tensors
in ``run/state/roster.safetensors`` (``safe_tree``, no pickle):

* per learner: optimizer, schedule, its loss terms' states (a magnet with its own
  weights), estimator state, update count and sampling generator;
* every model once (LoRA views share one; its state holds every adapter);
* the sampling generators of frozen members, bots and evaluation opponents;
* the loop's numpy and torch generators, and the evaluations so far.

It is written to a temporary folder and swapped in with one rename
(``report.atomic.atomic_dir``), so an interruption never leaves a half-written state.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from coplay.report.atomic import atomic_dir
from coplay.train.checkpoints.safe_tree import save_tree
from coplay.train.checkpoints.state import (
    STATE_DIR,
    STATE_RECORDS,
    StateError,
    generator_state,
    load_weights,
    read_state,
    restoring,
    set_generator_state,
)
from coplay.train.learner import load_terms_state, terms_state

if TYPE_CHECKING:
    from coplay.train.roster import Member, RosterRun

ROSTER_STATE = "roster"
ROSTER_KEYS = (
    "iteration",
    "evals",
    "models",
    "learners",
    "member_rngs",
    "eval_rngs",
    "numpy_rng",
    "torch_rng",
)


def _models(run: RosterRun) -> dict[str, dict[str, torch.Tensor]]:
    """Each learner's weights, stored under the first learner that holds the model."""
    seen: dict[int, str] = {}
    out = {}
    for m in run.roster.learners:
        if id(m.policy.model) not in seen:
            seen[id(m.policy.model)] = m.name
            out[m.name] = m.policy.model.state_dict()
    return out


def _model_owner(run: RosterRun) -> dict[str, str]:
    """Learner name -> the learner under whose name its model is stored."""
    first: dict[int, str] = {}
    return {m.name: first.setdefault(id(m.policy.model), m.name) for m in run.roster.learners}


def _learner_blob(member: Member) -> dict[str, Any]:
    learner = member.learner
    return {
        "optimizer": learner.optimizer.state_dict(),
        "scheduler": learner.scheduler.state_dict() if learner.scheduler else None,
        "terms": terms_state(learner),
        "adv_state": member.adv_state,
        "version": member.policy.version,
        "rng": generator_state(member.policy),
    }


def save_roster_state(run: RosterRun, iteration: int, evals: dict[str, dict[str, float]]) -> Path:
    """Write the roster run's full state after ``iteration``; replaces the previous one."""
    others = [m for m in run.roster.members.values() if m.learner is None]
    blob = {
        "iteration": iteration,
        "evals": evals,
        "models": _models(run),
        "learners": {m.name: _learner_blob(m) for m in run.roster.learners},
        "member_rngs": {m.name: generator_state(m.policy) for m in others},
        "eval_rngs": {k: generator_state(p) for k, p in run.eval_opponents.items()},
        "numpy_rng": run.rng.bit_generator.state,
        "torch_rng": torch.get_rng_state(),
    }
    with atomic_dir(run.out / STATE_DIR) as tmp:
        save_tree(blob, tmp, ROSTER_STATE, records=STATE_RECORDS)
    return run.out / STATE_DIR


def _restore_learner(member: Member, blob: dict[str, Any], source: Path) -> None:
    learner = member.learner
    learner.optimizer.load_state_dict(blob["optimizer"])
    if learner.scheduler and blob["scheduler"]:
        learner.scheduler.load_state_dict(blob["scheduler"])
    load_terms_state(learner, blob["terms"])
    member.adv_state = blob["adv_state"]
    member.policy.version = blob["version"]
    set_generator_state(member.policy, blob["rng"])


def load_roster_state(run: RosterRun) -> tuple[int, dict[str, dict[str, float]]]:
    """Restore a roster run from ``run.out/state``; returns (iteration, evaluations)."""
    blob = read_state(run.out, ROSTER_STATE, ROSTER_KEYS)
    source = run.out / STATE_DIR / f"{ROSTER_STATE}.json"
    saved = set(blob["learners"])
    names = {m.name for m in run.roster.learners}
    if saved != names:
        raise StateError(
            f"{source} has learners {sorted(saved)} but the roster has {sorted(names)}"
        )
    with restoring(source):
        _restore(run, blob, source)
    return blob["iteration"], blob["evals"]


def _restore(run: RosterRun, blob: dict[str, Any], source: Path) -> None:
    owner = _model_owner(run)
    for member in run.roster.learners:
        if owner[member.name] == member.name:
            load_weights(member.policy.model, blob["models"][member.name], source)
        _restore_learner(member, blob["learners"][member.name], source)
    for name, state in blob["member_rngs"].items():
        if name in run.roster.members:
            set_generator_state(run.roster.members[name].policy, state)
    for name, state in blob["eval_rngs"].items():
        if name in run.eval_opponents:
            set_generator_state(run.eval_opponents[name], state)
    run.rng.bit_generator.state = blob["numpy_rng"]
    torch.set_rng_state(blob["torch_rng"])
