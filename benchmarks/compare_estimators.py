"""Every advantage estimator, with the magnet term on and off, on the same games and budget.

    python benchmarks/compare_estimators.py --games kuhn_poker --seeds 0 1 2 --workers 2
    python benchmarks/compare_estimators.py --games kuhn_poker leduc_poker tic_tac_toe \
        --iterations kuhn_poker=150 leduc_poker=60 tic_tac_toe=60 --workers 16

Each cell trains a fresh run from the game's preset with only the estimator (and its
default hyper-parameters) changed, in groups of ``--group-size`` games sharing a seed
so that group estimators have groups; "magnet off" sets ``loss.kl=null``. Runs are
independent processes with one thread each. The score is exact exploitability for
poker and, for tic-tac-toe, the loss rate against the perfect player in the agent's
worse seat. Written to ``--out``: ``results.jsonl`` (one line per run, with its
curve), ``table.md`` (mean ± sd over seeds and wall time per cell) and
``curves_<game>.png`` (needs matplotlib: ``pip install -e .[bench]``).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import asdict, dataclass
from multiprocessing import get_context
from pathlib import Path

PRESETS = {
    "kuhn_poker": "kuhn-selfplay",
    "leduc_poker": "leduc-selfplay",
    "tic_tac_toe": "tictactoe-selfplay",
}
ESTIMATORS = ("reinforce", "grpo", "rloo", "rae", "mars", "dr_mas", "gigpo", "gra", "gae")


@dataclass(frozen=True)
class Cell:
    game: str
    estimator: str
    magnet: bool
    seed: int
    iterations: int
    group_size: int
    extra: tuple[str, ...] = ()
    """Further overrides for every cell (e.g. model.device=cuda)."""

    @property
    def name(self) -> str:
        return f"{self.game}/{self.estimator}-{'mag' if self.magnet else 'nomag'}/seed{self.seed}"


def overrides(cell: Cell) -> list[str]:
    """Config overrides that turn the game's preset into this cell."""
    out = [
        f"algo.estimator={cell.estimator}",
        "algo.params={}",
        f"rollout.group_size={cell.group_size}",
        f"train.iterations={cell.iterations}",
        f"train.eval_every={max(1, cell.iterations // 10)}",
        f"train.seed={cell.seed}",
        "train.save_every=0",
        "train.transcripts=0",
    ]
    if cell.game == "tic_tac_toe":
        out.append("train.eval_opponents=[perfect]")
    elif cell.game in ("kuhn_poker", "leduc_poker"):
        out.append("train.eval_opponents=[]")
    if not cell.magnet:
        out.append("loss.kl=null")
    return [*out, *cell.extra]


def score(row: dict[str, float]) -> float | None:
    """Exploitability, or the worse seat's loss rate against perfect play."""
    if "eval/exploitability" in row:
        return row["eval/exploitability"]
    seats = [v for k, v in row.items() if k.startswith("eval/perfect/loss_seat")]
    return max(seats) if seats else None


def run_cell(cell: Cell, root: str) -> dict:
    """Train one cell in this process (one thread) and return its curve and score."""
    import torch
    import transformers

    torch.set_num_threads(1)
    transformers.utils.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()
    from coplay.train.settings import build_config
    from coplay.train.trainer import train

    out = Path(root) / cell.name
    cfg = build_config(preset=PRESETS[cell.game], overrides=overrides(cell))
    t0 = time.perf_counter()
    train(cfg, out)
    wall = time.perf_counter() - t0
    rows = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    curve = [
        (r["iteration"], r.get("perf/elapsed_s", 0.0), score(r))
        for r in rows
        if score(r) is not None
    ]
    spikes = sum(r.get("loss/grad_spikes", 0.0) for r in rows)
    grad_norms = [r["loss/grad_norm"] for r in rows if "loss/grad_norm" in r]
    return {
        **asdict(cell),
        "final": curve[-1][2],
        "wall_s": wall,
        "curve": curve,
        "grad_spikes": spikes,
        "grad_norm_max": max(grad_norms, default=0.0),
        "grad_norm_mean": statistics.mean(grad_norms) if grad_norms else 0.0,
    }


