"""Would a traced forward let the game's Python run beside the model in a second thread?

``thread_overlap.py`` found that the tiny model's eager forward holds the interpreter
lock most of its time, so a game stepped in a second thread only waits. A forward
traced with TorchScript runs its graph in C++, which releases the lock for the whole
call. This measures what that would buy: one batch of ``--batch`` rows of ``--tokens``
tokens through the tic-tac-toe tiny model, eager and traced (``torch.jit.trace``, no
KV cache, the last position's logits), each ``--calls`` times alone, then beside a
thread playing ``--game-games`` tic-tac-toe games through pyspiel (the rollout
benchmark's ``game`` arm), medians of ``--repeats``. ``--compiled`` adds a third arm,
``torch.compile(dynamic=True)`` of the same forward (Inductor's C++ kernels; with
``--cpp-wrapper`` its graph called from C++ too); ``--exported`` one more, the forward
exported (``torch.export``) and compiled ahead of time into an AOTInductor package,
for this batch's shape. Printed per arm: the forward alone,
the game alone, the pair's wall time and wall / (forward + game): 1 is no overlap, and
max / sum (about 0.6 at the defaults) complete overlap.

    python benchmarks/traced_overlap.py --repeats 5 --compiled --exported
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import threading
import time
import warnings
from collections.abc import Sequence
from pathlib import Path

import torch
from rollout_throughput import game_run

from coplay.envs.gameref import GameRef
from coplay.models.build import ModelConfig, build_policy
from coplay.train.trainer import game_text


class LastLogits(torch.nn.Module):
    """The forward the engine needs for one-token actions: the last position's logits."""

    def __init__(self, model) -> None:
        super().__init__()
        self.model = model

    def forward(self, ids, attn, pos):
        out = self.model(
            input_ids=ids, attention_mask=attn, position_ids=pos, use_cache=False, logits_to_keep=1
        )
        return out.logits


def timed(fn, args: tuple, calls: int) -> float:
    start = time.perf_counter()
    for _ in range(calls):
        fn(*args)
    return time.perf_counter() - start


def beside_game(fn, args: tuple, calls: int, game: GameRef, seeds) -> tuple[float, float]:
    """(wall, forward) seconds with the game played in a second thread meanwhile."""
    worker = threading.Thread(target=game_run, args=(game, seeds))
    start = time.perf_counter()
    worker.start()
    forward = timed(fn, args, calls)
    worker.join()
    return time.perf_counter() - start, forward


def main(argv: Sequence[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--tokens", type=int, default=12)
    ap.add_argument("--calls", type=int, default=20, help="forward calls per arm and repeat")
    ap.add_argument("--game-games", type=int, default=15000)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--compiled", action="store_true", help="also torch.compile the forward")
    ap.add_argument("--cpp-wrapper", action="store_true", help="Inductor's C++ wrapper")
    ap.add_argument("--exported", action="store_true", help="also an AOTInductor package")
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    game = GameRef("tic_tac_toe")
    text = game_text(game.make)
    policy = build_policy(ModelConfig(), corpus=text.texts, actions=text.actions, seed=0)
    eager = LastLogits(policy.model.eval())
    gen = torch.Generator().manual_seed(0)
    ids = torch.randint(0, policy.model.config.vocab_size, (args.batch, args.tokens), generator=gen)
    attn = torch.ones_like(ids)
    pos = torch.arange(args.tokens).expand(args.batch, -1)
    inputs = (ids, attn, pos)
    seeds = range(args.game_games)
    out: dict[str, dict[str, float]] = {}
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the tracer's notes on Python values in the graph
        traced = torch.jit.trace(eager, inputs, check_trace=False)
        assert torch.equal(traced(*inputs), eager(*inputs)), "the traced forward differs"
        arms = {"eager": eager, "traced": traced}
        if args.compiled:
            if args.cpp_wrapper:
                import torch._inductor.config as inductor

                inductor.cpp_wrapper = True
            arms["compiled"] = torch.compile(eager, dynamic=True)
            assert torch.allclose(arms["compiled"](*inputs), eager(*inputs), atol=1e-5)
        if args.exported:
            exported = torch.export.export(eager, inputs, strict=False)
            with tempfile.TemporaryDirectory() as tmp:
                package = torch._inductor.aoti_compile_and_package(
                    exported, package_path=str(Path(tmp) / "forward.pt2")
                )
                arms["exported"] = torch._inductor.aoti_load_package(package)
            assert torch.allclose(arms["exported"](*inputs), eager(*inputs), atol=1e-5)
        for fn in arms.values():
            timed(fn, inputs, 3)  # warm-up (the traced graph is optimised on its first calls)
        runs: dict[str, dict[str, list[float]]] = {
            a: {"forward": [], "game": [], "wall": []} for a in arms
        }
        for r in range(args.repeats):
            for name in list(arms)[r % len(arms) :] + list(arms)[: r % len(arms)]:
                runs[name]["forward"].append(timed(arms[name], inputs, args.calls))
                runs[name]["game"].append(game_run(game, seeds)[0])
                runs[name]["wall"].append(
                    beside_game(arms[name], inputs, args.calls, game, seeds)[0]
                )
    for name, r in runs.items():
        med = {k: statistics.median(v) * 1e3 for k, v in r.items()}
        med["wall/sum"] = med["wall"] / (med["forward"] + med["game"])
        out[name] = med
        print(
            f"{name}: forward {med['forward']:.0f} ms, game {med['game']:.0f} ms, "
            f"together {med['wall']:.0f} ms: wall / sum {med['wall/sum']:.2f}"
        )
    return out


if __name__ == "__main__":
    main()
