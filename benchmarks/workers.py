"""Ray rollout workers: iterations per second, weight broadcast time, and a projection.

1. Iterations per second of ``kuhn-selfplay`` played locally, by 2 synchronous
   workers, and by 2 asynchronous workers with ``max_staleness`` 1 and 2 (the first
   iteration, which starts the workers, is not timed).
2. Seconds to broadcast the weights of one update (``ray.put`` on the driver, then a
   worker's fetch and ``load_state_dict``) for the tiny model, a ~30M and a ~0.1B
   Qwen2-architecture model (``benchmarks/text_qwen2.py``'s shape).
3. A measured model of N workers on N cores: from the local run's rollout and update
   seconds per iteration and the tiny model's broadcast time, synchronous
   ``rollout / N + update + broadcast`` and asynchronous
   ``max(rollout / N, update + broadcast)`` seconds per iteration.

On a machine with fewer cores than workers + 1 the workers and the learner share
cores, and the measured ratios say so; the projection is what N free cores would give.

    python benchmarks/workers.py                 # 12 iterations of 128 games
    python benchmarks/workers.py --quick         # 3 iterations of 16 games, tiny model only
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from text_qwen2 import QWEN2_01B  # noqa: E402  (the end-to-end benchmark's 0.1B shape)

QWEN2_30M = {
    "hidden_size": 384,
    "intermediate_size": 1536,
    "num_hidden_layers": 6,
    "num_attention_heads": 6,
    "num_key_value_heads": 2,
}
MODES = {
    "local": {"workers": 0, "max_staleness": 0},
    "sync_2": {"workers": 2, "max_staleness": 0},
    "async_2_k1": {"workers": 2, "max_staleness": 1},
    "async_2_k2": {"workers": 2, "max_staleness": 2},
}


class Timer:
    """A loop hook keeping each iteration's end time and metrics."""

    def __init__(self) -> None:
        self.ends: list[float] = []
        self.metrics: list[dict[str, float]] = []

    def before(self, run, it) -> dict[str, float]:
        return {}

    def after(self, run, it, batch, metrics: Mapping[str, float]) -> dict[str, float]:
        self.ends.append(time.perf_counter())
        self.metrics.append(dict(metrics))
        return {}


def run_mode(name: str, overrides: Sequence[str], pool, iterations: int) -> dict:
    """One mode's run of ``iterations``; rates over iterations 2.. (1 warms up)."""
    from coplay.distributed.source import RaySource
    from coplay.envs.gameref import GameRef
    from coplay.train.config import build_config
    from coplay.train.loop import run_loop
    from coplay.train.trainer import setup

    mode = MODES[name]
    cfg = build_config(
        preset="kuhn-selfplay", overrides=[*overrides, f"train.iterations={iterations}"]
    )
    run = setup(cfg, Path(tempfile.mkdtemp()))
    if mode["workers"]:
        run.source = RaySource(
            GameRef(cfg.game.name, cfg.game.params),
            workers=mode["workers"],
            max_staleness=mode["max_staleness"],
            actors=pool[: mode["workers"]],
        )
    timer = Timer()
    run_loop(run, [timer], start=0, end=iterations)
    seconds = timer.ends[-1] - timer.ends[0]
    mean = lambda k: sum(m.get(k, 0.0) for m in timer.metrics[1:]) / (iterations - 1)  # noqa: E731
    return {
        "iterations_per_s": (iterations - 1) / seconds,
        "rollout_s": mean("perf/rollout_s"),
        "update_s": mean("perf/update_s"),
        "broadcast_s": mean("perf/broadcast_s"),
        "staleness_max": max(m.get("rollout/staleness_max", 0.0) for m in timer.metrics),
    }


def qwen2_state(shape: Mapping[str, int]) -> dict:
    """The state dict of a random Qwen2 model of ``shape`` (vocabulary 32768)."""
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(0)
    model = Qwen2ForCausalLM(Qwen2Config(**shape, vocab_size=32768, tie_word_embeddings=True))
    return model.state_dict()


def broadcast_seconds(state: Mapping, repeats: int = 3) -> dict:
    """Median seconds of ``ray.put`` and of a worker's fetch plus copy into a model."""
    import ray
    import torch

    @ray.remote(num_cpus=1)
    def fetch(box: list) -> float:
        t0 = time.perf_counter()
        got = ray.get(box[0])
        {k: torch.empty_like(v).copy_(v) for k, v in got.items()}  # the load's copy
        return time.perf_counter() - t0

    puts, fetches = [], []
    for _ in range(repeats):
        t0 = time.perf_counter()
        ref = ray.put(dict(state))
        puts.append(time.perf_counter() - t0)
        fetches.append(ray.get(fetch.remote([ref])))
        del ref
    params = sum(v.numel() for v in state.values())
    return {
        "params": params,
        "put_s": sorted(puts)[len(puts) // 2],
        "fetch_load_s": sorted(fetches)[len(fetches) // 2],
    }


def project(local: Mapping[str, float], broadcast_s: float, cores: Sequence[int]) -> dict:
    """Iterations per second N workers on N free cores would give, from the local run."""
    r, u = local["rollout_s"], local["update_s"]
    return {
        n: {
            "sync": 1.0 / (r / n + u + broadcast_s),
            "async": 1.0 / max(r / n, u + broadcast_s),
        }
        for n in cores
    }


def main(argv: Sequence[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--iterations", type=int, default=12)
    ap.add_argument("--games", type=int, default=128, help="rollout.games_per_iter")
    ap.add_argument("--quick", action="store_true", help="3 iterations of 16 games, tiny only")
    ap.add_argument("--json", type=Path, help="also write the results here")
    args = ap.parse_args(argv)
    iterations, games = (3, 16) if args.quick else (args.iterations, args.games)
    overrides = [f"rollout.games_per_iter={games}", "train.eval_every=1000"]
    overrides += ["train.eval_opponents=[]", "train.exact=false", "train.save_every=0"]

    import ray

    from coplay.distributed.config import RayConfig
    from coplay.distributed.source import start_workers
    from coplay.envs.gameref import GameRef

    pool = start_workers(GameRef("kuhn_poker"), 2, RayConfig(num_cpus=3))
    ray.get([w.pid.remote() for w in pool])  # started (imports done) before timing
    result: dict = {"iterations": iterations, "games_per_iter": games, "modes": {}}
    for name in MODES:
        result["modes"][name] = run_mode(name, overrides, pool, iterations)
        print(name, json.dumps(result["modes"][name]), flush=True)
    from coplay.models.loading import ModelConfig, build_policy
    from coplay.train.trainer import game_text

    text = game_text(GameRef("kuhn_poker").make)
    tiny = build_policy(ModelConfig(), corpus=text.texts, actions=text.actions, seed=0)
    sizes = {"tiny": tiny.model.state_dict()}
    if not args.quick:
        sizes |= {"qwen2_30m": qwen2_state(QWEN2_30M), "qwen2_0.1b": qwen2_state(QWEN2_01B)}
    result["broadcast"] = {name: broadcast_seconds(state) for name, state in sizes.items()}
    for name, b in result["broadcast"].items():
        print("broadcast", name, json.dumps(b), flush=True)
    b = result["broadcast"]["tiny"]
    result["projection"] = project(
        result["modes"]["local"], b["put_s"] + b["fetch_load_s"], [1, 2, 4, 8, 16]
    )
    print("projection (iterations/s)", json.dumps(result["projection"]))
    if args.json:
        args.json.write_text(json.dumps(result, indent=2))
    return result


if __name__ == "__main__":
    main()
