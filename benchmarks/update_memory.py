"""Peak memory and time of one learner update of a ~0.1B Qwen2-architecture model.

    OMP_NUM_THREADS=1 python benchmarks/update_memory.py                 # default settings
    OMP_NUM_THREADS=1 python benchmarks/update_memory.py --budgets auto 1000000000
    OMP_NUM_THREADS=1 python benchmarks/update_memory.py --budgets auto auto+ckpt --game tic_tac_toe
    OMP_NUM_THREADS=1 python benchmarks/update_memory.py --budgets auto+copies auto

Each setting runs in a fresh process: it builds the model from a config (no download;
Qwen2's vocabulary of 151,936 tokens, hidden size 512, 8 layers: 0.1B parameters),
with the tiny model's tokenizer trained on the game's text (so prompts are as long as
the game's), plays ``--games`` games of the game in choice mode, and takes one update
(``coplay.train.learner_update.update``) on every decision with random advantages and the
default ``OptimConfig`` and ``LossConfig``, except the micro-batch token budget
(``auto``: the default; a large number: one pass per minibatch, as before budgets);
suffixes turn on ``optim.activation_checkpointing`` (``+ckpt``, as in ``auto+ckpt``) or
turn off ``optim.vocab_grads_in_place`` (``+copies``: the vocabulary matrices'
gradients built as new tensors and then added, autograd's own way).
With ``--updates 2`` (the default) a second update follows on the same samples: AdamW
keeps its two moment tensors per weight from the first step on, so only the second
shows the memory of every later update of a run (the first's backward passes run
before any moment exists).
Printed per setting: the peak resident memory of the process during each update
(sampled from /proc every 5 ms, so the rollout's own peak does not count), the
resident memory before the first, each update's seconds and its number of forward
passes.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import threading
import time
from pathlib import Path

QWEN_01B = {
    "vocab_size": 151936,
    "hidden_size": 512,
    "intermediate_size": 1376,
    "num_hidden_layers": 8,
    "num_attention_heads": 8,
    "num_key_value_heads": 2,
    "tie_word_embeddings": True,
    "max_position_embeddings": 1024,
}


def _rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096


class PeakRss:
    """The highest resident memory seen while the block runs (sampled every 5 ms)."""

    def __enter__(self) -> PeakRss:
        self.peak, self._stop = _rss_bytes(), threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)
        self._thread.start()
        return self

    def _watch(self) -> None:
        while not self._stop.wait(0.005):
            self.peak = max(self.peak, _rss_bytes())

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, _rss_bytes())


def per_step(name: str, seconds: list[float], peaks: list[float]) -> str:
    """``name 1: 12.3 s, peak 2220 MiB; name 2: ...``: each step's time and peak."""
    return "; ".join(
        f"{name} {i + 1}: {s:.1f} s, peak {m:.0f} MiB"
        for i, (s, m) in enumerate(zip(seconds, peaks, strict=True))
    )


def child(game: str, games: int, budget: str, kl: bool, updates: int) -> dict:
    import numpy as np
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    from coplay.algos.losses.compose import LossConfig
    from coplay.algos.losses.regularizers import KLConfig
    from coplay.envs.gameref import GameRef
    from coplay.models.tokenizer import train_tokenizer
    from coplay.policies.lm import LMPolicy
    from coplay.rollout.engine import play_episodes
    from coplay.train import learner_update as update_module
    from coplay.train.config import OptimConfig
    from coplay.train.learner import Sample, make_learner
    from coplay.train.learner_update import update
    from coplay.train.trainer import game_text

    torch.manual_seed(0)
    ref = GameRef(game)
    text = game_text(ref.make)
    tok = train_tokenizer(text.texts, vocab_size=512, actions=text.actions)
    model = Qwen2ForCausalLM(Qwen2Config(**QWEN_01B, pad_token_id=0, bos_token_id=1))
    policy = LMPolicy(model.eval(), tok, seed=0)
    seats = [[policy] * ref.spec.num_players] * games
    episodes = play_episodes(ref.make, seats, range(games))
    decisions = [t.decision for e in episodes for t in e.turns]
    advantages = np.random.default_rng(0).normal(size=len(decisions))
    samples = [Sample(d, float(a)) for d, a in zip(decisions, advantages, strict=True)]
    size, *flags = budget.split("+")
    if unknown := set(flags) - {"ckpt", "copies"}:
        raise SystemExit(f"update_memory: unknown suffix {sorted(unknown)} in {budget!r}")
    tokens = None if size == "auto" else int(size)
    loss = LossConfig(kl=KLConfig(coef=0.1)) if kl else LossConfig()
    optim = OptimConfig(
        micro_batch_tokens=tokens,
        activation_checkpointing="ckpt" in flags,
        vocab_grads_in_place=False if "copies" in flags else None,
    )
    learner = make_learner(policy, loss, optim)
    fused = learner.optimizer.defaults.get("fused")
    passes = []
    step = update_module._micro_step
    update_module._micro_step = lambda *a, **k: passes.append(1) or step(*a, **k)
    before = _rss_bytes()
    peaks, seconds = [], []
    for _ in range(updates):
        start = time.perf_counter()
        with PeakRss() as peak:
            update(learner, samples, np.random.default_rng(0))
        seconds.append(time.perf_counter() - start)
        peaks.append(peak.peak / 2**20)
    return {
        "game": game,
        "budget": budget,
        "kl": kl,
        "params": sum(p.numel() for p in model.parameters()),
        "decisions": len(samples),
        "micro_batch_tokens": learner.micro_batch_tokens,
        "forward_passes": len(passes) // updates,
        "fused_adamw": bool(fused),
        "vocab_grads_in_place": learner.vocab_grads_in_place,
        "update_s": seconds,
        "rss_before_mib": before / 2**20,
        "peak_rss_mib": peaks,
    }


def run_child(args: argparse.Namespace, budget: str) -> dict:
    cmd = [sys.executable, __file__, "--child", budget, "--game", args.game]
    cmd += ["--games", str(args.games), "--updates", str(args.updates)]
    cmd += ["--kl"] if args.kl else []
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--game", default="kuhn_poker")
    ap.add_argument("--games", type=int, default=128)
    ap.add_argument("--updates", type=int, default=2, help="updates in a row (>= 1)")
    ap.add_argument(
        "--budgets",
        nargs="+",
        default=["auto"],
        help="'auto' or token counts; +ckpt: checkpointed, +copies: vocabulary gradients copied",
    )
    ap.add_argument("--kl", action="store_true", help="a KL term (a frozen reference copy)")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--json", type=Path, help="also write the rows here")
    args = ap.parse_args()
    if args.updates < 1:
        ap.error("--updates must be at least 1")
    if args.child:
        print(json.dumps(child(args.game, args.games, args.child, args.kl, args.updates)))
        return
    rows = [run_child(args, b) for b in args.budgets]
    for r in rows:
        print(
            f"budget {r['budget']} ({r['micro_batch_tokens']} tokens): "
            f"{r['params'] / 1e6:.1f}M params, {r['decisions']} decisions, "
            f"{r['forward_passes']} passes per update, RSS before {r['rss_before_mib']:.0f} MiB; "
            + per_step("update", r["update_s"], r["peak_rss_mib"])
        )
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
