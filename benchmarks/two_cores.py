"""Ways to use the second core in one training iteration, measured on one preset.

For 1 and 2 torch threads (intra-op parallelism), times in one process on the same
plan and episodes, medians of ``--repeats``:

- ``play``: the iteration's rollout (``LocalSource.play``);
- ``learn``: the learner's update (``Trainee.learn``);
- ``sequential``: play then learn, as the training loop runs them;
- ``overlapped``: the next rollout played in a second Python thread, by a copy of the
  weights one version behind (staleness 1), while the update runs: the most that
  overlapping rollout with the update can give (the GIL is released inside torch ops).

Printed: each time and the speed-ups sequential / overlapped and 1 thread / 2 threads.

    python benchmarks/two_cores.py --preset kuhn-selfplay --repeats 5
"""

from __future__ import annotations

import argparse
import copy
import json
import statistics
import tempfile
import threading
import time
from pathlib import Path

import torch

from coplay.train.loop import make_plan
from coplay.train.settings import build_config
from coplay.train.trainer import setup


def timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def overlapped(play, learn) -> None:
    """``play`` in a second thread while ``learn`` runs in this one."""
    worker = threading.Thread(target=play)
    worker.start()
    learn()
    worker.join()


def measure(preset: str, threads: int, repeats: int) -> dict[str, float]:
    torch.set_num_threads(threads)
    with tempfile.TemporaryDirectory() as tmp:
        run = setup(build_config(preset=preset), Path(tmp))
        trainee = run.trainees[0]
        plan, _ = make_plan(run, 1)
        episodes = run.source.play(plan, run.policies).episodes
        stale = copy.copy(trainee.policy)  # the weights one version behind
        stale.model = copy.deepcopy(trainee.policy.model)
        players = {stale.policy_id: stale}
        play = lambda: run.source.play(plan, players)  # noqa: E731
        learn = lambda: trainee.learn(episodes, run.rng)  # noqa: E731
        learn()  # warm-up
        times: dict[str, list[float]] = {"play": [], "learn": [], "overlapped": []}
        for _ in range(repeats):
            times["play"].append(timed(play))
            times["learn"].append(timed(learn))
            times["overlapped"].append(timed(lambda: overlapped(play, learn)))
    med = {k: statistics.median(v) for k, v in times.items()}
    med["sequential"] = med["play"] + med["learn"]
    return med


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--preset", default="kuhn-selfplay")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    result = {t: measure(args.preset, t, args.repeats) for t in (1, 2)}
    for t, med in result.items():
        parts = " ".join(f"{k} {v:.3f}s" for k, v in med.items())
        print(f"{t} thread(s): {parts}; overlap x{med['sequential'] / med['overlapped']:.2f}")
    for part in ("play", "learn", "sequential"):
        print(f"{part}: 2 threads x{result[1][part] / result[2][part]:.2f} over 1")
    if args.json:
        args.json.write_text(json.dumps({"preset": args.preset, "median_s": result}, indent=2))


if __name__ == "__main__":
    main()
