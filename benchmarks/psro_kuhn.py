"""PSRO with language-model best responses on Kuhn poker, next to plain self-play.

    OMP_NUM_THREADS=1 python benchmarks/psro_kuhn.py --part psro --out runs/bench_psro
    OMP_NUM_THREADS=1 python benchmarks/psro_kuhn.py --part selfplay --out runs/bench_psro
    OMP_NUM_THREADS=1 python benchmarks/psro_kuhn.py --part psro --cold --recipe \
        --restarts 2 --psro-iterations 12 --response-iterations 150 --out runs/bench_psro_br
    python benchmarks/psro_kuhn.py --part psro --oracle exact --out runs/bench_psro_exact

Both arms use preset kuhn-selfplay's model, estimator and loss. PSRO runs
``--psro-iterations`` best responses of ``--response-iterations`` trainer iterations
each (warm-started from the previous response, Nash meta-solver); self-play trains one
policy on the same number of games: ``--psro-iterations x --restarts x
--response-iterations x --games-per-iter`` in all, at the preset's 128 games per
iteration. Scores are exact: the
exploitability of the PSRO meta-strategy's mixture after every iteration, and of the
self-play learner every ``--response-iterations`` iterations. Writes
``<out>/<part>.json`` and prints it.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from coplay.population.oracles import ORACLES
from coplay.population.psro import run_psro
from coplay.population.psro_config import PsroConfig
from coplay.report.sinks import read_metrics
from coplay.train.settings import build_config
from coplay.train.trainer import train

BR_RECIPE = [
    "loss.kl=null",
    "magnet.final=false",
    "loss.entropy={coef: 0.1, final_frac: 0.1}",
    "optim.lr=0.0003",
    "optim.lr_schedule=constant",
    "rollout.group_size=8",
]
"""``--recipe``: what a best response needs that self-play does not (docs/population.md):
no pull toward a magnet, the learner itself as output, a high entropy weight annealed
tenfold, a small constant learning rate, groups of 8 games that share a deal."""


def run_config(iterations: int, seed: int, eval_every: int, extra: list[str] = ()):
    return build_config(
        preset="kuhn-selfplay",
        overrides=[
            f"train.iterations={iterations}",
            f"train.seed={seed}",
            f"train.eval_every={eval_every}",
            "train.eval_opponents=[]",
            "train.save_every=0",
            *extra,
        ],
    )


def psro_arm(args: argparse.Namespace) -> dict:
    extra = [*(BR_RECIPE if args.recipe else []), f"rollout.games_per_iter={args.games_per_iter}"]
    cfg = PsroConfig(
        run=run_config(args.response_iterations, args.seed, args.response_iterations, extra),
        iterations=args.psro_iterations,
        meta_solver=args.meta_solver,
        warm_start=not args.cold,
        oracle=args.oracle,
        restarts=args.restarts,
    )
    res = run_psro(
        cfg,
        args.out / "psro",
        progress=lambda s: print(
            f"psro {s.iteration}: members={s.members} expl={s.exploitability:.4f} "
            f"response={s.response_value:.4f} best={s.best_value:.4f} t={s.elapsed_s:.0f}s",
            flush=True,
        ),
    )
    return {
        "trainer_iterations": [
            s.iteration * args.response_iterations * args.restarts for s in res.steps
        ],
        "exploitability": [s.exploitability for s in res.steps],
        "response_value": [s.response_value for s in res.steps],
        "best_response_value": [s.best_value for s in res.steps],
        "elapsed_s": [s.elapsed_s for s in res.steps],
        "final_marginals": [list(m) for m in res.steps[-1].marginals],
        "wall_s": res.steps[-1].elapsed_s,
    }


def selfplay_arm(args: argparse.Namespace) -> dict:
    games = args.psro_iterations * args.restarts * args.response_iterations * args.games_per_iter
    cfg = run_config(1, args.seed, args.response_iterations)
    total = games // cfg.rollout.games_per_iter
    t0 = time.perf_counter()
    train(run_config(total, args.seed, args.response_iterations), args.out / "selfplay")
    rows = read_metrics(args.out / "selfplay" / "metrics.jsonl")
    rows = [r for r in rows if "eval/exploitability" in r]
    return {
        "trainer_iterations": [r["iteration"] for r in rows],
        "exploitability": [r["eval/exploitability"] for r in rows],
        "wall_s": time.perf_counter() - t0,
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--part", choices=["psro", "selfplay"], required=True)
    p.add_argument("--out", type=Path, default=Path("runs/bench_psro"))
    p.add_argument("--psro-iterations", type=int, default=8)
    p.add_argument("--response-iterations", type=int, default=30)
    p.add_argument("--meta-solver", default="nash")
    p.add_argument("--cold", action="store_true", help="train every response from scratch")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--oracle", choices=list(ORACLES), default="lm")
    p.add_argument("--restarts", type=int, default=1, help="responses per iteration, best kept")
    p.add_argument("--games-per-iter", type=int, default=128, help="games per response iteration")
    p.add_argument("--recipe", action="store_true", help="best-response settings (BR_RECIPE)")
    args = p.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    result = (psro_arm if args.part == "psro" else selfplay_arm)(args)
    result |= {"part": args.part, "args": {k: str(v) for k, v in vars(args).items()}}
    (args.out / f"{args.part}.json").write_text(json.dumps(result, indent=2))
    print(json.dumps(result))


if __name__ == "__main__":
    main()
