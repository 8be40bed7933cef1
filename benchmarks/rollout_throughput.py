"""Rollout engine throughput against the raw batched forward pass of the same model.

The engine plays ``--games`` games at once; every round it batches all pending
decisions into one forward pass. The raw baseline runs exactly the model inputs the
engine built (the same prompts and candidate actions, in the same batch sizes) and
nothing else: no environment, no tokenisation, no sampling, no bookkeeping. Tokens
are prompt tokens plus candidate-action tokens. The
ratio engine / raw is the share of model throughput that the engine keeps.

    python benchmarks/rollout_throughput.py --game kuhn_poker --games 512 --repeats 3
"""

from __future__ import annotations

import argparse
import json
import platform
import time

import torch

from coplay.envs.registry import make_env
from coplay.models.loading import ModelConfig, build_policy
from coplay.policies.scoring import choice_sequence_logps
from coplay.rollout.engine import play_episodes
from coplay.train.trainer import game_text


class Recording:
    """Wraps a policy and records the observations of every batched call."""

    def __init__(self, policy):
        self.inner, self.batches = policy, []
        self.policy_id, self.version = policy.policy_id, policy.version

    def act(self, observations):
        self.batches.append(list(observations))
        return self.inner.act(observations)


def engine_run(policy, make, games: int, seed: int):
    rec = Recording(policy)
    n = make().spec.num_players
    t0 = time.perf_counter()
    eps = play_episodes(make, [[rec] * n] * games, [seed + i for i in range(games)])
    return time.perf_counter() - t0, eps, rec.batches


@torch.no_grad()
def raw_run(policy, batches) -> tuple[float, int]:
    """Time the model computation alone on the engine's exact inputs; return (s, tokens).

    Inputs are tokenised before the clock starts; what is timed is the batched
    forward pass over the prompts (plus candidate continuations when an action
    spans several tokens), exactly as the engine runs it.
    """
    inputs = [[policy._choice_item(o) for o in batch] for batch in batches]
    tokens = sum(len(p) + sum(len(c) for c in cs) for items in inputs for p, cs in items)
    t0 = time.perf_counter()
    for items in inputs:
        choice_sequence_logps(policy.model, items, temperature=policy.temperature)
    return time.perf_counter() - t0, tokens


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--game", default="kuhn_poker")
    ap.add_argument("--games", type=int, default=512)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=0, help="torch threads (0: default)")
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    make = lambda: make_env(args.game)  # noqa: E731
    text = game_text(make)
    policy = build_policy(ModelConfig(), corpus=text.texts, actions=text.actions, seed=0)
    engine_run(policy, make, 32, seed=10**6)  # warm-up
    rows = []
    for r in range(args.repeats):
        eng_s, eps, batches = engine_run(policy, make, args.games, seed=r * args.games)
        raw_s, tokens = raw_run(policy, batches)
        decisions = sum(len(b) for b in batches)
        rows.append(
            {
                "engine_decisions_per_s": decisions / eng_s,
                "raw_decisions_per_s": decisions / raw_s,
                "engine_tokens_per_s": tokens / eng_s,
                "raw_tokens_per_s": tokens / raw_s,
                "ratio": raw_s / eng_s,
                "decisions": decisions,
                "batches": len(batches),
            }
        )
    best = max(rows, key=lambda x: x["ratio"])
    median = sorted(rows, key=lambda x: x["ratio"])[len(rows) // 2]
    print(
        json.dumps(
            {
                "game": args.game,
                "games": args.games,
                "threads": torch.get_num_threads(),
                "machine": f"{platform.machine()} {torch.get_num_threads()} threads",
                "median": median,
                "best": best,
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
