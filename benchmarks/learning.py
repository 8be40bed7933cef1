"""Learning quality of a preset over several seeds: metrics before and after, wall time.

    python benchmarks/learning.py --preset kuhn-selfplay --seeds 0 1 2
    python benchmarks/learning.py --preset tictactoe-selfplay --seeds 0 -- train.iterations=100

Each seed trains a fresh run under ``--out/<preset>/seed<k>``; the table printed at
the end (and ``results.json`` beside the runs) is what docs/results.md records.
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

from coplay.train.settings import build_config
from coplay.train.trainer import train


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--preset", default="kuhn-selfplay")
    ap.add_argument("--seeds", type=int, nargs="+", default=[0])
    ap.add_argument("--out", default="runs/bench")
    ap.add_argument("overrides", nargs="*", help="key=value overrides for every seed")
    args = ap.parse_args()
    root = Path(args.out) / args.preset
    results = []
    for seed in args.seeds:
        cfg = build_config(preset=args.preset, overrides=[*args.overrides, f"train.seed={seed}"])
        summary = train(cfg, root / f"seed{seed}")
        results.append({"seed": seed, **summary})
        print(json.dumps({k: v for k, v in results[-1].items() if "eval/" in k or k == "wall_s"}))
    root.mkdir(parents=True, exist_ok=True)
    (root / "results.json").write_text(json.dumps(results, indent=2))
    print(f"\n{args.preset}, seeds {args.seeds}")
    for key in sorted({k for r in results for k in r if k.startswith(("initial/", "final/"))}) + [
        "wall_s"
    ]:
        vals = [r[key] for r in results if isinstance(r.get(key), int | float)]
        sd = statistics.stdev(vals) if len(vals) > 1 else 0.0
        print(
            f"  {key:40s} {statistics.mean(vals):8.4f} ± {sd:.4f}   {[round(v, 4) for v in vals]}"
        )


if __name__ == "__main__":
    main()
