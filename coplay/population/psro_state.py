"""PSRO's outer state: what each iteration measured (and how it is logged), and the
population and meta-game saved after every iteration and loaded back to resume."""

from __future__ import annotations

from collections.abc import Sequence
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
    """The new response's value against the meta-strategy (mean over the seats that
    recommend what it answers), the mean of ``response_values`` where the iteration
    answered several; NaN on the last iteration, which trains none."""
    best_value: float
    """The exact best response's value against it (NaN where not exact or none
    trained), the mean of ``best_values`` where the iteration answered several."""
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
    response_values: tuple[float, ...] = ()
    """Each response's value, in the order the responses were answered (one per
    recommended member with ``recommendations=each``, an exact best response that a
    member plays already too, which adds no member); empty on the last iteration, and
    in the steps of a run saved before they were recorded."""
    best_values: tuple[float, ...] = ()
    """The exact best response's value for each, alike."""


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
    keys = ("cce_gaps", "ce_gaps", "response_values", "best_values")
    lists = {key: tuple(float(x) for x in d.get(key, ())) for key in keys}
    return PsroStep(**{**d, "marginals": marginals, **lists})


# --- what is logged ----------------------------------------------------------------


def step_metrics(step: PsroStep, members: list[Policy]) -> dict[str, float]:
    """The step's numbers, with each member's weight in the meta-strategy per seat
    (``psro/weight_seat0/psro:01``; a member that joined after it was solved has none),
    the CCE gap per seat (``psro/cce_gap_seat0``; none where not measured) and the CE
    gap where measured (``psro/ce_gap``, ``psro/ce_gap_seat0``). Each response's own
    values stay in the step (``response_values``): a key per member would draw a
    one-point chart for each in the report."""
    weights = {
        f"psro/weight_seat{seat}/{m.policy_id}": w
        for seat, marginal in enumerate(step.marginals)
        for m, w in zip(members, marginal, strict=False)
    }
    gaps = {f"psro/cce_gap_seat{seat}": g for seat, g in enumerate(step.cce_gaps)}
    gaps |= {"psro/ce_gap": step.ce_gap} if step.ce_gaps else {}
    gaps |= {f"psro/ce_gap_seat{seat}": g for seat, g in enumerate(step.ce_gaps)}
    numbers = {
        "psro/members": step.members,
        "psro/cce_gap": step.cce_gap,
        "psro/exploitability": step.exploitability,
        "psro/nash_conv": step.nash_conv,
        "psro/response_value": step.response_value,
        "psro/best_response_value": step.best_value,
        "perf/meta_s": step.meta_s,
        "perf/train_s": step.train_s,
        "perf/elapsed_s": step.elapsed_s,
    }
    return weights | gaps | numbers


def _finite(x: float) -> float | None:
    return x if np.isfinite(x) else None  # JSON has no NaN


def summary(members: Sequence[str], steps: Sequence[PsroStep]) -> dict:
    """A finished run's ``summary.json``: its members and the last step's numbers, with
    each step's gaps and exploitability (None where not measured)."""
    last = steps[-1]
    ce = {"final/ce_gap": last.ce_gap, "ce_gap": [_finite(s.ce_gap) for s in steps]}
    return {
        "members": list(members),
        "final/cce_gap": last.cce_gap,
        "final/exploitability": last.exploitability,
        "final/nash_conv": last.nash_conv,
        "final/marginals": [list(m) for m in last.marginals],
        "cce_gap": [_finite(s.cce_gap) for s in steps],
        "exploitability": [_finite(s.exploitability) for s in steps],
        "wall_s": last.elapsed_s,
    } | (ce if last.ce_gaps else {})
