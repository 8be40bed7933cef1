"""Peak memory and time of ``coplay sft`` steps on a ~0.1B Qwen2-architecture model.

    OMP_NUM_THREADS=1 python benchmarks/sft_memory.py
    OMP_NUM_THREADS=1 python benchmarks/sft_memory.py --tokens 1000 --batch 8 --steps 2

Each run is a fresh process: it builds the model of ``benchmarks/update_memory.py``
from a config (Qwen2's vocabulary of 151,936 tokens, hidden size 512, 8 layers; no
download) with a tokenizer trained on made-up words, writes ``--batch`` made-up
conversations of about ``--tokens`` tokens each (a system and a user message, then
an answer of about ``--answer`` of them), and takes ``--steps`` optimizer steps of
``coplay.sft.trainer.fine_tune`` on them, one batch per step (the settings' defaults
otherwise). AdamW makes its two moment tensors per weight at its first step, so the
second step shows what every later step holds.

Printed: the resident memory before the first step, then each step's peak (sampled
from /proc every 5 ms) and seconds. ``--json`` writes them too. Runs on any tree that
has ``fine_tune`` (``PYTHONPATH=TREE``), to compare two.
"""

from __future__ import annotations

import argparse
import json
import random
import subprocess
import sys
import time
from pathlib import Path

from update_memory import QWEN_01B, PeakRss, _rss_bytes, per_step

WORDS = 400
"""Distinct made-up words: few enough that the trained tokenizer gives each a token."""


def conversations(n: int, tokens: int, answer: float, seed: int = 0) -> list:
    """``n`` conversations of about ``tokens`` words, ``answer`` of them the reply's."""
    from coplay.sft.data import Conversation, Message

    rng = random.Random(seed)
    words = [f"w{i}" for i in range(WORDS)]

    def text(k: int) -> str:
        return " ".join(rng.choice(words) for _ in range(k))

    out = []
    for line in range(1, n + 1):
        reply = int(tokens * answer)
        prompt = tokens - reply
        out.append(
            Conversation(
                (
                    Message("system", text(prompt // 4)),
                    Message("user", text(prompt - prompt // 4)),
                    Message("assistant", text(reply)),
                ),
                line,
            )
        )
    return out


def child(batch: int, tokens: int, answer: float, steps: int) -> dict:
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    from coplay.models.tokenizer import train_tokenizer
    from coplay.sft.config import SftSettings
    from coplay.sft.tokens import encode, ensure_chat_template
    from coplay.sft.trainer import fine_tune

    torch.manual_seed(0)
    convs = conversations(batch, tokens, answer)
    corpus = [m.content for c in convs for m in c.messages]
    tok = train_tokenizer(corpus, vocab_size=WORDS + 400, text=True)
    ensure_chat_template(tok)
    examples = [encode(c, tok) for c in convs]
    config = {**QWEN_01B, "max_position_embeddings": max(len(e.ids) for e in examples) + 8}
    model = Qwen2ForCausalLM(Qwen2Config(**config, pad_token_id=0, bos_token_id=1))
    settings = SftSettings(epochs=steps, batch_size=batch)
    before = _rss_bytes()
    peaks, seconds = [], []
    monitor = PeakRss().__enter__()
    last = [time.perf_counter()]

    def log(step: int, metrics: dict) -> None:
        now = time.perf_counter()
        seconds.append(now - last[0])
        peaks.append(max(monitor.peak, _rss_bytes()) / 2**20)
        monitor.peak = _rss_bytes()  # the next step's peak from here on
        last[0] = now

    fine_tune(model, examples, settings, pad_id=tok.pad_token_id or 0, seed=0, log=log)
    monitor.__exit__(None, None, None)
    return {
        "params": sum(p.numel() for p in model.parameters()),
        "conversations": batch,
        "tokens": [len(e.ids) for e in examples],
        "trained_tokens": sum(e.trained_tokens for e in examples),
        "rss_before_mib": before / 2**20,
        "peak_rss_mib": peaks,
        "step_s": seconds,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batch", type=int, default=8, help="conversations per step")
    ap.add_argument("--tokens", type=int, default=500, help="words per conversation")
    ap.add_argument("--answer", type=float, default=0.4, help="the reply's share of them")
    ap.add_argument("--steps", type=int, default=2)
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--json", type=Path, help="also write the result here")
    args = ap.parse_args()
    if args.child:
        print(json.dumps(child(args.batch, args.tokens, args.answer, args.steps)))
        return
    cmd = [sys.executable, __file__, "--child", "--batch", str(args.batch)]
    cmd += ["--tokens", str(args.tokens), "--answer", str(args.answer), "--steps", str(args.steps)]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    r = json.loads(out.strip().splitlines()[-1])
    print(
        f"{r['params'] / 1e6:.1f}M params, {r['conversations']} conversations of "
        f"{min(r['tokens'])}-{max(r['tokens'])} tokens ({r['trained_tokens']} trained), "
        f"RSS before {r['rss_before_mib']:.0f} MiB; "
        + per_step("step", r["step_s"], r["peak_rss_mib"])
    )
    if args.json:
        args.json.write_text(json.dumps(r, indent=2))


if __name__ == "__main__":
    main()
