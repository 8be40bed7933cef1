"""The garbage collector's passes during a training run: how many, how long, where.

Trains a preset in this process (``coplay.train.trainer.train``, one evaluation at the
end, no checkpoints between) and times every pass of Python's cyclic garbage
collector through ``gc.callbacks``, apart for passes inside the loop (``run_loop``)
and outside it (setup, the first evaluation, the final checkpoint). Printed per
generation: passes and seconds inside and outside the loop, the loop's seconds, the
collector's share of them, and how many objects the loop left out of its passes
(``gc.get_freeze_count`` read as the loop freezes). A loop of ``FROZEN_FROM``
iterations or more freezes its heap (``coplay.train.loop.heap_frozen``); ``--no-freeze``
runs it without, as it ran before; run both, one after the other, to compare.
``--json`` writes the numbers.

    OMP_NUM_THREADS=1 python benchmarks/collector.py --preset tictactoe-selfplay --iterations 60
    OMP_NUM_THREADS=1 python benchmarks/collector.py --preset tictactoe-selfplay --iterations 60 --no-freeze

Overrides after the options (``KEY=VALUE``, as in ``coplay train``) change the preset.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import platform
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import torch

from coplay.train import loop, trainer
from coplay.train.config import ConfigError
from coplay.train.settings import build_config


class Passes:
    """Every collector pass: its generation, its seconds, and whether the loop ran."""

    def __init__(self) -> None:
        self.in_loop = False
        self.started: float | None = None
        self.passes: list[tuple[int, float, bool]] = []

    def __call__(self, phase: str, info: dict) -> None:
        if phase == "start":
            self.started = time.perf_counter()
        elif self.started is not None:
            took = time.perf_counter() - self.started
            self.passes.append((info["generation"], took, self.in_loop))
            self.started = None

    def table(self) -> dict[str, dict[str, list[float]]]:
        """Per place ("loop", "outside") and generation: [passes, seconds]."""
        out = {where: {str(g): [0, 0.0] for g in range(3)} for where in ("loop", "outside")}
        for gen, took, inside in self.passes:
            cell = out["loop" if inside else "outside"][str(gen)]
            cell[0] += 1
            cell[1] += took
        return out


def measure(args: argparse.Namespace) -> dict:
    torch.set_num_threads(args.threads)
    passes = Passes()
    real_loop, real_frozen = trainer.run_loop, loop.heap_frozen
    loop_s, frozen = [], []

    @contextlib.contextmanager
    def counted_frozen():
        with real_frozen():
            frozen.append(gc.get_freeze_count())  # what the loop leaves alone
            yield

    def timed_loop(run, hooks, *, start, end):
        passes.in_loop = True
        began = time.perf_counter()
        try:
            return real_loop(run, hooks, start=start, end=end)
        finally:
            loop_s.append(time.perf_counter() - began)
            passes.in_loop = False

    gc.callbacks.append(passes)
    trainer.run_loop = timed_loop
    loop.heap_frozen = contextlib.nullcontext if args.no_freeze else counted_frozen
    try:
        with tempfile.TemporaryDirectory() as tmp:
            began = time.perf_counter()
            trainer.train(args.config, Path(tmp) / "run")
            wall = time.perf_counter() - began
    finally:
        gc.callbacks.remove(passes)
        trainer.run_loop, loop.heap_frozen = real_loop, real_frozen
    table = passes.table()
    in_loop = sum(s for _, s in table["loop"].values())
    return {
        "preset": args.preset,
        "iterations": args.iterations,
        "overrides": args.overrides,
        "frozen": not args.no_freeze and args.iterations >= loop.FROZEN_FROM,
        "machine": f"{platform.machine()}, {torch.get_num_threads()} torch thread(s)",
        "wall_s": wall,
        "loop_s": sum(loop_s),
        "passes": table,
        "loop_gc_share": in_loop / sum(loop_s),
        "frozen_objects": max(frozen, default=0),
    }


def main(argv: Sequence[str] | None = None, *, report: Callable[[str], None] = print) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--preset", default="tictactoe-selfplay")
    ap.add_argument("--iterations", type=int, default=60)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--no-freeze", action="store_true", help="the loop without heap_frozen")
    ap.add_argument("--json", type=Path, help="also write the result here")
    ap.add_argument("overrides", nargs="*", metavar="KEY=VALUE", help="as in coplay train")
    args = ap.parse_args(argv)
    if args.iterations < 1:
        ap.error(f"--iterations must be at least 1, got {args.iterations}")
    fixed = [f"train.iterations={args.iterations}", f"train.eval_every={args.iterations}"]
    try:
        args.config = build_config(
            preset=args.preset, overrides=[*fixed, "train.save_every=0", *args.overrides]
        )
    except ConfigError as err:
        ap.error(str(err))
    result = measure(args)
    for where, gens in result["passes"].items():
        cells = "  ".join(f"gen {g}: {n} passes {s:.3f} s" for g, (n, s) in gens.items())
        report(f"{where:8s} {cells}")
    report(f"loop     {result['loop_s']:.2f} s, collector {result['loop_gc_share']:.2%} of it")
    report(f"frozen   {result['frozen_objects']} objects left out of the loop's passes")
    if args.json:
        args.json.write_text(json.dumps(result, indent=2))
    return result


if __name__ == "__main__":
    main(sys.argv[1:])
