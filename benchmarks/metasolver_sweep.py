"""Every registered meta-solver on random games: failures, equilibrium accuracy, time.

    OMP_NUM_THREADS=1 python benchmarks/metasolver_sweep.py --games 500 --old e649e69

Games: shapes 2x2 to 10x10 (square and rectangular) for two players, 2x2x2, 3x3x3 and
2x2x2x2, half of them zero-sum (the last player's payoff is minus the others' sum),
half general-sum; payoffs standard normal, or small integers (-2..2, many ties: the
degenerate case) for every fourth game. Game ``i`` is drawn from seed ``i``.

Per solver: failures (an exception, or an answer that is not a distribution of the
right shape), the largest CE (``ce``, ``mwce``) or CCE (``cce``, ``mwcce``) deviation
gain, for ``nash`` the largest gap between its value and that of OpenSpiel's
``lp_solver.solve_zero_sum_matrix_game`` (2-player zero-sum games only: ``nash``
refuses the others), and solve time. ``--old REV`` also runs the solvers whose code
changed (nash, ce, cce, mwce, mwcce) as they were at git revision ``REV`` (read with
``git show``), to record how often they failed. Prints a markdown table.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import io
import subprocess
import sys
import tempfile
import time
import types
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pyspiel
from open_spiel.python.algorithms import lp_solver

from coplay.eval.meta_programs import max_deviation_gain
from coplay.eval.meta_solution import MetaSolution
from coplay.eval.metasolvers import META_SOLVERS

SHAPES = [(k, k) for k in range(2, 11)] + [(2, 5), (7, 3), (4, 9), (2, 2, 2), (3, 3, 3)]
SHAPES += [(2, 2, 2, 2)]
CHANGED = ("nash", "ce", "cce", "mwce", "mwcce")
COARSE = {"ce": False, "mwce": False, "cce": True, "mwcce": True}


@dataclass(frozen=True)
class Game:
    seed: int
    payoffs: list[np.ndarray]
    zero_sum: bool


def random_game(seed: int) -> Game:
    """Game ``seed``: its shape cycles through SHAPES, zero-sum every other cycle."""
    shape = SHAPES[seed % len(SHAPES)]
    zero_sum = (seed // len(SHAPES)) % 2 == 0
    rng = np.random.default_rng(seed)
    draw = (
        (lambda: rng.integers(-2, 3, size=shape).astype(float))
        if seed % 4 == 3
        else (lambda: rng.normal(size=shape))
    )
    payoffs = [draw() for _ in shape]
    if zero_sum:
        payoffs[-1] = -np.sum(payoffs[:-1], axis=0)
    return Game(seed, payoffs, zero_sum)


def openspiel_value(payoffs: list[np.ndarray]) -> float:
    """Player 0's value by OpenSpiel's zero-sum LP."""
    game = pyspiel.create_matrix_game(payoffs[0].tolist(), payoffs[1].tolist())
    return float(lp_solver.solve_zero_sum_matrix_game(game)[2])


@dataclass
class Tally:
    games: int = 0
    failures: list[str] = field(default_factory=list)
    gain: float = 0.0
    value_gap: float = 0.0
    times: list[float] = field(default_factory=list)


def is_distribution(sol: MetaSolution, shape: tuple[int, ...]) -> bool:
    parts = [sol.joint, *sol.marginals]
    return (
        sol.joint.shape == shape
        and [m.shape for m in sol.marginals] == [(k,) for k in shape]
        and all(np.all(np.isfinite(p)) and np.all(p >= 0) for p in parts)
        and all(abs(p.sum() - 1.0) < 1e-9 for p in parts)
    )


def run_one(name: str, solver: Callable, game: Game, tally: Tally, reference: dict) -> None:
    if name == "nash" and not (game.zero_sum and len(game.payoffs) == 2):
        return  # nash refuses general-sum and n-player games by design
    shape = game.payoffs[0].shape
    tally.games += 1
    start = time.perf_counter()
    try:
        with contextlib.redirect_stdout(io.StringIO()):  # α-rank's sweep prints its retries
            sol = solver(game.payoffs)
    except Exception as err:  # noqa: BLE001 - every exception is a failure to count
        tally.failures.append(f"seed {game.seed} {shape}: {type(err).__name__}: {err}"[:200])
        return
    finally:
        tally.times.append(time.perf_counter() - start)
    if not is_distribution(sol, shape):
        tally.failures.append(f"seed {game.seed} {shape}: not a distribution")
        return
    if name in COARSE:
        gain = max_deviation_gain(game.payoffs, sol.joint, coarse=COARSE[name])
        tally.gain = max(tally.gain, gain)
    if name == "nash":
        if game.seed not in reference:
            reference[game.seed] = openspiel_value(game.payoffs)
        value = float(sol.marginals[0] @ game.payoffs[0] @ sol.marginals[1])
        tally.value_gap = max(tally.value_gap, abs(value - reference[game.seed]))


def old_module(rev: str) -> types.ModuleType:
    """coplay/eval/metasolvers.py as it was at git revision ``rev``, from before the
    solvers were split into modules of their own (a later one: its own checkout)."""
    repo = Path(__file__).resolve().parents[1]
    src = subprocess.run(
        ["git", "show", f"{rev}:coplay/eval/metasolvers.py"],
        cwd=repo,
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    if "meta_programs" in src:  # its solvers live in modules that import this tree's coplay
        raise SystemExit(
            f"--old {rev}: the meta-solvers were split into several modules there; "
            "run this benchmark in a checkout of that revision instead"
        )
    path = Path(tempfile.mkdtemp()) / "old_metasolvers.py"
    path.write_text(src)
    spec = importlib.util.spec_from_file_location("old_metasolvers", path)
    module = sys.modules[spec.name] = importlib.util.module_from_spec(spec)  # for dataclasses
    spec.loader.exec_module(module)
    return module


def row(label: str, t: Tally, name: str) -> str:
    gain = f"{t.gain:.1e}" if name in COARSE else "–"
    gap = f"{t.value_gap:.1e}" if name == "nash" else "–"
    times = np.asarray(t.times) * 1e3
    return (
        f"| {label} | {t.games} | {len(t.failures)} | {gain} | {gap} | "
        f"{times.mean():.1f} | {times.max():.0f} |"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--games", type=int, default=500)
    parser.add_argument("--old", help="git revision whose solvers to compare with")
    parser.add_argument("--solvers", nargs="*", default=list(META_SOLVERS))
    args = parser.parse_args()
    # OpenSpiel's default LP solver (ECOS) no longer ships with cvxpy: same LP, Clarabel.
    lp_solver.LinearProgram.solve.__defaults__ = ("CLARABEL", {})
    warnings.simplefilter("ignore", RuntimeWarning)  # α-rank's exp overflows at large α
    games = [random_game(seed) for seed in range(args.games)]
    runs = [(name, name, META_SOLVERS[name]) for name in args.solvers]
    if args.old:
        old = old_module(args.old)
        runs += [
            (f"{n} (at {args.old})", n, old.META_SOLVERS[n]) for n in CHANGED if n in args.solvers
        ]
    reference: dict[int, float] = {}
    tallies = {}
    for label, name, solver in runs:
        tally = tallies[label] = Tally()
        for game in games:
            run_one(name, solver, game, tally, reference)
        seconds = sum(tally.times)
        print(
            f"{label}: {len(tally.failures)} failures, {seconds:.0f} s", file=sys.stderr, flush=True
        )
    print(
        "| solver | games | failures | max (C)CE deviation gain | max Nash value gap "
        "vs OpenSpiel | mean time (ms) | max time (ms) |"
    )
    print("|---|---|---|---|---|---|---|")
    for label, name, _ in runs:
        print(row(label, tallies[label], name))
    failures = [f"- {label}: {f}" for label, t in tallies.items() for f in t.failures[:3]]
    if failures:
        print("\nFailures (the first three per solver):\n" + "\n".join(failures))


if __name__ == "__main__":
    main()
