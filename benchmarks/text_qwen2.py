"""A real architecture end to end: a ~0.1B Qwen2 model in text mode with chat context.

    OMP_NUM_THREADS=2 python benchmarks/text_qwen2.py --json qwen2.json   # ~0.1B, minutes
    python benchmarks/text_qwen2.py --quick                              # smoke run, seconds

Builds, locally (nothing is downloaded), a Qwen2-architecture model from a config,
randomly initialised (hidden 768, 12 layers, grouped-query attention: 0.1B parameters;
``--quick``: 2 layers, 64 wide), with a byte-level BPE tokenizer trained on Kuhn poker
text (``coplay.models.tokenizer``, the free-text variant) and given Qwen's chat format:
ChatML role markers (``<|im_start|>role ... <|im_end|>``, ``<|im_end|>`` the
end-of-sequence token, no BOS) and the ``<think>`` ``</think>`` reasoning tags. The
model's vocabulary is the tokenizer's, padded to a multiple of 64 as Qwen pads its own.
Both are saved as a plain Hugging Face folder in a temporary directory.

Then ``coplay train`` runs Kuhn poker self-play in text mode with chat context from
that folder in a subprocess (a few iterations, small sampled evaluation), timed, with
the child's peak resident memory (its ``ru_maxrss``). From the
run directory it checks and prints:

- the chat template was used: every prompt in ``transcripts.jsonl`` opens with the
  template's system message and ends with its assistant generation prompt;
- reasoning-block handling: the system message is the answer format's instruction,
  which asks for the ``<think>`` block;
- token exactness: for each player, turn t+1's ``prompt_ids`` begin with turn t's
  ``prompt_ids`` + ``response_ids``;
- generated tokens per second of the rollout (``rollout/response_len`` x
  ``rollout/decisions`` / ``perf/rollout_s`` in ``metrics.jsonl``, per iteration) and
  the learner's update seconds.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

QWEN2_01B = {
    "hidden_size": 768,
    "intermediate_size": 3072,
    "num_hidden_layers": 12,
    "num_attention_heads": 12,
    "num_key_value_heads": 2,
}
QWEN2_QUICK = {
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
}

IM_START, IM_END, ENDOFTEXT = "<|im_start|>", "<|im_end|>", "<|endoftext|>"
CHATML_TEMPLATE = (
    "{%- for m in messages %}"
    "{{ '<|im_start|>' + m['role'] + '\n' + m['content'] + '<|im_end|>' + '\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}"
    "{%- if enable_thinking is defined and enable_thinking is false %}"
    "{{ '<think>\n\n</think>\n\n' }}{%- endif %}{%- endif %}"
)
"""Qwen's ChatML template; ``enable_thinking=False`` pre-fills an empty reasoning block
as Qwen3's does. An assistant message ends with ``<|im_end|>``, where sampling stops."""


def chatml_tokenizer():
    """The free-text tokenizer trained on Kuhn text, with Qwen's chat format."""
    from coplay.envs.registry import make_env
    from coplay.models.tokenizer import train_tokenizer
    from coplay.train.trainer import game_text

    text = game_text(lambda: make_env("kuhn_poker"))
    tok = train_tokenizer(text.texts, vocab_size=32768, actions=text.actions, text=True)
    tok.add_special_tokens({"additional_special_tokens": [IM_START, IM_END, ENDOFTEXT]})
    tok.eos_token, tok.pad_token, tok.bos_token = IM_END, ENDOFTEXT, None
    tok.chat_template = CHATML_TEMPLATE
    return tok


def build_folder(folder: Path, quick: bool) -> dict:
    """Write a random Qwen2 model and its ChatML tokenizer to ``folder``."""
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    tok = chatml_tokenizer()
    cfg = Qwen2Config(
        **(QWEN2_QUICK if quick else QWEN2_01B),
        vocab_size=-(-len(tok) // 64) * 64,
        max_position_embeddings=4096,
        tie_word_embeddings=True,
        bos_token_id=None,
        eos_token_id=tok.eos_token_id,
        pad_token_id=tok.pad_token_id,
    )
    torch.manual_seed(0)
    model = Qwen2ForCausalLM(cfg)
    model.save_pretrained(folder)
    tok.save_pretrained(folder)
    return {
        "params": sum(p.numel() for p in model.parameters()),
        "vocab_size": cfg.vocab_size,
        "tokenizer_size": len(tok),
        **{k: getattr(cfg, k) for k in QWEN2_01B},
    }


def train_command(folder: Path, out: Path, args: argparse.Namespace) -> list[str]:
    overrides = [
        "game.name=kuhn_poker",
        f"model.path={folder}",
        "model.mode=text",
        "model.text.context=chat",
        f"model.max_new_tokens={args.max_new_tokens}",
        f"model.device={args.device}",
        f"model.dtype={args.dtype}",
        f"rollout.games_per_iter={args.games}",
        "rollout.group_size=2",
        f"optim.minibatch_size={args.games}",
        f"train.iterations={args.iterations}",
        # A random model's answers are mostly invalid: a random legal move instead of a
        # forfeit lets games reach a player's second turn, where chat context chains.
        "game.invalid.on_fail=penalty",
        "train.eval_every=1",
        "train.eval_samples=2",
        "train.eval_bootstrap=5",
        "train.eval_opponents=[]",
        "train.exact_matches=off",
        f"train.transcripts={args.games}",
        "train.save_every=0",
    ]
    return [sys.executable, "-m", "coplay.cli", "train", "--out", str(out), *overrides]


def run_training(cmd: Sequence[str], log: Path) -> tuple[float, float]:
    """Run ``cmd`` (output to ``log``); its wall seconds and peak resident memory in MiB."""
    path = os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])
    start = time.perf_counter()
    with log.open("w") as f:
        child = subprocess.Popen(cmd, env={**os.environ, "PYTHONPATH": path}, stdout=f, stderr=f)
        # wait4: this child's own peak (ru_maxrss, KiB on Linux), not the largest child's.
        _, status, usage = os.wait4(child.pid, 0)
    wall = time.perf_counter() - start
    code = child.returncode = os.waitstatus_to_exitcode(status)
    if code:
        raise RuntimeError(f"coplay train failed ({code}):\n{log.read_text()[-3000:]}")
    return wall, usage.ru_maxrss / 1024


