"""Save and restore everything a run needs to continue exactly where it stopped.

A resumed run produces the same metrics and weights as one that never stopped. The
state is written by walking the run's parts, each of which gives its own state: every
learner (weights, optimizer, schedule, magnet, estimator state, critic: ``Trainee``),
every planning part (restart positions), every hook with state (evaluations, a
league), the sampling generator of every policy, and the loop's generators (numpy's,
torch's, and every CUDA device's once CUDA is in use).

    run/state/run.json          the structure of that tree,
    run/state/run.safetensors     and its tensors (``safe_tree``)

Nothing in it is a pickle, so resuming a run directory from someone else runs no code
from it; a missing, corrupt or mismatched file is one ``StateError`` naming the file.
"""

from __future__ import annotations

import hashlib
import json
import warnings
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from coplay.algos.advantages.base import EmptyState
from coplay.models.hf_folder import CheckpointError
from coplay.report.atomic import atomic_dir
from coplay.rollout.source import Plan, Played
from coplay.train.checkpoints.safe_tree import TreeFileError, load_tree, records_of, save_tree
from coplay.train.parts.sections import part_records
from coplay.train.parts.term import Sample
from coplay.types import Decision, Episode, Observation, Opening, Trajectory, Turn

if TYPE_CHECKING:
    from coplay.train.loop import Run

STATE_DIR = "state"
RUN_STATE = "run"


def state_records() -> dict[str, type]:
    """The record types a state may hold (estimator states, the memory of targets, and
    what every registered part declares in ``records``); a state file naming any other
    type is refused. Read at each save and load, so a part registered later counts."""
    played = (Played, Episode, Trajectory, Turn, Observation)  # games played ahead
    return records_of(EmptyState, Sample, Decision, Plan, Opening, *played, *part_records())


RUN_KEYS = ("iteration", "models", "trainees", "planning", "hooks", "samplers", "rngs")


class StateError(ValueError):
    """A saved state that cannot be resumed; the message names the file and the fault."""


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
        if not folder.exists():  # stopped before its first save: nothing to continue
            why += f"; it stopped before its first save: start it again with --out {out} --force"
        raise FileNotFoundError(f"{out} has no saved state to resume from ({why})")
    blob = load_tree(folder, name, records=state_records())
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


def sampler_states(policies: Mapping[str, Any]) -> dict[str, Any]:
    """The sampling generator of every policy of ``policies`` that has one, by key."""
    return {k: p.sampler_state() for k, p in policies.items() if hasattr(p, "sampler_state")}


def models(run: Run) -> dict[str, dict[str, torch.Tensor]]:
    """Each learner's weights, stored once per model under the first learner that
    holds it (LoRA learners share one model, whose state holds every adapter)."""
    out, seen = {}, set()
    for t in run.trainees:
        if id(t.policy.model) not in seen:
            seen.add(id(t.policy.model))
            out[t.name] = t.policy.model.state_dict()
    return out


def tokenizer_prints(run: Run) -> dict[str, str]:
    """A fingerprint of each learner's tokenizer, by learner. The tiny model's is trained
    again from the game's text when a run resumes: the state is only good for the same
    one (another text or library version maps the saved weights to other words)."""
    return {t.name: fingerprint(t.policy.tokenizer) for t in run.trainees}


def fingerprint(tokenizer: Any) -> str:
    """SHA-256 of the tokenizer's vocabulary with its ids (special tokens included)."""
    vocab = sorted(tokenizer.get_vocab().items(), key=lambda item: item[1])
    return hashlib.sha256(json.dumps(vocab, ensure_ascii=False).encode()).hexdigest()


def played_ahead(run: Run) -> dict[int, Played]:
    """The games of every plan made ahead (``Run.ahead``), by iteration, waited for
    (the source keeps them for its ``play``): the uninterrupted run plays the games its
    source started at older weights, which a resume could not play again."""
    if not getattr(run.source, "lookahead", 0):
        return {}
    return {it: run.source.settle(plan) for it, (plan, _) in sorted(run.ahead.items())}


