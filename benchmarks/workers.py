"""Ray rollout workers: iterations per second, weight broadcast time, and a projection.

1. Iterations per second of a preset (``kuhn-selfplay`` by default; ``--preset
   kuhn-text --set model.path=SFT`` for the generation-heavy text one) played
   locally, by 2 synchronous workers, and by 2 asynchronous workers with
   ``max_staleness`` 1 and 2 (the first iteration, which starts the workers, is not
   timed). With ``--curve-every E`` also quality against wall time: the output
   policy's weights are copied every E iterations (the copy's time taken off the
   clock) and evaluated after the run (exact exploitability, or for a text policy the
   sampled one with ``--samples`` answers per information state), then compared at
   the wall time the slowest arrangement needed.
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
    python benchmarks/workers.py --preset kuhn-text --set model.path=runs/sft/checkpoints/final \
        --iterations 60 --curve-every 10 --no-broadcast
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
    """A loop hook keeping each iteration's end time and metrics, and every
    ``curve_every`` iterations a copy of the output policy's weights with the wall
    time since the loop began (the copying itself taken off the clock)."""

    def __init__(self, curve_every: int = 0) -> None:
        self.ends: list[float] = []
        self.metrics: list[dict[str, float]] = []
        self.curve_every = curve_every
        self.snapshots: list[tuple[int, float, dict]] = []
        self.start = time.perf_counter()
        self.paused = 0.0

    def before(self, run, it) -> dict[str, float]:
        return {}

    def after(self, run, it, batch, metrics: Mapping[str, float]) -> dict[str, float]:
        now = time.perf_counter()
        self.ends.append(now)
        self.metrics.append(dict(metrics))
        if self.curve_every and it % self.curve_every == 0:
            from coplay.train.evaluate import final_policy

            state = {k: v.detach().clone() for k, v in final_policy(run).model.state_dict().items()}
            self.snapshots.append((it, now - self.start - self.paused, state))
            self.paused += time.perf_counter() - now
        return {}


def evaluate_snapshots(run, snapshots, samples: int) -> list[dict]:
    """Exploitability of each snapshot: exact, or sampled (K answers per information
    state) for a text policy."""
    from coplay.eval.exact import exploitability
    from coplay.eval.sampled import sampled_exploitability
    from coplay.train.evaluate import final_policy, writes

    policy, game = final_policy(run), run.cfg.game
    curve = []
    for it, seconds, state in snapshots:
        policy.model.load_state_dict(state)
        if writes(policy):
            est, _ = sampled_exploitability(
                policy, game.name, params=game.params, k=samples, invalid=game.invalid
            )
            value = est["exploitability"].value
        else:
            value = exploitability(policy, game.name, params=game.params).exploitability
        curve.append({"iteration": it, "wall_s": seconds, "exploitability": value})
    return curve


def run_mode(
    name: str,
    preset: str,
    overrides: Sequence[str],
    pool,
    iterations: int,
    curve_every: int = 0,
    samples: int = 32,
) -> dict:
    """One mode's run of ``iterations``; rates over iterations 2.. (1 warms up)."""
    from coplay.distributed.source import RaySource
    from coplay.envs.gameref import GameRef
    from coplay.train.loop import run_loop
    from coplay.train.settings import build_config
    from coplay.train.trainer import setup

    mode = MODES[name]
    cfg = build_config(preset=preset, overrides=[*overrides, f"train.iterations={iterations}"])
    run = setup(cfg, Path(tempfile.mkdtemp()))
    if mode["workers"]:
        run.source = RaySource(
            GameRef(cfg.game.name, cfg.game.params),
            workers=mode["workers"],
            max_staleness=mode["max_staleness"],
            actors=pool[: mode["workers"]],
        )
    timer = Timer(curve_every)
    run_loop(run, [timer], start=0, end=iterations)
    seconds = timer.ends[-1] - timer.ends[0] - timer.paused
    mean = lambda k: sum(m.get(k, 0.0) for m in timer.metrics[1:]) / (iterations - 1)  # noqa: E731
    out = {
        "iterations_per_s": (iterations - 1) / seconds,
        "rollout_s": mean("perf/rollout_s"),
        "update_s": mean("perf/update_s"),
        "broadcast_s": mean("perf/broadcast_s"),
        "staleness_max": max(m.get("rollout/staleness_max", 0.0) for m in timer.metrics),
    }
    if curve_every:
        out["curve"] = evaluate_snapshots(run, timer.snapshots, samples)
    return out


