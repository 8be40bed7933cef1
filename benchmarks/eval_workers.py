"""Sampled evaluation of a text policy on Ray workers: seconds for 0 (local) vs N workers.

The policy is the ``kuhn-text`` preset's model (untrained: its answers run to
``max_new_tokens``, which is what makes the evaluation generation-heavy). Each arm
asks K answers at every Kuhn information state (``SampledPolicy``: this process, or
``RaySource.tally`` on N workers started before timing) and evaluates exploitability
with its bootstrap. The first call ships the policy to the workers; later calls find
it there, as the trainer's periodic evaluations do (they ship only new weights). Every
arm must give the local estimate exactly, which the script checks. This process runs
torch on one thread (``--threads``), as each worker does: the arms then compare one
core with N; run it on a machine with N + 1 free cores.

    python benchmarks/eval_workers.py                  # K=128, 64 tokens, workers 0 and 2
    python benchmarks/eval_workers.py --quick          # K=8, 16 tokens: a check, not a timing
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Sequence
from pathlib import Path


def text_policy(max_new_tokens: int):
    """The kuhn-text preset's model, untrained, writing up to ``max_new_tokens``."""
    from coplay.envs.gameref import GameRef
    from coplay.models.build import build_policy
    from coplay.train.settings import build_config
    from coplay.train.trainer import game_text

    cfg = build_config(preset="kuhn-text", overrides=[f"model.max_new_tokens={max_new_tokens}"])
    text = game_text(GameRef("kuhn_poker").make, seed=0)
    return build_policy(cfg.model, corpus=text.texts, actions=text.actions, seed=0)


def timed(policy, k: int, sampler, replicates: int) -> tuple[float, float, dict]:
    """Seconds to sample every state's answers, seconds of the bootstrap after, and
    the estimate."""
    from coplay.eval.exact import to_table
    from coplay.eval.sampled import SampledPolicy, bootstrap, exploitability_metric

    sampled = SampledPolicy(policy, k=k, seed=0, sampler=sampler)
    t0 = time.perf_counter()
    to_table(sampled, "kuhn_poker")  # asks every information state
    t1 = time.perf_counter()
    est = bootstrap(exploitability_metric("kuhn_poker", None), sampled, replicates=replicates)
    t2 = time.perf_counter()
    return t1 - t0, t2 - t1, {name: e.value for name, e in est.items()} | {"tallies": sampled}


def run_arm(policy, workers: int, args) -> dict:
    """One arm: ``args.repeats`` evaluations (a fresh sample each), on ``workers``."""
    import ray

    from coplay.distributed.config import RayConfig
    from coplay.distributed.source import RaySource
    from coplay.envs.gameref import GameRef

    source = None
    if workers:
        source = RaySource(GameRef("kuhn_poker"), workers=workers, ray_config=RayConfig())
        ray.get([w.pid.remote() for w in source.workers])  # started (imports done)
    try:
        runs = [
            timed(policy, args.samples, source and source.tally, args.replicates)
            for _ in range(args.repeats)
        ]
    finally:
        if source is not None:
            source.close()
    sample_s = [r[0] for r in runs]
    return {
        "workers": workers,
        "first_sample_s": sample_s[0],
        "sample_s": statistics.median(sample_s[1:] or sample_s),
        "bootstrap_s": statistics.median(r[1] for r in runs),
        "exploitability": runs[0][2]["exploitability"],
        "tallies": runs[0][2]["tallies"].tallies,
    }


def main(argv: Sequence[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--samples", type=int, default=128, metavar="K", help="answers per state")
    ap.add_argument("--max-new-tokens", type=int, default=64, help="the preset's 64")
    ap.add_argument("--workers", type=int, nargs="+", default=[0, 2], help="arms to time")
    ap.add_argument("--repeats", type=int, default=3, help="evaluations per arm")
    ap.add_argument("--replicates", type=int, default=100, help="bootstrap replicates")
    ap.add_argument(
        "--threads", type=int, default=1, help="torch threads of this process (a worker has 1)"
    )
    ap.add_argument("--quick", action="store_true", help="K=8, 16 tokens, 2 repeats")
    ap.add_argument("--json", type=Path, help="also write the results here")
    args = ap.parse_args(argv)
    if args.quick:
        args.samples, args.max_new_tokens, args.repeats = 8, 16, 2

    import ray
    import torch

    if args.threads:
        torch.set_num_threads(args.threads)
    ray.init(address="local", num_cpus=max(args.workers), include_dashboard=False)
    policy = text_policy(args.max_new_tokens)
    result: dict = {
        "samples": args.samples,
        "max_new_tokens": args.max_new_tokens,
        "threads": torch.get_num_threads(),
        "arms": [],
    }
    local = None
    for workers in args.workers:
        arm = run_arm(policy, workers, args)
        tallies = arm.pop("tallies")
        local = local or tallies
        arm["same_estimate_as_first_arm"] = tallies == local
        result["arms"].append(arm)
        print(json.dumps(arm), flush=True)
    base = result["arms"][0]["sample_s"]
    for arm in result["arms"]:
        arm["speedup"] = base / arm["sample_s"]
    print(
        "speedup of the sampling vs the first arm:",
        [round(a["speedup"], 2) for a in result["arms"]],
    )
    if not all(a["same_estimate_as_first_arm"] for a in result["arms"]):
        raise SystemExit("the arms' estimates differ: distributed sampling is broken")
    if args.json:
        args.json.write_text(json.dumps(result, indent=2))
    return result


if __name__ == "__main__":
    main()
