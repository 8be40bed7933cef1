"""Save and restore everything a run needs to continue exactly where it stopped.

A resumed run produces the same metrics and weights as one that never stopped: the
state holds the learner's weights, optimizer and schedule, the magnet, the estimator
state, the restart positions, and every random generator the loop draws from.

    run/state/policy/             Hugging Face folder of the learner (plain transformers)
    run/state/trainer.json        optimizer, schedule, loss terms' states (the magnet, the
                                  memory of targets), estimator state, RNG states:
    run/state/trainer.safetensors   the structure, and its tensors (``safe_tree``)

Nothing in it is a pickle, so resuming a run directory from someone else runs no code
from it; a missing, corrupt or mismatched file is one ``StateError`` naming the file.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from coplay.algos.advantages.base import EmptyState
from coplay.models.loading import CheckpointError, load_pretrained, save_policy
from coplay.report.atomic import atomic_dir
from coplay.rollout.restarts import Start
from coplay.train.checkpoints.safe_tree import TreeFileError, load_tree, records_of, save_tree
from coplay.train.learner import Sample, load_terms_state, terms_state
from coplay.types import Decision

if TYPE_CHECKING:
    from coplay.train.trainer import Run

STATE_DIR = "state"
TRAINER_STATE = "trainer"

STATE_RECORDS = records_of(EmptyState, Start, Sample, Decision)
"""The record types a state may hold (estimator states, restart positions, the memory
of targets); a state file naming any other type is refused."""

TRAINER_KEYS = (
    "iteration",
    "evals",
    "optimizer",
    "scheduler",
    "terms",
    "adv_state",
    "restarts",
    "critic",
    "numpy_rng",
    "torch_rng",
    "policy_rng",
    "opponent_rng",
    "eval_rngs",
)


class StateError(ValueError):
    """A saved state that cannot be resumed; the message names the file and the fault."""


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


def save_state(run: Run, iteration: int, evals: dict[str, dict[str, float]]) -> Path:
    """Write the run's full state after ``iteration``; replaces the previous state in
    renames (``atomic_dir``), so an interruption never leaves a half-written state; one
    between the two renames is undone on resume (``rundir.repair``)."""
    learner = run.learner
    blob = {
        "iteration": iteration,
        "evals": evals,
        "optimizer": learner.optimizer.state_dict(),
        "scheduler": learner.scheduler.state_dict() if learner.scheduler else None,
        "terms": terms_state(learner),
        "adv_state": run.adv_state,
        "restarts": run.restarts,
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
    with atomic_dir(run.out / STATE_DIR) as tmp:
        save_policy(learner.policy, tmp / "policy")
        save_tree(blob, tmp, TRAINER_STATE, records=STATE_RECORDS)
    return run.out / STATE_DIR


def read_state(out: Path, name: str, keys: tuple[str, ...]) -> dict[str, Any]:
    """The state tree ``name`` of the run in ``out``, checked to hold ``keys``."""
    folder = out / STATE_DIR
    json_file = folder / f"{name}.json"
    if not json_file.is_file():
        why = f"{json_file} missing"
        if (folder / f"{name}.pt").is_file():  # written by coplay before states left pickle
            why += (
                f"; {name}.pt is an older pickled state, which is not loaded as it could run code"
            )
        raise FileNotFoundError(f"{out} has no saved state to resume from ({why})")
    blob = load_tree(folder, name, records=STATE_RECORDS)
    missing = [k for k in keys if k not in blob] if isinstance(blob, dict) else list(keys)
    if missing:
        raise StateError(f"{json_file} is incomplete: it lacks {', '.join(missing)}")
    return blob


@contextmanager
def restoring(source: Path) -> Iterator[None]:
    """Turn a saved value that does not fit the run (a malformed generator state, an
    optimizer of other parameters) into one ``StateError`` naming ``source``."""
    try:
        yield
    except (StateError, TreeFileError, CheckpointError, FileNotFoundError):
        raise
    except (KeyError, TypeError, ValueError, RuntimeError, IndexError, AttributeError) as err:
        detail = " ".join(str(err).split()) or type(err).__name__
        if isinstance(err, KeyError):  # str(KeyError) is only the quoted key
            detail = f"it has no entry {detail}"
        raise StateError(f"{source} does not fit this run: {_shorten(detail)}") from err


def _shorten(text: str, limit: int = 300) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


def load_weights(module: torch.nn.Module, weights: dict[str, torch.Tensor], source: Path) -> None:
    """``module.load_state_dict(weights)``, first checking that the names and shapes
    match, so that a run resumed with another model size gets one short line naming
    ``source`` rather than torch's list of every mismatched tensor."""
    own = module.state_dict()
    differ = [k for k, t in weights.items() if k in own and own[k].shape != t.shape]
    if differ:
        k = differ[0]
        raise StateError(
            f"{source} does not fit this run's model (another model size?): {k} is "
            f"{list(weights[k].shape)} there but {list(own[k].shape)} here "
            f"({len(differ)} tensors differ)"
        )
    missing, extra = sorted(own.keys() - weights.keys()), sorted(weights.keys() - own.keys())
    if missing or extra:
        what = [f"it lacks {', '.join(missing[:3])}"] if missing else []
        what += [f"it has {', '.join(extra[:3])}, which the model has not"] if extra else []
        raise StateError(f"{source} does not fit this run's model: {'; '.join(what)}")
    with restoring(source):
        module.load_state_dict(weights)


def load_state(run: Run) -> tuple[int, dict[str, dict[str, float]]]:
    """Restore a run from ``run.out/state``; returns (iteration, saved evaluations)."""
    folder = run.out / STATE_DIR
    blob = read_state(run.out, TRAINER_STATE, TRAINER_KEYS)
    learner = run.learner
    saved = load_pretrained(type(learner.policy.model), folder / "policy")
    load_weights(learner.policy.model, saved.state_dict(), folder / "policy")
    source = folder / f"{TRAINER_STATE}.json"
    with restoring(source):
        _restore(run, blob, source)
    return blob["iteration"], blob["evals"]


def _restore(run: Run, blob: dict[str, Any], source: Path) -> None:
    learner = run.learner
    learner.policy.version = int(blob["iteration"])
    learner.optimizer.load_state_dict(blob["optimizer"])
    if learner.scheduler and blob["scheduler"]:
        learner.scheduler.load_state_dict(blob["scheduler"])
    load_terms_state(learner, blob["terms"])
    run.adv_state = blob["adv_state"]
    run.restarts = list(blob["restarts"])
    if run.critic is not None and blob["critic"] is not None:
        load_weights(run.critic.model, blob["critic"]["model"], source)
        run.critic.optimizer.load_state_dict(blob["critic"]["opt"])
    run.rng.bit_generator.state = blob["numpy_rng"]
    torch.set_rng_state(blob["torch_rng"])
    set_generator_state(learner.policy, blob["policy_rng"])
    if run.opponent is not None:
        set_generator_state(run.opponent, blob["opponent_rng"])
    for name, state in blob["eval_rngs"].items():
        if name in run.eval_opponents:
            set_generator_state(run.eval_opponents[name], state)
