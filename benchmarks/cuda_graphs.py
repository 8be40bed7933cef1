"""How much of a choice pass on a GPU is launching: one pass run eagerly against the
same pass replayed from a CUDA graph.

The pass is the rows' pass of a choice round without its shared prefix: ``--rows``
prompts of ``--tokens`` tokens (no padding), logits kept at the last position, the
tiny default model unless ``model.tiny.*`` overrides shape it. Arms, timed alternately
(medians of ``--repeats``; each repeat ``--calls`` passes and one wait for the device):

- ``eager``: ``model(input_ids=..., use_cache=False, logits_to_keep=1)``, as the engine calls it.
- ``graph``: the same pass captured once in a ``torch.cuda.CUDAGraph`` and replayed,
  the new input copied into the graph's input buffer first. Kernels are the eager
  ones; only their launching from Python is gone.
- ``compiled`` (``--compile``): ``torch.compile(mode="reduce-overhead")``, which fuses
  kernels and replays CUDA graphs of its own (its compile time is printed apart).

Also printed: the host's time to queue one eager pass (its call returns before the
device is done) and the device's time for one (CUDA events), so that eager time close
to the host's says the pass is bound by its launches, and close to the device's says
it is bound by its kernels.

    python benchmarks/cuda_graphs.py --rows 256 --tokens 48
    python benchmarks/cuda_graphs.py --rows 256 --tokens 48 model.tiny.hidden_size=1024 \\
        model.tiny.intermediate_size=4096 model.tiny.num_layers=8 model.tiny.num_heads=16
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable
from pathlib import Path

import torch

from coplay.models.tiny import TinyModelConfig, build_tiny_model


def _tiny(overrides: list[str]) -> TinyModelConfig:
    shape = {}
    for item in overrides:
        key, sep, value = item.partition("=")
        if not sep or not key.startswith("model.tiny."):
            raise SystemExit(f"only model.tiny.KEY=VALUE overrides are read here, not {item!r}")
        shape[key.removeprefix("model.tiny.")] = value
    return TinyModelConfig(**shape)


def _timed(fn: Callable[[], object], calls: int) -> float:
    """Milliseconds per call of ``calls`` calls, the device waited for at the end."""
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(calls):
        fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - t0) * 1e3 / calls


def _graphed(model: torch.nn.Module, ids: torch.Tensor) -> Callable[[torch.Tensor], object]:
    """A replay of ``model``'s pass on tensors shaped as ``ids``, captured once."""
    static = ids.clone()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm-up outside the capture, as CUDA graphs require
        for _ in range(3):
            model(input_ids=static, use_cache=False, logits_to_keep=1)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = model(input_ids=static, use_cache=False, logits_to_keep=1).logits

    def replay(new: torch.Tensor) -> torch.Tensor:
        static.copy_(new)
        graph.replay()
        return out

    return replay


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=256)
    ap.add_argument("--tokens", type=int, default=48)
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--calls", type=int, default=50)
    ap.add_argument("--compile", action="store_true", help="add the torch.compile arm")
    ap.add_argument("--json", type=Path)
    ap.add_argument("overrides", nargs="*", metavar="model.tiny.KEY=VALUE")
    args = ap.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("this benchmark needs a CUDA device")
    cfg = _tiny(args.overrides)
    model = build_tiny_model(cfg, vocab_size=cfg.vocab_size, seed=0).cuda().eval()
    params = sum(p.numel() for p in model.parameters())
    gen = torch.Generator().manual_seed(0)
    ids = torch.randint(3, cfg.vocab_size, (args.rows, args.tokens), generator=gen).cuda()
    result: dict[str, object] = {"params": params, "rows": args.rows, "tokens": args.tokens}
    with torch.inference_mode():
        eager = lambda: model(input_ids=ids, use_cache=False, logits_to_keep=1)  # noqa: E731
        arms = {"eager": eager}
        try:
            replay = _graphed(model, ids)
        except RuntimeError as e:  # a host sync inside the model's forward breaks capture
            result["graph_error"] = str(e).splitlines()[0]
            print(f"capture failed: {result['graph_error']}")
        else:
            arms["graph"] = lambda: replay(ids)
            result["graph_equal"] = torch.equal(eager().logits, arms["graph"]())
        if args.compile:
            compiled_model = torch.compile(model, mode="reduce-overhead", dynamic=False)
            t0 = time.perf_counter()
            for _ in range(3):
                compiled_model(input_ids=ids, use_cache=False, logits_to_keep=1)
            torch.cuda.synchronize()
            result["compile_s"] = time.perf_counter() - t0
            arms["compiled"] = lambda: compiled_model(
                input_ids=ids, use_cache=False, logits_to_keep=1
            )
        times = {name: [] for name in arms}
        for r in range(args.repeats):
            for name in arms if r % 2 == 0 else reversed(list(arms)):
                times[name].append(_timed(arms[name], args.calls))
        queue = []
        for _ in range(9):
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            eager()
            queue.append((time.perf_counter() - t0) * 1e3)
        result["host_queue_ms"] = statistics.median(queue)
        torch.cuda.synchronize()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        eager()
        end.record()
        end.synchronize()
        result["device_ms"] = start.elapsed_time(end)
    med = {name: statistics.median(t) for name, t in times.items()}
    result["ms"] = med
    ratios = {f"eager/{k}": med["eager"] / v for k, v in med.items() if k != "eager"}
    result.update(ratios)
    print(
        f"{params / 1e6:.2f}M parameters, {args.rows} rows x {args.tokens} tokens: "
        + ", ".join(f"{k} {v:.3f} ms" for k, v in med.items())
        + "".join(f"; {k} {v:.2f}" for k, v in ratios.items())
        + f"; graph equals eager: {result.get('graph_equal')}; "
        f"host queues one eager pass in {result['host_queue_ms']:.3f} ms, "
        f"device runs it in {result['device_ms']:.3f} ms"
        + (f"; compile {result['compile_s']:.1f} s" if "compile_s" in result else "")
    )
    if args.json:
        args.json.write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
