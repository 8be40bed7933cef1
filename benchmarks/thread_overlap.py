"""Can the game's Python run beside the model's forward in a second thread?

An engine could step one half of its games while the model scores the other half,
if the forward released the interpreter lock for most of its time. This measures
whether it does: the rollout benchmark's ``raw`` arm (the model's work of a recorded
rollout) and its ``game`` arm (the game alone, pure Python around pyspiel), each alone
and then together, the forward in a worker thread, alternating, medians of
``--repeats``. Overlap pays only if the pair's wall time is well under the sum of the
two alone; the forward's own time under contention says what the lock costs it.

    python benchmarks/thread_overlap.py --game tic_tac_toe --games 256 --repeats 5
"""

from __future__ import annotations

import argparse
import statistics
import sys
import threading
import time
from collections.abc import Sequence

import torch
from rollout_throughput import build_groups, engine_run, game_run, raw_run

from coplay.envs.gameref import GameRef
from coplay.envs.openspiel_games import UnknownGameError
from coplay.models.build import ModelConfig, build_policy
from coplay.train.trainer import game_text


def together(policy, groups, game: GameRef, seeds: Sequence[int]) -> tuple[float, float, float]:
    """(wall, forward, game) seconds with the forward in a worker thread."""
    out: dict[str, float] = {}
    worker = threading.Thread(target=lambda: out.update(raw=raw_run(policy, groups)))
    start = time.perf_counter()
    worker.start()
    played, _ = game_run(game, seeds)
    worker.join()
    return time.perf_counter() - start, out["raw"], played


def main(argv: Sequence[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--game", default="tic_tac_toe")
    ap.add_argument("--games", type=int, default=256, help="games of the recorded rollout")
    ap.add_argument("--game-games", type=int, default=2000, help="games the game arm plays")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument(
        "--switch", type=float, default=None, help="sys.setswitchinterval (s); default Python's"
    )
    args = ap.parse_args(argv)
    try:
        _ = GameRef(args.game).spec  # an unknown game: one line, before a model is built
    except UnknownGameError as err:
        ap.error(str(err))
    torch.set_num_threads(1)
    if args.switch:
        sys.setswitchinterval(args.switch)
    game = GameRef(args.game)
    text = game_text(game.make)
    policy = build_policy(ModelConfig(), corpus=text.texts, actions=text.actions, seed=0)
    _, batches, _ = engine_run(policy, game, args.games, seed=0)
    groups = [build_groups(policy, b) for b in batches]
    seeds = range(args.game_games)
    runs: dict[str, list[float]] = {k: [] for k in ("raw", "game", "wall", "raw_t", "game_t")}
    for _ in range(args.repeats):
        runs["raw"].append(raw_run(policy, groups))
        runs["game"].append(game_run(game, seeds)[0])
        wall, raw_t, game_t = together(policy, groups, game, seeds)
        runs["wall"].append(wall)
        runs["raw_t"].append(raw_t)
        runs["game_t"].append(game_t)
    med = {k: statistics.median(v) * 1e3 for k, v in runs.items()}
    print(
        f"alone: forward {med['raw']:.0f} ms, game {med['game']:.0f} ms (sum {med['raw'] + med['game']:.0f})"
    )
    print(
        f"together: wall {med['wall']:.0f} ms; forward {med['raw_t']:.0f} ms, "
        f"game {med['game_t']:.0f} ms"
    )
    print(f"wall / sum alone {med['wall'] / (med['raw'] + med['game']):.3f}")
    return med


if __name__ == "__main__":
    main()
