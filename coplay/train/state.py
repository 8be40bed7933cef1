"""Save and restore everything a run needs to continue exactly where it stopped.

A resumed run produces the same metrics and weights as one that never stopped: the
state holds the learner's weights, optimizer and schedule, the magnet, the estimator
state, the restart positions, and every random generator the loop draws from.

    run/state/policy/      Hugging Face folder of the learner (plain transformers)
    run/state/trainer.pt   optimizer, schedule, magnet, estimator state, RNG states
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from coplay.models.loading import save_policy
from coplay.report.atomic import replace_dir

if TYPE_CHECKING:
    from coplay.train.trainer import Run

STATE_DIR = "state"


def generator_state(policy: Any) -> Any:
    """The sampling generator of a policy, whichever kind it is (None if it has none)."""
    if hasattr(policy, "generator"):
        return policy.generator.get_state()
    if hasattr(policy, "_rng"):
        return policy._rng.bit_generator.state
    return None


def set_generator_state(policy: Any, state: Any) -> None:
    if state is None:
        return
    if hasattr(policy, "generator"):
        policy.generator.set_state(state)
    elif hasattr(policy, "_rng"):
        policy._rng.bit_generator.state = state


def fresh_state_dir(out: Path) -> Path:
    """An empty ``out/state.tmp`` to write a new state into before ``swap_in``."""
    tmp = out / f"{STATE_DIR}.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    return tmp


def swap_in(out: Path, tmp: Path) -> Path:
    """Make ``tmp`` the run's ``out/state`` by renames, so an interruption never leaves
    a half-written state; one between the two renames is undone on resume
    (``rundir.repair``). The previous state is removed after."""
    return replace_dir(tmp, out / STATE_DIR)


def save_state(run: Run, iteration: int, evals: dict[str, dict[str, float]]) -> Path:
    """Write the run's full state after ``iteration``; replaces the previous state."""
    tmp = fresh_state_dir(run.out)
    learner = run.learner
    save_policy(learner.policy, tmp / "policy")
    blob = {
        "iteration": iteration,
        "evals": evals,
        "optimizer": learner.optimizer.state_dict(),
        "scheduler": learner.scheduler.state_dict() if learner.scheduler else None,
        "magnet": learner.reference.model.state_dict() if learner.reference else None,
        "adv_state": run.adv_state,
        "restarts": run.restarts,
        "targets": run.targets,
        "critic": (
            {"model": run.critic.model.state_dict(), "opt": run.critic.optimizer.state_dict()}
            if run.critic
            else None
        ),
        "numpy_rng": run.rng.bit_generator.state,
        "torch_rng": torch.get_rng_state(),
        "policy_rng": generator_state(learner.policy),
        "opponent_rng": generator_state(run.opponent) if run.opponent else None,
        "eval_rngs": {k: generator_state(p) for k, p in run.eval_opponents.items()},
    }
    torch.save(blob, tmp / "trainer.pt")
    return swap_in(run.out, tmp)


def load_state(run: Run) -> tuple[int, dict[str, dict[str, float]]]:
    """Restore a run from ``run.out/state``; returns (iteration, saved evaluations)."""
    folder = run.out / STATE_DIR
    if not (folder / "trainer.pt").is_file():
        raise FileNotFoundError(f"{run.out} has no saved state to resume from ({folder} missing)")
    blob = torch.load(folder / "trainer.pt", weights_only=False)
    learner = run.learner
    saved = type(learner.policy.model).from_pretrained(folder / "policy")
    learner.policy.model.load_state_dict(saved.state_dict())
    learner.policy.version = blob["iteration"]
    learner.optimizer.load_state_dict(blob["optimizer"])
    if learner.scheduler and blob["scheduler"]:
        learner.scheduler.load_state_dict(blob["scheduler"])
    if learner.reference and blob["magnet"] is not None:
        learner.reference.model.load_state_dict(blob["magnet"])
    run.adv_state = blob["adv_state"]
    run.restarts = list(blob.get("restarts", []))
    run.targets = dict(blob.get("targets", {}))
    if run.critic is not None and blob.get("critic") is not None:
        run.critic.model.load_state_dict(blob["critic"]["model"])
        run.critic.optimizer.load_state_dict(blob["critic"]["opt"])
    run.rng.bit_generator.state = blob["numpy_rng"]
    torch.set_rng_state(blob["torch_rng"])
    set_generator_state(learner.policy, blob["policy_rng"])
    if run.opponent is not None:
        set_generator_state(run.opponent, blob["opponent_rng"])
    for name, state in blob["eval_rngs"].items():
        if name in run.eval_opponents:
            set_generator_state(run.eval_opponents[name], state)
    return blob["iteration"], blob["evals"]
