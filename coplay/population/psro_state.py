"""PSRO's outer state: what each iteration measured, and the population and meta-game
saved after every iteration and loaded back to resume."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from coplay.population.psro_config import PsroConfig
from coplay.population.psro_members import reload_member
from coplay.report import atomic
from coplay.train.checkpoints.safe_tree import save_tree
from coplay.train.checkpoints.state import STATE_DIR, StateError, read_state, restoring
from coplay.types import Policy

PSRO_STATE = "psro"
"""The outer loop's state: ``out/state/psro.json`` and ``psro.safetensors``."""


@dataclass(frozen=True)
class PsroStep:
    """What one PSRO iteration measured (before its best response was added)."""

    iteration: int
    members: int
    exploitability: float
    """Of the mixture of each seat's marginal of the meta-strategy (the product of its
    marginals, which a correlated joint is not); NaN for games without exact evaluation."""
    nash_conv: float
    """NashConv of the same mixture."""
    response_value: float
    """The new response's value against the meta-strategy (mean over seats); NaN on
    the last iteration, which trains none."""
    best_value: float
    """The exact best response's value against it (NaN where not exact or none trained)."""
    marginals: tuple[tuple[float, ...], ...]
    meta_s: float
    train_s: float
    elapsed_s: float
    cce_gap: float = float("nan")
    """The CCE gap of the meta-strategy's joint in the full game, summed over seats
    (``CceGap.gap``); NaN for games without exact evaluation, and in the steps of a run
    saved before it was measured."""
    cce_gaps: tuple[float, ...] = ()
    """The same per seat."""
    correlated: bool = False
    """Whether the meta-solver chose a joint (JPSRO), not only marginals."""
    ce_gap: float = float("nan")
    """The CE gap of the joint (``CeGap.gap``), measured for the CE solvers in games with
    exact evaluation; NaN otherwise, and in the steps of a run saved before it was."""
    ce_gaps: tuple[float, ...] = ()
    """The same per seat; empty where not measured."""


@dataclass
class Outer:
    """What the PSRO loop holds between iterations: the population, its meta-game and
    what each iteration measured. Saved after every iteration (``save_outer``)."""

    members: list[Policy]
    payoffs: tuple[np.ndarray, np.ndarray] | None
    steps: list[PsroStep]


def save_outer(out: Path, outer: Outer) -> None:
    """The population's ids and sampling generators, the meta-game and the steps, in
    renames (``atomic_dir``): a kill leaves the previous iteration's state whole."""
    tree = {
        "members": [m.policy_id for m in outer.members],
        "samplers": {m.policy_id: m.sampler_state() for m in outer.members},
        "payoffs": list(outer.payoffs) if outer.payoffs is not None else None,
        "steps": [asdict(s) for s in outer.steps],
    }
    with atomic.atomic_dir(out / STATE_DIR) as tmp:
        save_tree(tree, tmp, PSRO_STATE, records={})


def load_outer(cfg: PsroConfig, out: Path) -> Outer:
    """The state ``save_outer`` wrote, its members reloaded from their folders."""
    atomic.recover_dir(out / STATE_DIR)  # a state a kill cut off while replacing it
    tree = read_state(out, PSRO_STATE, ("members", "samplers", "payoffs", "steps"))
    source = out / STATE_DIR / f"{PSRO_STATE}.json"
    with restoring(source):
        members = [reload_member(cfg, out, i) for i in range(len(tree["members"]))]
        if [m.policy_id for m in members] != list(tree["members"]):
            raise StateError(f"{source} lists members {tree['members']}, which {out} lacks")
        for m in members:
            m.load_sampler_state(tree["samplers"][m.policy_id])
        steps = [_step(d) for d in tree["steps"]]
        payoffs = tree["payoffs"]
    return Outer(members, tuple(np.asarray(p) for p in payoffs) if payoffs else None, steps)


def _step(d: dict) -> PsroStep:
    marginals = tuple(tuple(float(x) for x in m) for m in d["marginals"])
    gaps = {key: tuple(float(x) for x in d.get(key, ())) for key in ("cce_gaps", "ce_gaps")}
    return PsroStep(**{**d, "marginals": marginals, **gaps})
