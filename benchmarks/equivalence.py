"""Check that a change of code keeps every result: short runs of every scheme, compared.

Runs each case below (every bundled preset, a roster, a league, PSRO, and the planning
features off their presets) for a few iterations with the CLI, and writes every
metric row they log (timing keys ``perf/*`` and ``wall_s`` left out) to one JSON file.
Two such files, one written on the code before a change and one after, are then
compared value by value: a refactor that keeps the random draws and the arithmetic
gives identical rows, so the presets' long runs reproduce exactly.

    python benchmarks/equivalence.py --write before.json            # on the old commit
    python benchmarks/equivalence.py --write after.json             # on the new one
    python benchmarks/equivalence.py --compare before.json after.json

``--before`` uses the config keys of the code before the run config's sections were
nested (for a file written from that code with this script).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
from pathlib import Path

SHORT = ["train.save_every=0", "train.eval_episodes=20"]
KUHN_SHORT = [
    "train",
    "--preset",
    "kuhn-selfplay",
    "train.iterations=3",
    "train.eval_every=3",
    "rollout.games_per_iter=32",
]
"""Three small iterations of the Kuhn preset, which the feature cases switch parts on in."""
CASES: dict[str, dict] = {
    "kuhn-selfplay": {
        "args": [
            "train",
            "--preset",
            "kuhn-selfplay",
            "train.iterations=4",
            "train.eval_every=2",
            "rollout.games_per_iter=64",
        ]
    },
    "tictactoe-perfect": {
        "args": [
            "train",
            "--preset",
            "tictactoe-perfect",
            "train.iterations=5",
            "train.eval_every=5",
            "rollout.games_per_iter=128",
        ]
    },
    "leduc-selfplay": {
        "args": [
            "train",
            "--preset",
            "leduc-selfplay",
            "train.iterations=2",
            "train.eval_every=2",
            "rollout.games_per_iter=32",
        ]
    },
    "signalling": {
        "args": ["train", "--preset", "signalling", "train.iterations=4", "train.eval_every=2"]
    },
    "explore-tis": {
        "args": [*KUHN_SHORT, "rollout.explore={share: 0.2, tis_cap: 1.0}"],
        "before": [*KUHN_SHORT, "rollout.explore=0.2", "loss.tis_cap=1.0"],
    },
    "gae-critic": {
        "args": [*KUHN_SHORT, "algo.estimator=gae", "algo.params={}", "rollout.group_size=1"]
    },
    "roster": {
        "args": [
            "train",
            "--preset",
            "kuhn-selfplay",
            "--roster",
            "{roster}",
            "train.iterations=3",
            "train.eval_every=3",
            "rollout.games_per_iter=32",
        ]
    },
    "league": {
        "args": [
            "league",
            "--preset",
            "kuhn-selfplay",
            "--snapshot-every",
            "2",
            "--sampler",
            "meta",
            "--bots",
            "random",
            "train.iterations=4",
            "train.eval_every=2",
            "rollout.games_per_iter=32",
        ]
    },
    "psro": {
        "args": [
            "psro",
            "--preset",
            "kuhn-selfplay",
            "--iterations",
            "2",
            "train.iterations=2",
            "train.eval_every=2",
            "rollout.games_per_iter=32",
        ]
    },
}
OTHER_PRESETS = [
    "bargaining-selfplay",
    "coop-selfplay",
    "dilemma",
    "frozenlake",
    "goofspiel-selfplay",
    "ipd-selfplay",
    "kuhn3-selfplay",
    "negotiation",
    "sokoban",
    "tictactoe-selfplay",
]
for _name in OTHER_PRESETS:
    CASES[_name] = {
        "args": [
            "train",
            "--preset",
            _name,
            "train.iterations=2",
            "train.eval_every=2",
            "rollout.games_per_iter=16",
        ]
    }

ROSTER = """policies:
  first: {kind: learner}
  second: {kind: learner, loss: {clip_low: 0.1}}
seats: [first, second]
"""


def rows(folder: Path) -> dict[str, list[dict]]:
    """Every JSONL file under ``folder`` (relative path -> rows), timing keys left out."""
    out = {}
    for f in sorted(folder.rglob("*.jsonl")):
        if "transcripts" in f.name:
            continue
        parsed = [json.loads(line) for line in f.read_text().splitlines() if line.strip()]
        out[str(f.relative_to(folder))] = [
            {k: v for k, v in r.items() if not k.startswith("perf/") and k != "wall_s"}
            for r in parsed
        ]
    return out


def run_case(name: str, case: dict, before: bool, tmp: Path) -> dict[str, list[dict]]:
    roster = tmp / "roster.yaml"
    roster.write_text(ROSTER)
    args = case["before"] if before and "before" in case else case["args"]
    args = [a.replace("{roster}", str(roster)) for a in args]
    out = tmp / name
    cmd = [sys.executable, "-m", "coplay.cli", *args[:1], "--out", str(out), *args[1:], *SHORT]
    if args[0] == "train":
        cmd.insert(cmd.index("--out"), "--quiet")
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode:
        return {"error": [{"stderr": done.stderr.strip().splitlines()[-1:]}]}
    return rows(out)


def compare(a: dict, b: dict) -> int:
    """Print the first difference of every case; returns how many cases differ, count
    a case that failed to run or ran on one side only among them: equal failures
    compare nothing."""
    bad = 0
    for case in sorted(a.keys() | b.keys()):
        x, y = a.get(case), b.get(case)
        if x is None or y is None:
            bad += 1
            print(f"only in {'first' if y is None else 'second'}: {case}")
            continue
        if "error" in x or "error" in y:
            bad += 1
            print(f"FAILED {case}: {(x.get('error') or y.get('error'))[0]['stderr']}")
            continue
        diff = _first_diff(x, y, case)
        if diff:
            bad += 1
            print(f"DIFF {diff}")
        else:
            print(f"same {case}")
    return bad


def _first_diff(x, y, path: str) -> str | None:
    if isinstance(x, dict) and isinstance(y, dict):
        for k in sorted(x.keys() | y.keys()):
            if k not in x or k not in y:
                return f"{path}/{k}: only in {'first' if k in x else 'second'}"
            d = _first_diff(x[k], y[k], f"{path}/{k}")
            if d:
                return d
        return None
    if isinstance(x, list) and isinstance(y, list):
        if len(x) != len(y):
            return f"{path}: {len(x)} rows against {len(y)}"
        for i, (u, v) in enumerate(zip(x, y, strict=True)):
            d = _first_diff(u, v, f"{path}[{i}]")
            if d:
                return d
        return None
    if isinstance(x, float) and isinstance(y, float) and math.isnan(x) and math.isnan(y):
        return None
    return None if x == y else f"{path}: {x!r} against {y!r}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--write", help="run the cases and write their rows to this JSON file")
    ap.add_argument("--compare", nargs=2, help="compare two files written with --write")
    ap.add_argument("--before", action="store_true", help="the config keys of the old code")
    ap.add_argument("--cases", help="comma-separated subset of the cases")
    args = ap.parse_args()
    if args.compare:
        a, b = (json.loads(Path(p).read_text()) for p in args.compare)
        sys.exit(1 if compare(a, b) else 0)
    names = args.cases.split(",") if args.cases else list(CASES)
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    result = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name in names:
            result[name] = run_case(name, CASES[name], args.before, Path(tmp))
            print(name, "error" if "error" in result[name] else "ok", flush=True)
    Path(args.write).write_text(json.dumps(result, indent=1, sort_keys=True))


if __name__ == "__main__":
    main()