def at_equal_time(modes: Mapping[str, dict]) -> dict:
    """Each arrangement's last evaluated exploitability within the wall time the
    slowest one took to its last snapshot."""
    budget = min(m["curve"][-1]["wall_s"] for m in modes.values())
    out = {"wall_s": budget}
    for name, m in modes.items():
        seen = [p for p in m["curve"] if p["wall_s"] <= budget + 1e-9]
        out[name] = seen[-1] if seen else None
    return out


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
    ap.add_argument("--preset", default="kuhn-selfplay", help="a Kuhn poker preset")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override")
    ap.add_argument("--iterations", type=int, default=12)
    ap.add_argument("--games", type=int, default=128, help="rollout.games_per_iter")
    ap.add_argument("--quick", action="store_true", help="3 iterations of 16 games, tiny only")
    ap.add_argument("--curve-every", type=int, default=0, metavar="E", help="quality vs time")
    ap.add_argument("--samples", type=int, default=32, help="K of a text policy's evaluation")
    ap.add_argument("--modes", default=",".join(MODES), help="which arrangements, in order")
    ap.add_argument("--no-broadcast", action="store_true", help="tiny model's broadcast only")
    ap.add_argument("--json", type=Path, help="also write the results here")
    args = ap.parse_args(argv)
    iterations, games = (3, 16) if args.quick else (args.iterations, args.games)
    overrides = [f"rollout.games_per_iter={games}", "train.eval_every=1000"]
    overrides += ["train.eval_opponents=[]", "train.exact=false", "train.save_every=0"]
    overrides += args.set

    import ray

    from coplay.distributed.config import RayConfig
    from coplay.distributed.source import start_workers
    from coplay.envs.gameref import GameRef

    pool = start_workers(GameRef("kuhn_poker"), 2, RayConfig(num_cpus=3))
    ray.get([w.pid.remote() for w in pool])  # started (imports done) before timing
    result: dict = {"preset": args.preset, "iterations": iterations, "games_per_iter": games}
    result["modes"] = {}
    for name in args.modes.split(","):
        result["modes"][name] = run_mode(
            name, args.preset, overrides, pool, iterations, args.curve_every, args.samples
        )
        print(name, json.dumps(result["modes"][name]), flush=True)
    if args.curve_every:
        result["equal_time"] = at_equal_time(result["modes"])
        print("at equal wall time", json.dumps(result["equal_time"]), flush=True)

    from coplay.models.build import ModelConfig, build_policy
    from coplay.train.trainer import game_text

    text = game_text(GameRef("kuhn_poker").make)
    tiny = build_policy(ModelConfig(), corpus=text.texts, actions=text.actions, seed=0)
    sizes = {"tiny": tiny.model.state_dict()}
    if not (args.quick or args.no_broadcast):
        sizes |= {"qwen2_30m": qwen2_state(QWEN2_30M), "qwen2_0.1b": qwen2_state(QWEN2_01B)}
    result["broadcast"] = {name: broadcast_seconds(state) for name, state in sizes.items()}
    for name, b in result["broadcast"].items():
        print("broadcast", name, json.dumps(b), flush=True)
    b = result["broadcast"]["tiny"]
    if "local" in result["modes"]:
        result["projection"] = project(
            result["modes"]["local"], b["put_s"] + b["fetch_load_s"], [1, 2, 4, 8, 16]
        )
        print("projection (iterations/s)", json.dumps(result["projection"]))
    if args.json:
        args.json.write_text(json.dumps(result, indent=2))
    return result


if __name__ == "__main__":
    main()
