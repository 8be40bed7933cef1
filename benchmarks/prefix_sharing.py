"""Training-iteration time with the shared prompt prefix run once per group, and without.

Game prompts open with the same rules text; ``coplay.policies.prefixes`` plans the
groups of a batch's prompts by shared prefix (``prefix_plan``), and
``coplay.policies.scoring.forward_shared`` runs each group's prefix once. This benchmark times one preset's rollout
(the training loop's plan and play, ``collect``) and learner update (``learn``) both
ways in one process, on the same episodes, alternating the two modes so drift on a
noisy machine hits both alike.
"Off" is the plain path: one left-padded batch, every row run in full.

    python benchmarks/prefix_sharing.py --preset tictactoe-perfect --repeats 5
"""

from __future__ import annotations

import argparse
import contextlib
import json
import platform
import statistics
import tempfile
import time
from pathlib import Path
from unittest import mock

import torch

from coplay.policies import choices, scoring
from coplay.train.loop import Run, make_plan
from coplay.train.settings import build_config
from coplay.train.trainer import setup
from coplay.types import Episode


def collect(run: Run, it: int) -> list[Episode]:
    """One iteration's games, planned and played as the training loop does."""
    plan, _ = make_plan(run, it)
    return run.source.play(plan, run.policies).episodes


def learn(run: Run, episodes: list[Episode]) -> None:
    """The learner's advantages and update on ``episodes``."""
    run.trainees[0].learn(episodes, run.rng)


@contextlib.contextmanager
def sharing(on: bool):
    """Prefix sharing as shipped, or switched off (one plain batch, nothing shared)."""
    if on:
        yield
        return
    with (
        mock.patch.object(choices, "prefix_plan", lambda seqs, max_groups=4, **kw: None),
        mock.patch.object(
            scoring, "prefix_groups", lambda seqs, max_groups=4, **kw: [list(range(len(seqs)))]
        ),
        mock.patch.object(scoring, "shared_prefix_len", lambda seqs: 0),
    ):
        yield


def timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--preset", default="tictactoe-perfect")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    cfg = build_config(preset=args.preset)
    with tempfile.TemporaryDirectory() as tmp:
        run = setup(cfg, Path(tmp))
        episodes = collect(run, 1)
        times: dict[str, dict[str, list[float]]] = {
            m: {"collect": [], "learn": []} for m in ("on", "off")
        }
        for r in range(args.repeats):
            for mode in ("on", "off") if r % 2 == 0 else ("off", "on"):
                with sharing(mode == "on"):
                    times[mode]["collect"].append(timed(lambda it=2 + r: collect(run, it)))
                    times[mode]["learn"].append(timed(lambda: learn(run, episodes)))
    med = {m: {k: statistics.median(v) for k, v in t.items()} for m, t in times.items()}
    print(
        json.dumps(
            {
                "preset": args.preset,
                "machine": f"{platform.machine()}, {torch.get_num_threads()} torch thread(s)",
                "decisions": sum(len(e.turns) for e in episodes),
                "median_s": med,
                "speedup_collect": med["off"]["collect"] / med["on"]["collect"],
                "speedup_learn": med["off"]["learn"] / med["on"]["learn"],
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
