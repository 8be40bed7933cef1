"""How well ``prefix_plan`` picks among a batch's ways to run, and what ``CALL_TOKENS`` fits.

    python benchmarks/prefix_plan.py --presets tictactoe-perfect kuhn-selfplay
    python benchmarks/prefix_plan.py --call-tokens 64 192 512 1024 --json plans.json
    python benchmarks/prefix_plan.py --presets kuhn-selfplay -- model.tiny.hidden_size=256

For each preset, one iteration's episodes are played; the trainee's decisions are
shuffled and the distinct choice items of the first ``--sizes`` of them form a batch.
Every way the batch can run is timed (medians of ``--repeats``), scoring alone
(``no_grad``, as the rollout scores) and with the backward pass (as the learner):
one plain padded batch, and the prefix groups that sharing up to each of the smallest
split points gives (``prefix_plan`` with each allowed number of groups). Then, for
each value of ``--call-tokens``, the plan the cost model would pick (the fewest tokens
run, padding included, plus that many tokens per model call) and its time against
the fastest plan's. Printed: each batch's plans (tokens run, calls, milliseconds) and
per value the summed excess over the fastest and the batches it misses. Overrides
after ``--`` (``KEY=VALUE``, as in ``coplay train``) change every preset, such as the
model's size: a call's fixed cost is the same, a token's grows with the model.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch

from coplay.policies import choices, prefixes
from coplay.train.config import ConfigError
from coplay.train.loop import make_plan
from coplay.train.settings import build_config
from coplay.train.trainer import setup


def plans(seqs: list) -> list[dict]:
    """Plain, then each distinct grouping: its rows, tokens run and model calls."""
    out = [{"plan": "plain", "groups": None, "tokens": len(seqs) * max(map(len, seqs)), "calls": 1}]
    for g in range(1, 5):
        groups = prefixes.prefix_plan(seqs, g, call_tokens=-(10**9))  # the most calls of <= g
        if any(p["groups"] is not None and len(p["groups"]) == len(groups) for p in out):
            continue
        tokens = calls = 0
        for rows in groups:
            part = [seqs[i] for i in rows]
            n = prefixes.shared_prefix_len(part) if len(part) > 1 else 0
            tokens += n + len(part) * (max(map(len, part)) - n)
            calls += 2 if n else 1
        out.append(
            {
                "plan": f"{len(groups)} group" + "s" * (len(groups) > 1),
                "groups": groups,
                "tokens": tokens,
                "calls": calls,
            }
        )
    return out


def timed(model, items, groups, grad: bool, repeats: int) -> float:
    """Median milliseconds of scoring ``items`` run as ``groups`` (None: plain)."""
    real = choices.prefix_plan
    choices.prefix_plan = lambda seqs, *a, **k: groups
    times = []
    try:
        for _ in range(repeats):
            start = time.perf_counter()
            if grad:
                model.train()
                table = choices.choice_table(model, items, temperature=1.0, pad_id=0)
                table.clamp_min(-50).sum().backward()
                model.eval()
            else:
                with torch.no_grad():
                    choices.choice_table(model, items, temperature=1.0, pad_id=0)
            times.append(time.perf_counter() - start)
    finally:
        choices.prefix_plan = real
    return statistics.median(times) * 1e3


def batches(
    preset: str, sizes: list[int], repeats: int, overrides: Sequence[str] = ()
) -> list[dict]:
    cfg = build_config(preset=preset, overrides=list(overrides))
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        run = setup(cfg, Path(tmp))
        trainee = run.trainees[0]
        plan, _ = make_plan(run, 1)
        episodes = run.source.play(plan, run.policies).episodes
        model = trainee.learner.policy.model
        decisions = [
            t.decision
            for e in episodes
            for tr in e.trajectories
            if tr.policy_id == trainee.name
            for t in tr.turns
            if t.decision.choice_ids
        ]
        np.random.default_rng(0).shuffle(decisions)
        for size in sizes:
            part = decisions[:size]
            items, _ = choices.distinct_items([(d.prompt_ids, d.choice_ids) for d in part])
            seqs = [p for p, _ in items]
            for grad in (False, True):
                options = plans(seqs)
                for o in options:
                    o["ms"] = timed(model, items, o["groups"], grad, repeats)
                    o.pop("groups")
                rows.append(
                    {
                        "preset": preset,
                        "decisions": len(part),
                        "items": len(items),
                        "grad": grad,
                        "plans": options,
                    }
                )
                shown = ", ".join(
                    f"{o['plan']}: {o['tokens']} tokens, {o['calls']} calls, {o['ms']:.1f} ms"
                    for o in options
                )
                print(
                    f"{preset} {len(part)} decisions ({len(items)} distinct), "
                    f"{'with backward' if grad else 'scoring'}: {shown}",
                    flush=True,
                )
    return rows


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--presets",
        nargs="+",
        default=["tictactoe-perfect", "kuhn-selfplay", "leduc-selfplay", "goofspiel-selfplay"],
    )
    ap.add_argument("--sizes", nargs="+", type=int, default=[32, 64, 128, 256, 512])
    ap.add_argument("--call-tokens", nargs="+", type=int, default=[64, 128, 192, 256, 512, 1024])
    ap.add_argument("--repeats", type=int, default=9)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--json", type=Path)
    ap.add_argument("overrides", nargs="*", metavar="KEY=VALUE", help="as in coplay train")
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    try:
        for preset in args.presets:  # every config checked before any is timed
            build_config(preset=preset, overrides=args.overrides)
    except ConfigError as err:
        ap.error(str(err))
    rows = [r for p in args.presets for r in batches(p, args.sizes, args.repeats, args.overrides)]
    verdicts = {}
    for cost in args.call_tokens:
        excess, missed = 0.0, []
        for r in rows:
            best = min(r["plans"], key=lambda o: o["ms"])
            pick = min(r["plans"], key=lambda o: o["tokens"] + cost * o["calls"])
            excess += pick["ms"] - best["ms"]
            if pick["ms"] > 1.02 * best["ms"]:
                missed.append(
                    f"{r['preset']} {r['items']}{' grad' if r['grad'] else ''}: "
                    f"{pick['plan']} {pick['ms'] / best['ms']:.2f}x {best['plan']}"
                )
        verdicts[cost] = {"excess_ms": excess, "missed": missed}
        print(
            f"CALL_TOKENS {cost}: {excess:.1f} ms over the fastest plans in all; "
            f"{len(missed)} of {len(rows)} batches more than 2% slower: {'; '.join(missed)}"
        )
    result = {"batches": rows, "call_tokens": verdicts}
    if args.json:
        args.json.write_text(json.dumps(result, indent=2))
    return result


if __name__ == "__main__":
    main()