def table(results: Sequence[dict]) -> str:
    """Markdown: one row per (game, estimator, magnet), mean ± sd over seeds."""
    cells: dict[tuple, list[dict]] = {}
    for r in results:
        cells.setdefault((r["game"], r["estimator"], r["magnet"]), []).append(r)
    lines = [
        "| game | estimator | magnet | final score (mean ± sd) | seeds | wall s (mean) "
        "| max grad norm (mean) | spikes |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for (game, est, magnet), rs in sorted(cells.items()):
        finals = [r["final"] for r in rs]
        sd = statistics.stdev(finals) if len(finals) > 1 else 0.0
        lines.append(
            f"| {game} | {est} | {'on' if magnet else 'off'} | "
            f"{statistics.mean(finals):.3f} ± {sd:.3f} | "
            f"{', '.join(f'{f:.3f}' for f in finals)} | "
            f"{statistics.mean(r['wall_s'] for r in rs):.0f} | "
            f"{statistics.mean(r['grad_norm_max'] for r in rs):.2f} | "
            f"{sum(r['grad_spikes'] for r in rs):.0f} |"
        )
    return "\n".join(lines) + "\n"


def plot(results: Sequence[dict], out: Path) -> list[Path]:
    """One figure per game: mean curve per (estimator, magnet) over seeds."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib is not installed (pip install -e .[bench]); no curves drawn")
        return []
    files = []
    for game in sorted({r["game"] for r in results}):
        fig, axes = plt.subplots(1, 2, figsize=(13, 4.5), sharey=True)
        for ax, magnet in zip(axes, (True, False), strict=True):
            for est in ESTIMATORS:
                rs = [
                    r
                    for r in results
                    if r["game"] == game and r["estimator"] == est and r["magnet"] == magnet
                ]
                if not rs:
                    continue
                its = [p[0] for p in rs[0]["curve"]]
                ys = [statistics.mean(r["curve"][i][2] for r in rs) for i in range(len(its))]
                ax.plot(its, ys, label=est)
            ax.set_title(f"{game}, magnet {'on' if magnet else 'off'}")
            ax.set_xlabel("iteration")
            ax.grid(alpha=0.3)
        axes[0].set_ylabel(
            "exploitability" if game != "tic_tac_toe" else "loss rate vs perfect (worse seat)"
        )
        axes[0].legend(fontsize=8)
        fig.tight_layout()
        path = out / f"curves_{game}.png"
        fig.savefig(path, dpi=90)
        plt.close(fig)
        files.append(path)
    return files


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--games", nargs="+", default=["kuhn_poker"], choices=sorted(PRESETS))
    ap.add_argument("--estimators", nargs="+", default=list(ESTIMATORS))
    ap.add_argument("--magnet", nargs="+", default=["on", "off"], choices=["on", "off"])
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument(
        "--iterations",
        nargs="*",
        default=["kuhn_poker=150", "leduc_poker=60", "tic_tac_toe=60"],
        help="per-game budget as game=iterations",
    )
    ap.add_argument("--group-size", type=int, default=4)
    ap.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--out", default="runs/compare", help="run directories")
    ap.add_argument("--report", default=None, help="results, table, curves (default: --out)")
    ap.add_argument("overrides", nargs="*", help="key=value overrides for every cell")
    args = ap.parse_args()
    budget = {k: int(v) for k, v in (item.split("=") for item in args.iterations)}
    cells = [
        Cell(g, e, m == "on", s, budget[g], args.group_size, tuple(args.overrides))
        for g in args.games
        for e in args.estimators
        for m in args.magnet
        for s in args.seeds
    ]
    out, report = Path(args.out), Path(args.report or args.out)
    out.mkdir(parents=True, exist_ok=True)
    report.mkdir(parents=True, exist_ok=True)
    results = []
    started = time.perf_counter()
    ctx = get_context("spawn")
    with ProcessPoolExecutor(args.workers, mp_context=ctx) as pool:
        futures = {pool.submit(run_cell, c, str(out)): c for c in cells}
        with (report / "results.jsonl").open("a") as log:
            for fut in as_completed(futures):
                r = fut.result()
                results.append(r)
                log.write(json.dumps(r) + "\n")
                log.flush()
                print(f"{futures[fut].name}: {r['final']:.4f} in {r['wall_s']:.0f} s", flush=True)
    (report / "table.md").write_text(table(results))
    plot(results, report)
    print(table(results))
    print(f"total wall {time.perf_counter() - started:.0f} s with {args.workers} workers")


if __name__ == "__main__":
    main()
