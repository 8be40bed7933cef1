"""Memory of two trained roles: two LoRA adapters on one base vs two full model copies.

    OMP_NUM_THREADS=1 python benchmarks/lora_memory.py --out runs/lora_memory

For each model shape (the tiny default and a bigger one) and each setup, prints and
writes (``table.md``, ``results.json``): total parameters held, trainable parameters,
bytes of float32 weights plus AdamW state (two floats per trainable parameter), and the
peak resident memory of a separate process that builds the setup and takes
``--steps`` optimizer steps per role on a batch of random tokens (so the optimizer
state exists). Peak RSS is ``resource.getrusage(RUSAGE_SELF).ru_maxrss`` after the
steps minus the same after imports, so the interpreter and libraries cancel out.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
from pathlib import Path

SHAPES = {
    "tiny": {"hidden_size": 64, "num_layers": 2, "num_heads": 4, "intermediate_size": 128},
    "h512_l8": {"hidden_size": 512, "num_layers": 8, "num_heads": 8, "intermediate_size": 1376},
}
SETUPS = ("two_adapters", "two_copies")
ROLES = ("first", "second")
VOCAB = 512
FLOAT = 4


def _rss_kib() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


def build(shape: str, setup: str, rank: int):
    """The models of a setup and one (model, trainable params) pair per role."""
    import copy

    from coplay.models.lora import LoraSettings, attach_roles
    from coplay.models.tiny import TinyModelConfig, build_tiny_model
    from coplay.policies.lm import LMPolicy

    cfg = TinyModelConfig(vocab_size=VOCAB, **SHAPES[shape])
    base = build_tiny_model(cfg, vocab_size=VOCAB, seed=0)
    if setup == "two_copies":
        models = [base, copy.deepcopy(base)]
        return models, [(m, None, list(m.parameters())) for m in models]
    policy = LMPolicy(base, tokenizer=None)
    views = attach_roles(policy, ROLES, LoraSettings(rank=rank))
    model = views[ROLES[0]].model
    return [model], [(model, v, v.adapter_parameters()) for v in views.values()]


def child(shape: str, setup: str, rank: int, steps: int) -> dict:
    """Build the setup, train each role ``steps`` times, report counts and peak RSS."""
    import torch

    import coplay.models.lora  # noqa: F401  (imports count before the baseline, not after)

    torch.manual_seed(0)
    before = _rss_kib()
    models, roles = build(shape, setup, rank)
    total = sum(p.numel() for m in models for p in m.parameters())
    trainable = sum(p.numel() for _, _, params in roles for p in params)
    opts = [torch.optim.AdamW(params, lr=1e-4) for _, _, params in roles]
    ids = torch.randint(3, VOCAB, (4, 32))  # (B, T)
    for _ in range(steps):
        for (model, view, _), opt in zip(roles, opts, strict=True):
            if view is not None:
                view.activate()
            opt.zero_grad(set_to_none=True)
            model(input_ids=ids, labels=ids).loss.backward()
            opt.step()
    state = sum(t.numel() for o in opts for s in o.state.values() for t in s.values() if t.dim())
    return {
        "shape": shape,
        "setup": setup,
        "params": total,
        "trainable": trainable,
        "weights_bytes": total * FLOAT,
        "adam_bytes": state * FLOAT,
        "weights_plus_adam_bytes": (total + state) * FLOAT,
        "peak_rss_mib": (_rss_kib() - before) / 1024,
    }


def run_child(shape: str, setup: str, rank: int, steps: int) -> dict:
    cmd = [sys.executable, __file__, "--child", shape, setup, "--rank", str(rank)]
    cmd += ["--steps", str(steps)]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def table(rows: list[dict]) -> str:
    head = "| model | setup | params | trainable | weights + Adam (MiB) | peak RSS (MiB) |"
    lines = [head, "|---|---|---:|---:|---:|---:|"]
    for r in rows:
        lines.append(
            f"| {r['shape']} | {r['setup']} | {r['params']:,} | {r['trainable']:,} | "
            f"{r['weights_plus_adam_bytes'] / 2**20:.2f} | {r['peak_rss_mib']:.1f} |"
        )
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--child", nargs=2, metavar=("SHAPE", "SETUP"))
    ap.add_argument("--rank", type=int, default=8)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--shapes", nargs="+", default=list(SHAPES), choices=list(SHAPES))
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    if args.child:
        print(json.dumps(child(*args.child, args.rank, args.steps)))
        return
    rows = [run_child(s, u, args.rank, args.steps) for s in args.shapes for u in SETUPS]
    text = table(rows)
    print(text)
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "results.json").write_text(json.dumps(rows, indent=2))
        (args.out / "table.md").write_text(text + "\n")


if __name__ == "__main__":
    main()
