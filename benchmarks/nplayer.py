"""Games beyond two-player zero-sum: self-play metrics before and after training.

    python benchmarks/nplayer.py --presets kuhn3-selfplay ipd-selfplay
    python benchmarks/nplayer.py --presets coop-selfplay -- train.iterations=20
    python benchmarks/nplayer.py --presets ipd-selfplay --league 5 -- train.iterations=15

With ``--league K`` the learner trains in a league instead of plain self-play
(``coplay.population.league``: a snapshot every K iterations, PFSP opponents, 20% self-play;
runs under ``--out/<preset>-league``); the measurement is the same.

For each preset: train under ``--out/<preset>`` (skipped with ``--reuse`` when a final
checkpoint exists), then play ``--episodes`` self-play games with the initial policy
(the same config trained for 0 iterations: ``setup`` builds it from the seed) and with
the final checkpoint, on the same seeds. Prints one row per (preset, policy): NashConv
where OpenSpiel can compute it, each seat's mean return, welfare, fairness (Jain's
index, min/max ratio) and cooperation rate; writes ``results.json`` beside the runs.
"""

from __future__ import annotations

import argparse
import json
import math
import tempfile
import time
from dataclasses import asdict
from pathlib import Path

from coplay.eval.exact import exploitability
from coplay.eval.welfare import WelfareResult, welfare_report
from coplay.models.loading import load_policy
from coplay.population.league import run_league
from coplay.population.league_config import LeagueConfig
from coplay.rollout.engine import play_episodes
from coplay.train.config import RunConfig
from coplay.train.settings import build_config
from coplay.train.trainer import Run, setup, train
from coplay.types import Policy

EVAL_SEED = 50_000
"""First seed of the evaluation games, apart from every training seed."""


def selfplay(run: Run, policy: Policy, episodes: int) -> WelfareResult:
    """``policy`` in every seat for ``episodes`` games on fixed seeds."""
    eps = play_episodes(
        run.game.make,
        [[policy] * run.spec.num_players] * episodes,
        [EVAL_SEED + i for i in range(episodes)],
        invalid=run.cfg.game.invalid,
        max_turns=run.cfg.game.max_turns,
    )
    return welfare_report(eps, min_return=run.spec.min_return, max_return=run.spec.max_return)


def measure(run: Run, policy: Policy, episodes: int) -> dict:
    """One table row: exact NashConv (when the trainer would compute it) and welfare."""
    cfg: RunConfig = run.cfg
    nash_conv = math.nan
    if run.exact:
        nash_conv = exploitability(policy, cfg.game.name, params=cfg.game.params).nash_conv
    rep = selfplay(run, policy, episodes)
    return {"nash_conv": nash_conv, **asdict(rep)}


def bench(
    preset: str, out: Path, overrides: list[str], episodes: int, reuse: bool, league: int = 0
) -> dict:
    cfg = build_config(preset=preset, overrides=overrides)
    run_dir = out / (f"{preset}-league" if league else preset)
    wall = math.nan
    if not (reuse and (run_dir / "checkpoints" / "final").exists()):
        t0 = time.perf_counter()
        if league:
            run_league(LeagueConfig(run=cfg, snapshot_every=league), run_dir)
        else:
            train(cfg, run_dir)
        wall = time.perf_counter() - t0
    with tempfile.TemporaryDirectory() as tmp:
        run = setup(cfg, Path(tmp))  # the initial policy: same seed, no training
    before = measure(run, run.trainees[0].policy, episodes)
    after = measure(run, load_policy(run_dir / "checkpoints" / "final"), episodes)
    name = f"{preset} (league)" if league else preset
    return {"preset": name, "wall_s": wall, "before": before, "after": after}


def row(preset: str, when: str, m: dict) -> str:
    seats = " ".join(f"{r['value']:.2f}" for r in m["returns_by_seat"])
    w, f, coop = m["welfare"], m["fairness"], m["cooperation_rate"]
    coop_s = "-" if coop is None else f"{coop:.2f}"
    return (
        f"| {preset} | {when} | {m['nash_conv']:.3f} | {seats} | "
        f"{w['value']:.2f} ± {w['high'] - w['value']:.2f} | {f['jain']:.3f} | "
        f"{f['min_max_ratio']:.3f} | {coop_s} |"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--presets", nargs="+", default=["kuhn3-selfplay"])
    ap.add_argument("--out", default="runs/nplayer")
    ap.add_argument("--episodes", type=int, default=1000)
    ap.add_argument("--reuse", action="store_true", help="skip training when a run exists")
    ap.add_argument("--league", type=int, default=0, help="snapshot every K: train in a league")
    ap.add_argument("overrides", nargs="*", help="key=value overrides for every preset")
    args = ap.parse_args()
    out = Path(args.out)
    results = [
        bench(p, out, args.overrides, args.episodes, args.reuse, args.league) for p in args.presets
    ]
    out.mkdir(parents=True, exist_ok=True)
    name = "results-" + "-".join(args.presets) + ("-league" if args.league else "") + ".json"
    (out / name).write_text(json.dumps(results, indent=2, default=str))
    print("| preset | policy | NashConv | mean return per seat | welfare ± 95% | Jain | "
          "min/max | cooperate |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|")
    for r in results:
        print(row(r["preset"], "initial", r["before"]))
        print(row(r["preset"], "trained", r["after"]))
    for r in results:
        print(f"{r['preset']}: training wall time {r['wall_s']:.0f} s")


if __name__ == "__main__":
    main()
