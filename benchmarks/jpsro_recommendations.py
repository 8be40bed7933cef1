"""JPSRO(CE) with one response an iteration against one per recommended member.

    python benchmarks/jpsro_recommendations.py --game kuhn_poker --iterations 6
    python benchmarks/jpsro_recommendations.py --game openspiel:first_sealed_auction --iterations 10

Runs PSRO with OpenSpiel's exact best responses (``oracle=exact``, no language model
trained) and a conditional meta-solver (``--solver``, default ``ce``) twice, once per
``recommendations`` setting: ``likeliest`` (one response an iteration, against each
seat's likeliest recommendation) and ``each`` (full JPSRO(CE): one per member the joint
recommends, a copy of a member left out). Prints, per iteration, the members, the
joint's CE gap and CCE gap in the full game, the recommendations answered and the new
members that joined, then each arm's wall time; ``--json`` writes all of it. The exact oracle makes the comparison about the algorithm alone: an LM oracle adds
its own shortfall to every response.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

from coplay.population.metagame import RECOMMENDATIONS
from coplay.population.psro import run_psro
from coplay.population.psro_config import CONDITIONAL_SOLVERS, PsroConfig
from coplay.train.settings import build_config

SMALL = ["model.tiny.hidden_size=32", "model.tiny.intermediate_size=64", "model.tiny.num_layers=1"]
"""The members are exact tables; the model is built only for the first member's config."""


def run_arm(game: str, iterations: int, solver: str, mode: str) -> dict:
    """One PSRO run; its steps' gaps and response counts and its wall time."""
    run = build_config(preset="kuhn-selfplay", overrides=[*SMALL, f"game.name={game}"])
    cfg = PsroConfig(
        run=run,
        iterations=iterations,
        initial="random",
        oracle="exact",
        meta_solver=solver,
        recommendations=mode,
    )
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory() as out:
        res = run_psro(cfg, out)
    steps = [
        {
            "iteration": s.iteration,
            "members": s.members,
            "ce_gap": s.ce_gap,
            "cce_gap": s.cce_gap,
            "responses": len(s.response_values),
        }
        for s in res.steps
    ]
    for step, after in zip(steps, [*steps[1:], None], strict=True):
        step["joined"] = (
            len(res.members) - step["members"]
            if after is None
            else (after["members"] - step["members"])
        )
    return {"members": len(res.members), "wall_s": time.perf_counter() - t0, "steps": steps}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--game", default="kuhn_poker", help="a 2-player game with exact evaluation")
    ap.add_argument("--iterations", type=int, default=6)
    ap.add_argument("--solver", default="ce", choices=sorted(CONDITIONAL_SOLVERS))
    ap.add_argument("--json", type=Path, help="write the results here")
    args = ap.parse_args()
    results = {}
    for mode in RECOMMENDATIONS:
        arm = results[mode] = run_arm(args.game, args.iterations, args.solver, mode)
        print(f"{mode}: {arm['members']} members, {arm['wall_s']:.1f} s")
        print("  iteration  members  CE gap     CCE gap    answered  joined")
        for s in arm["steps"]:
            print(
                f"  {s['iteration']:9d}  {s['members']:7d}  {s['ce_gap']:.3e}  "
                f"{s['cce_gap']:.3e}  {s['responses']:8d}  {s['joined']:6d}"
            )
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
