"""A league of frozen snapshots against plain self-play at equal compute (tic-tac-toe).

    OMP_NUM_THREADS=1 python benchmarks/league.py --part league --out runs/bench_league
    OMP_NUM_THREADS=1 python benchmarks/league.py --part selfplay --out runs/bench_league
    OMP_NUM_THREADS=1 python benchmarks/league.py --part crossplay --out runs/bench_league

Both arms train preset tictactoe-selfplay's model and loss for ``--iterations``
iterations of the same number of games (equal compute: the league's frozen members
play without gradients, so it spends slightly less). The league samples by PFSP
("hard", p=2), keeps 20% plain self-play and snapshots every ``--snapshot-every``
iterations or when the learner scores 0.7 against the league. Scores: loss rate
against the perfect player (each seat) and random; then ``crossplay`` plays every
pairing of the two final learners and the league's snapshots
(``coplay.eval.crossplay``) and rates them. Writes ``<out>/<part>.json``.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from coplay.eval.crossplay import cross_play, rate_cross_play, to_json
from coplay.models.loading import load_policy
from coplay.population.league import run_league
from coplay.population.league_config import LeagueConfig
from coplay.train.settings import build_config
from coplay.train.trainer import train

GAME = "tic_tac_toe"


def run_config(args: argparse.Namespace):
    return build_config(
        preset="tictactoe-selfplay",
        overrides=[
            f"train.iterations={args.iterations}",
            f"train.seed={args.seed}",
            f"train.eval_every={args.eval_every}",
            f"rollout.games_per_iter={args.games}",
            "train.save_every=0",
        ],
    )


def final_eval(summary: dict) -> dict:
    return {k: v for k, v in summary.items() if k.startswith("final/eval/")}


def league_arm(args: argparse.Namespace) -> dict:
    cfg = LeagueConfig(
        run=run_config(args), sampler=args.sampler, snapshot_every=args.snapshot_every
    )
    res = run_league(cfg, args.out / "league")
    summary = json.loads((args.out / "league" / "summary.json").read_text())
    return {
        "snapshots": [list(s) for s in res.snapshots],
        "elo": summary["elo"],
        "win_rates": summary["win_rates"],
        "games": summary["games"],
        **final_eval(summary),
        "wall_s": res.wall_s,
    }


def selfplay_arm(args: argparse.Namespace) -> dict:
    t0 = time.perf_counter()
    summary = train(run_config(args), args.out / "selfplay")
    return {**final_eval(summary), "wall_s": time.perf_counter() - t0}


def crossplay_part(args: argparse.Namespace) -> dict:
    paths = {
        "selfplay": args.out / "selfplay" / "checkpoints" / "final",
        "league": args.out / "league" / "checkpoints" / "final",
    }
    for snap in sorted((args.out / "league" / "snapshots").iterdir()):
        paths[f"snap{int(snap.name.removeprefix('iter_'))}"] = snap
    policies = {}
    for i, (name, path) in enumerate(paths.items()):
        policies[name] = load_policy(path, seed=100 + i)
        policies[name].policy_id = name
    res = cross_play(GAME, policies, episodes=args.crossplay_episodes, seed=1)
    return to_json(res, rate_cross_play(res))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--part", choices=["league", "selfplay", "crossplay"], required=True)
    p.add_argument("--out", type=Path, default=Path("runs/bench_league"))
    p.add_argument("--iterations", type=int, default=40)
    p.add_argument("--games", type=int, default=64, help="games per iteration")
    p.add_argument("--eval-every", type=int, default=20)
    p.add_argument("--snapshot-every", type=int, default=10)
    p.add_argument("--sampler", default="pfsp")
    p.add_argument("--crossplay-episodes", type=int, default=100)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    parts = {"league": league_arm, "selfplay": selfplay_arm, "crossplay": crossplay_part}
    result = parts[args.part](args)
    (args.out / f"{args.part}.json").write_text(json.dumps(result, indent=2))
    print(json.dumps(result)[:4000])


if __name__ == "__main__":
    main()