def save_state(run: Run, hooks: Sequence[Any], iteration: int) -> Path:
    """Write the run's full state after ``iteration``, walking its parts; replaces the
    previous state in renames (``atomic_dir``), so an interruption never leaves a
    half-written state; one between the two renames is undone on resume (``rundir.repair``)."""
    tree = {
        "iteration": iteration,
        "models": models(run),
        "trainees": {t.name: t.state() for t in run.trainees},
        "planning": dict(run.plan_states),
        "ahead": dict(run.ahead),
        "played_ahead": played_ahead(run),
        "hooks": {h.name: h.state() for h in hooks if h.name},
        # Apart: an evaluation opponent may share its name with a policy that plays
        # in training (a training bot "random" beside the evaluation's "random").
        "samplers": sampler_states(run.policies),
        "eval_samplers": sampler_states(run.eval_opponents),
        "rngs": generator_states(run.rng),
        "tokenizers": tokenizer_prints(run),
    }
    with atomic_dir(run.out / STATE_DIR) as tmp:
        save_tree(tree, tmp, RUN_STATE, records=state_records())
    return run.out / STATE_DIR


def load_state(run: Run, hooks: Sequence[Any]) -> int:
    """Restore a run from ``run.out/state`` by walking the same parts; returns the
    iteration it was saved after."""
    tree = read_state(run.out, RUN_STATE, RUN_KEYS)
    source = run.out / STATE_DIR / f"{RUN_STATE}.json"
    names = {t.name for t in run.trainees}
    if set(tree["trainees"]) != names:
        raise StateError(
            f"{source} has learners {sorted(tree['trainees'])} but the run has {sorted(names)}"
        )
    with restoring(source):
        _restore(run, hooks, tree, source)
    return tree["iteration"]


def _restore(run: Run, hooks: Sequence[Any], tree: dict[str, Any], source: Path) -> None:
    for name, saved in tree.get("tokenizers", {}).items():  # kept since 2026-11-27
        if tokenizer_prints(run).get(name, saved) != saved:
            raise StateError(
                f"{source}: learner {name!r}'s tokenizer, built again for this run, is not "
                "the one its weights were trained with (the game's text or the tokenizers "
                "library changed since): start a new run"
            )
    for name, weights in tree["models"].items():
        model = next(t.policy.model for t in run.trainees if t.name == name)
        load_weights(model, weights, source)
    for t in run.trainees:
        t.load(tree["trainees"][t.name], source)
    run.plan_states.update(tree["planning"])
    run.ahead = dict(tree.get("ahead", {}))  # a state saved before plans ahead were kept
    run.played_ahead = dict(tree.get("played_ahead", {}))  # and before their games were
    for hook in hooks:
        if hook.name and hook.name in tree["hooks"]:
            hook.load(tree["hooks"][hook.name], run)
    if "eval_samplers" in tree:
        _load_samplers(run.policies, tree["samplers"])
        _load_samplers(run.eval_opponents, tree["eval_samplers"])
    else:  # a state saved before the two were kept apart: one dict, by name
        _load_samplers({**run.eval_opponents, **run.policies}, tree["samplers"])
    restore_generators(run.rng, tree["rngs"], source)


def generator_states(rng: np.random.Generator) -> dict[str, Any]:
    """The loop's generators: ``rng``, torch's CPU one, and every CUDA device's (none
    before CUDA is initialised: nothing has drawn from them, and asking would start it)."""
    cuda = torch.cuda.get_rng_state_all() if torch.cuda.is_initialized() else []
    return {"numpy": rng.bit_generator.state, "torch": torch.get_rng_state(), "cuda": cuda}


def restore_generators(rng: np.random.Generator, saved: Mapping[str, Any], source: Path) -> None:
    """Set the generators ``generator_states`` saved. A state saved without CUDA (or
    before the CUDA ones were kept) leaves those as the run's seed set them."""
    rng.bit_generator.state = saved["numpy"]
    torch.set_rng_state(saved["torch"])
    cuda = saved.get("cuda", [])  # kept since 2026-11-28
    if not isinstance(cuda, list) or not all(map(_byte_tensor, cuda)):
        raise StateError(f"{source}: rngs.cuda is not a list of CUDA generator states")
    if not cuda:
        return
    here = torch.cuda.device_count()
    if len(cuda) != here:
        warnings.warn(
            f"{source} holds the generator states of {len(cuda)} CUDA device(s) but this "
            f"machine has {here}: restored the first {min(len(cuda), here)}, any other device "
            "draws as seeded",
            stacklevel=2,
        )
    torch.cuda.set_rng_state_all(cuda[:here])


def _byte_tensor(value: Any) -> bool:
    # Checked here: on a device not yet initialised torch sets a state lazily, so a
    # bad one would fail at the first CUDA call, far from the file.
    return isinstance(value, torch.Tensor) and value.dtype == torch.uint8 and value.dim() == 1


def _load_samplers(policies: Mapping[str, Any], states: Mapping[str, Any]) -> None:
    for key, state in states.items():
        if key in policies:
            policies[key].load_sampler_state(state)
