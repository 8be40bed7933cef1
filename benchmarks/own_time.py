"""Where the engine's and the learner's own time goes, function by function.

The throughput benchmarks give one number for the work around the model: the
engine's own microseconds a decision (``rollout_throughput.py``) and the learner's
rest of an update (``learner_throughput.py --split``). This one splits that number.
Each named function (of the engine, the policy, the scorer, the env, the learner and
its loss terms) is wrapped in a timer that counts its *exclusive* time: its own, less
the time of the wrapped functions it calls. The model's forward, the backward passes
and the optimizer's steps are timed the same way, so everything else is the
framework's own work.

- ``--arm engine``: ``play_episodes`` on ``--games`` games of ``--game`` at once (the
  tiny default model in choice mode, per-seat streams, as ``rollout_throughput.py``'s
  engine arm plays); figures in microseconds per decision.
- ``--arm learner``: ``Trainee.learn`` of ``--preset`` on one rollout's episodes, as
  ``learner_throughput.py``'s learner arm; figures in milliseconds per update.

Runs after one warm-up, with the heap alive at the start frozen as the training loop
freezes it. Each wrapper adds its own cost to its caller (printed as
``wrapper us/call``, measured on an empty function), so functions called once a
decision read a little high; the total is timed outside every wrapper.

    OMP_NUM_THREADS=1 python benchmarks/own_time.py --arm engine --game tic_tac_toe --games 256
    OMP_NUM_THREADS=1 python benchmarks/own_time.py --arm learner --preset kuhn-selfplay
"""

from __future__ import annotations

import argparse
import importlib
import json
import time
from collections.abc import Sequence
from contextlib import ExitStack
from pathlib import Path

import torch
from learner_throughput import one_rollout
from rollout_throughput import engine_run, model_config
from timers import Clock, patched

from coplay.envs.gameref import GameRef
from coplay.envs.openspiel_games import UnknownGameError
from coplay.models.build import build_policy
from coplay.train.config import ConfigError
from coplay.train.loop import heap_frozen
from coplay.train.settings import build_config
from coplay.train.trainer import game_text

ENGINE = {
    "coplay.rollout.engine": ["play_episodes", "_gather"],
    "coplay.rollout.request": ["ask"],
    "coplay.rollout.live": ["resolve", "advance", "start", "finish", "_end", "_credit"],
    "coplay.policies.lm_choice": ["sample_rows_streamed", "_flat"],
    "coplay.policies.choices": [
        "distinct_items",
        "canonical_order",
        "choice_inputs",
        "_choice_group",
        "_distinct_table",
    ],
}
ENGINE_POLICY = [
    "_choice_scores",
    "_choices",
    "_choice_item",
    "_encode_new_prompts",
    "_counterfactual_prompts",
]
ENGINE_ENV = ["step", "observe", "players_to_act", "is_terminal", "reset", "sibling", "returns"]

LEARNER = {
    "coplay.train.learner_update": [
        "update",
        "_minibatch_step",
        "_micro_step",
        "collect_samples",
        "learner_micro_batches",
        "together",
        "global_denom",
        "rebase_on_learner",
        "shuffled",
    ],
    "coplay.train.learner_objective": ["own_loss", "_pad", "_column", "policy_loss"],
    "coplay.train.learner_metrics": ["combine"],
    "coplay.train.micro": ["learner_passes"],
    "coplay.policies.choices": ["distinct_items", "choice_inputs", "_choice_group"],
}
TERM_METHODS = ["begin_update", "prepare", "loss", "after_update"]


def _modules(stack: ExitStack, clock: Clock, names: dict[str, list[str]]) -> None:
    for module, functions in names.items():
        mod = importlib.import_module(module)
        for fn in functions:
            stack.enter_context(patched(mod, fn, clock, fn))


def _table(clock: Clock, units: int, scale: float) -> list[dict]:
    """Per wrapped function: its exclusive seconds per unit (a decision or an update)
    times ``scale`` (to microseconds or milliseconds), and its calls per unit."""
    rows = [
        {"name": k, "per_unit": v / units * scale, "calls_per_unit": clock.calls[k] / units}
        for k, v in clock.secs.items()
    ]
    return sorted(rows, key=lambda r: -r["per_unit"])