def check_chat(run: Path, tok) -> dict:
    """Template, reasoning instruction and token exactness of the run's transcripts."""
    from coplay.policies.text import TextConfig

    instruction = TextConfig().format.instruction
    system = f"{IM_START}system\n{instruction}{IM_END}\n{IM_START}user\n"
    episodes = [json.loads(line) for line in (run / "transcripts.jsonl").read_text().splitlines()]
    turns = [t for e in episodes for t in e["turns"]]
    prompts = [tok.decode(t["prompt_ids"]) for t in turns]
    chains = follow_ups = 0
    for e in episodes:
        last: dict[int, dict] = {}
        for t in e["turns"]:
            before = last.get(t["player"])
            if before is not None:
                follow_ups += 1
                prefix = before["prompt_ids"] + before["response_ids"]
                chains += t["prompt_ids"][: len(prefix)] == prefix
            last[t["player"]] = t
    return {
        "episodes": len(episodes),
        "turns": len(turns),
        "template_used": all(p.startswith(system) for p in prompts)
        and all(p.endswith(f"{IM_START}assistant\n") for p in prompts),
        "think_instruction": "<think>" in instruction,
        "later_turns": follow_ups,
        "token_exact_turns": chains,
        "token_exact": follow_ups > 0 and chains == follow_ups,
        "example_prompt": prompts[
            max(range(len(turns)), key=lambda i: len(turns[i]["prompt_ids"]))
        ],
    }


def throughput(run: Path) -> dict:
    """Generated tokens per second of each iteration's rollout, and update seconds."""
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    rows = [r for r in rows if "perf/rollout_s" in r]
    per_iter = [
        r["rollout/response_len"] * r["rollout/decisions"] / r["perf/rollout_s"] for r in rows
    ]
    return {
        "tokens_per_s": per_iter,
        "response_len": [r["rollout/response_len"] for r in rows],
        "rollout_s": [r["perf/rollout_s"] for r in rows],
        "update_s": [r.get("perf/update_s") for r in rows],
        "invalid_rate": [r["rollout/invalid_rate"] for r in rows],
    }


def main(argv: Sequence[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="a tiny Qwen2 and 2 iterations")
    ap.add_argument("--iterations", type=int)
    ap.add_argument("--games", type=int, default=8, help="games per iteration")
    ap.add_argument("--max-new-tokens", type=int, default=32)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"])
    ap.add_argument("--json", type=Path, help="also write the result here")
    args = ap.parse_args(argv)
    args.iterations = args.iterations or (2 if args.quick else 3)
    from transformers import AutoTokenizer

    with tempfile.TemporaryDirectory() as tmp:
        folder, out = Path(tmp) / "qwen2", Path(tmp) / "run"
        model = build_folder(folder, args.quick)
        wall, peak = run_training(train_command(folder, out, args), Path(tmp) / "train.log")
        tok = AutoTokenizer.from_pretrained(folder)
        result = {
            "model": model,
            "settings": {k: v for k, v in vars(args).items() if k != "json"},
            "wall_s": wall,
            "peak_rss_mib": peak,
            **check_chat(out, tok),
            **throughput(out),
        }
    report(result)
    if args.json:
        args.json.write_text(json.dumps(result, indent=2))
    return result


def report(r: dict) -> None:
    m = r["model"]
    print(
        f"Qwen2 {m['params'] / 1e6:.1f}M params (hidden {m['hidden_size']}, "
        f"{m['num_hidden_layers']} layers, vocab {m['vocab_size']}; tokenizer {m['tokenizer_size']})"
    )
    print(f"chat template used: {r['template_used']} ({r['turns']} turns, {r['episodes']} games)")
    print(f"reasoning block asked for in the system message: {r['think_instruction']}")
    print(
        f"token exact: {r['token_exact']} ({r['token_exact_turns']}/{r['later_turns']} later turns)"
    )
    tps = ", ".join(f"{x:.1f}" for x in r["tokens_per_s"])
    print(f"generated tokens/s per iteration: {tps}")
    upd = ", ".join(f"{x:.1f}" for x in r["update_s"] if x is not None)
    print(f"update s per iteration: {upd}")
    print(f"wall {r['wall_s']:.1f} s, peak RSS {r['peak_rss_mib']:.0f} MiB")
    print("longest prompt:\n" + r["example_prompt"])


if __name__ == "__main__":
    main()
