"""The talk games (negotiation, signalling, dilemma): before and after their presets.

    OMP_NUM_THREADS=1 python benchmarks/talk_games.py --presets negotiation signalling dilemma

For each preset: train it under ``--out/<preset>`` (``--reuse`` skips a finished run),
then play ``--episodes`` games on fixed seeds, apart from every training seed:

- *self-play*: the initial policy (the same config trained for 0 iterations, which
  ``setup`` builds from the seed) in both seats, then the trained one; each seat's
  return, welfare and the game's own metrics (deal rate, success rate, cooperation);
- *trained vs initial*: the trained policy against the initial one, seats alternating;
  the trained policy's mean return there. In a general-sum game this is what a selfish
  learner improves even where self-play welfare falls (the dilemma).

With ``--league K`` the learner trains in a league instead (``coplay.population.league``: a
snapshot every K iterations, PFSP opponents, 20% self-play, ``--bots`` as members
from the start; under
``--out/<preset>-league``); the measurement is the same.

Prints a Markdown table and writes ``results-<presets>.json`` beside the runs.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import numpy as np

from coplay.envs.registry import game_metrics
from coplay.models.loading import load_policy
from coplay.population.league import run_league
from coplay.population.league_config import LeagueConfig
from coplay.rollout.engine import play_episodes
from coplay.train.settings import build_config
from coplay.train.trainer import Run, setup, train
from coplay.types import Policy

EVAL_SEED = 900_000


def play(run: Run, seats: list[list[Policy]]) -> list:
    """Episodes of ``seats`` (one seating per game) on the fixed evaluation seeds."""
    cfg = run.cfg
    return play_episodes(
        run.game.make,
        seats,
        [EVAL_SEED + i for i in range(len(seats))],
        invalid=cfg.game.invalid,
        max_turns=cfg.game.max_turns,
    )


def selfplay(run: Run, policy: Policy, episodes: int) -> dict[str, float]:
    """Self-play returns per seat, welfare and the game's registered metrics."""
    eps = play(run, [[policy, policy]] * episodes)
    out = {f"return_seat{s}": float(np.mean([e.returns[s] for e in eps])) for s in (0, 1)}
    out["welfare"] = out["return_seat0"] + out["return_seat1"]
    scores = game_metrics(run.cfg.game.name)
    return out | ({k: float(v) for k, v in scores(eps).items()} if scores else {})


def head_to_head(run: Run, trained: Policy, initial: Policy, episodes: int) -> float:
    """The trained policy's mean return against the initial one, seats alternating."""
    seats = [[trained, initial] if i % 2 == 0 else [initial, trained] for i in range(episodes)]
    eps = play(run, seats)
    return float(np.mean([e.returns[i % 2] for i, e in enumerate(eps)]))


def bench(
    preset: str,
    out: Path,
    overrides: list[str],
    episodes: int,
    reuse: bool,
    league: int = 0,
    bots: tuple[str, ...] = (),
) -> dict:
    cfg = build_config(preset=preset, overrides=overrides)
    run_dir = out / (f"{preset}-league" if league else preset)
    wall = float("nan")
    if not (reuse and (run_dir / "checkpoints" / "final").exists()):
        t0 = time.perf_counter()
        if league:
            run_league(LeagueConfig(run=cfg, snapshot_every=league, bots=list(bots)), run_dir)
        else:
            train(cfg, run_dir)
        wall = time.perf_counter() - t0
    with tempfile.TemporaryDirectory() as tmp:
        run = setup(cfg, Path(tmp))
    initial = run.trainees[0].policy
    initial.policy_id = "initial"
    trained = load_policy(run_dir / "checkpoints" / "final", seed=cfg.train.seed + 1)
    trained.policy_id = "trained"
    before = selfplay(run, initial, episodes)
    return {
        "preset": f"{preset} (league)" if league else preset,
        "wall_s": wall,
        "before": before,
        "after": selfplay(run, trained, episodes),
        "trained_vs_initial": head_to_head(run, trained, initial, episodes),
        "initial_vs_initial": before["welfare"] / 2,  # mean return per seat
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--presets", nargs="+", default=["negotiation", "signalling", "dilemma"])
    ap.add_argument("--out", default="runs/talk")
    ap.add_argument("--episodes", type=int, default=400)
    ap.add_argument("--reuse", action="store_true", help="skip training when a run exists")
    ap.add_argument("--league", type=int, default=0, help="snapshot every K: train in a league")
    ap.add_argument("--bots", nargs="*", default=[], help="scripted league members (random)")
    ap.add_argument("overrides", nargs="*", help="key=value overrides for every preset")
    args = ap.parse_args()
    out = Path(args.out)
    results = [
        bench(p, out, args.overrides, args.episodes, args.reuse, args.league, tuple(args.bots))
        for p in args.presets
    ]
    out.mkdir(parents=True, exist_ok=True)
    name = "-".join(args.presets) + ("-league" if args.league else "")
    (out / f"results-{name}.json").write_text(json.dumps(results, indent=2))
    print("| preset | self-play before | self-play after | trained vs initial | wall |")
    print("|---|---|---|---|---|")
    for r in results:
        fmt = lambda m: ", ".join(f"{k} {v:.3f}" for k, v in m.items())  # noqa: E731
        print(
            f"| {r['preset']} | {fmt(r['before'])} | {fmt(r['after'])} | "
            f"{r['trained_vs_initial']:.3f} (initial vs itself {r['initial_vs_initial']:.3f}) "
            f"| {r['wall_s']:.0f} s |"
        )


if __name__ == "__main__":
    main()