def engine_parts(args: argparse.Namespace) -> dict:
    game = GameRef(args.game)
    text = game_text(game.make)
    policy = build_policy(model_config([]), corpus=text.texts, actions=text.actions, seed=0)
    engine_run(policy, game, 32, seed=10**6)  # warm-up: caches, first allocations
    clock = Clock()
    wrapper = clock.overhead()
    decisions, total = 0, 0.0
    with ExitStack() as stack:
        _modules(stack, clock, ENGINE)
        for name in ENGINE_POLICY:
            stack.enter_context(patched(type(policy), name, clock, name))
        stack.enter_context(patched(type(policy.model), "forward", clock, "MODEL forward"))
        stack.enter_context(
            patched(type(policy.backend), "choice_logps", clock, "backend.choice_logps")
        )
        for name in ENGINE_ENV:
            stack.enter_context(patched(type(game.make()), name, clock, f"env.{name}"))
        with heap_frozen():
            for r in range(args.runs):
                secs, batches, _ = engine_run(policy, game, args.games, seed=r * args.games)
                total += secs
                decisions += sum(len(b) for b in batches)
    rows = _table(clock, decisions, 1e6)
    model = clock.secs["MODEL forward"] / decisions * 1e6
    return {
        "arm": "engine",
        "game": args.game,
        "games": args.games,
        "runs": args.runs,
        "unit": "us/decision",
        "decisions_per_run": decisions / args.runs,
        "total": total / decisions * 1e6,
        "model": model,
        "own": total / decisions * 1e6 - model,
        "wrapper_us_per_call": wrapper * 1e6,
        "parts": rows,
    }


def learner_parts(args: argparse.Namespace) -> dict:
    with one_rollout(args.config) as (run, trainee, episodes):
        trainee.learn(episodes, run.rng)  # warm-up
        learner = trainee.learner
        clock = Clock()
        wrapper = clock.overhead()
        total = 0.0
        with ExitStack() as stack:
            _modules(stack, clock, LEARNER)
            stack.enter_context(patched(type(trainee), "learn", clock, "learn"))
            stack.enter_context(patched(type(learner.policy), "publish", clock, "publish"))
            stack.enter_context(
                patched(type(learner.policy.scorer), "score", clock, "scorer.score")
            )
            stack.enter_context(
                patched(type(learner.policy.model), "forward", clock, "MODEL forward")
            )
            stack.enter_context(patched(torch.Tensor, "backward", clock, "MODEL backward"))
            stack.enter_context(patched(torch.nn.utils, "clip_grad_norm_", clock, "clip"))
            for method, label in (("step", "MODEL step"), ("zero_grad", "zero_grad")):
                stack.enter_context(patched(learner.optimizer, method, clock, label))
            for term_name, term in learner.terms.items():
                for method in TERM_METHODS:
                    label = f"{term_name}.{method}"
                    stack.enter_context(patched(type(term), method, clock, label))
            with heap_frozen():
                for _ in range(args.runs):
                    start = time.perf_counter()
                    trainee.learn(episodes, run.rng)
                    total += time.perf_counter() - start
    # The optimizer's methods were set on the instance: gone again with the patch.
    rows = _table(clock, args.runs, 1e3)
    model = sum(clock.secs[k] for k in ("MODEL forward", "MODEL backward", "MODEL step"))
    return {
        "arm": "learner",
        "preset": args.preset,
        "overrides": args.overrides,
        "runs": args.runs,
        "unit": "ms/update",
        "total": total / args.runs * 1e3,
        "model": model / args.runs * 1e3,
        "own": (total - model) / args.runs * 1e3,
        "wrapper_us_per_call": wrapper * 1e6,
        "parts": rows,
    }


def main(argv: Sequence[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--arm", choices=("engine", "learner"), default="engine")
    ap.add_argument("--game", default="tic_tac_toe", help="engine arm: the OpenSpiel game")
    ap.add_argument("--games", type=int, default=256, help="engine arm: games at once")
    ap.add_argument("--preset", default="kuhn-selfplay", help="learner arm: the preset")
    ap.add_argument("--runs", type=int, default=10, help="rollouts or updates timed")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--json", type=Path)
    ap.add_argument("overrides", nargs="*", help="learner arm: KEY=VALUE, as in coplay train")
    args = ap.parse_args(argv)
    for flag in ("games", "runs", "threads"):
        if getattr(args, flag) < 1:
            ap.error(f"--{flag} must be at least 1, got {getattr(args, flag)}")
    try:
        if args.arm == "learner":
            args.config = build_config(preset=args.preset, overrides=args.overrides)
        else:
            if args.overrides:
                ap.error("overrides change the learner arm's preset; the engine arm takes none")
            _ = GameRef(args.game).spec  # an unknown game: one line, before a model is built
    except (ConfigError, UnknownGameError) as err:
        ap.error(str(err))
    torch.set_num_threads(args.threads)
    result = engine_parts(args) if args.arm == "engine" else learner_parts(args)
    unit = result["unit"]
    print(
        f"total {result['total']:.2f} {unit}; model {result['model']:.2f}; "
        f"own {result['own']:.2f}; wrapper {result['wrapper_us_per_call']:.2f} us/call"
    )
    for row in result["parts"]:
        print(
            f"{row['name']:28s} {row['per_unit']:9.3f} {unit}  ({row['calls_per_unit']:.3g} calls)"
        )
    if args.json:
        args.json.write_text(json.dumps(result, indent=2))
    return result


if __name__ == "__main__":
    main()
