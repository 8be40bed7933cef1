"""Free-text sampling (``sample_text``) against Hugging Face ``generate``.

Both arms sample the same model on the same prompts (Kuhn poker observations, both
seats) for exactly the same number of new tokens: ``sample_text`` with an EOS id that
never occurs, ``generate`` with ``do_sample=True`` and ``min_new_tokens`` =
``max_new_tokens`` (no top-k, no top-p, temperature 1, as ``sample_text``'s
defaults). For each model, batch size and length the two arms run alternately
(``--repeats`` times each, the order flipping every repeat) after one warm-up each;
the table reports the medians and the ratio generate / sample_text (above 1:
``sample_text`` is faster). Models: ``tiny``, the default tiny Llama (2 layers, 64
wide, the game tokenizer's vocabulary), and ``qwen2``, a Qwen2-architecture model
built from a config (2 layers, 128 wide, grouped-query attention, 8192-token
vocabulary), randomly initialised; nothing is downloaded.

    OMP_NUM_THREADS=2 python benchmarks/text_generation.py --repeats 5
    python benchmarks/text_generation.py --quick   # smoke run, seconds
    python benchmarks/text_generation.py --device cuda --repeats 5   # on a GPU
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import time
from collections.abc import Callable, Sequence

import torch
from transformers import PreTrainedModel, Qwen2Config, Qwen2ForCausalLM

from coplay.envs.registry import make_env
from coplay.models.build import ModelConfig, build_policy
from coplay.policies.lm import LMPolicy
from coplay.policies.prefixes import left_pad
from coplay.policies.sampling import sample_text
from coplay.train.trainer import game_text


def kuhn_policy() -> LMPolicy:
    """The default tiny model with its tokenizer trained on Kuhn text."""
    make = lambda: make_env("kuhn_poker")  # noqa: E731
    text = game_text(make, episodes=50)
    return build_policy(ModelConfig(), corpus=text.texts, actions=text.actions, seed=0)


def qwen2_model(vocab_size: int = 8192) -> PreTrainedModel:
    """A small Qwen2-architecture model, random weights from a fixed seed."""
    cfg = Qwen2Config(
        vocab_size=vocab_size,
        hidden_size=128,
        intermediate_size=512,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=1024,
        tie_word_embeddings=True,
        bos_token_id=1,
        eos_token_id=2,
        pad_token_id=0,
    )
    with torch.random.fork_rng():
        torch.manual_seed(0)
        return Qwen2ForCausalLM(cfg).eval()


def kuhn_prompts(policy: LMPolicy, n: int) -> list[tuple[int, ...]]:
    """``n`` prompts: Kuhn observations of both seats over successive deals."""
    env, out, seed = make_env("kuhn_poker"), [], 0
    while len(out) < n:
        env.reset(seed)
        while env.players_to_act() and len(out) < n:
            p = env.players_to_act()[0]
            obs = env.observe(p)
            out.append(policy.prompt_ids(obs))
            env.step({p: obs.legal_actions[seed % len(obs.legal_actions)]})
        seed += 1
    return out


def ours(model: PreTrainedModel, prompts: Sequence[Sequence[int]], new: int) -> int:
    """``sample_text``, never stopping early; the number of new tokens."""
    gen = torch.Generator().manual_seed(0)
    answers = sample_text(
        model, prompts, max_new_tokens=new, temperature=1.0, eos_id=-1, pad_id=0, generator=gen
    )
    return sum(len(ids) for ids, _ in answers)


@torch.no_grad()
def theirs(model: PreTrainedModel, prompts: Sequence[Sequence[int]], new: int) -> int:
    """Hugging Face ``generate`` on the same left-padded prompts; new tokens."""
    ids, attn, _ = left_pad(prompts, 0)
    device = next(model.parameters()).device
    ids, attn = ids.to(device), attn.to(device)
    out = model.generate(
        input_ids=ids,
        attention_mask=attn,
        do_sample=True,
        max_new_tokens=new,
        temperature=1.0,
        top_k=0,
        top_p=1.0,
        pad_token_id=0,
        # No end token, as sample_text's eos_id=-1: every row writes ``new`` tokens
        # without the min-length processors that forcing the length with one would add.
        eos_token_id=None,
    )
    return (out.shape[1] - ids.shape[1]) * out.shape[0]


def timed(fn: Callable[[], int]) -> tuple[float, int]:
    start = time.perf_counter()
    n = fn()
    if torch.cuda.is_initialized():  # generate's last kernels may still be queued
        torch.cuda.synchronize()
    return time.perf_counter() - start, n


def compare(model, prompts, new: int, repeats: int) -> dict:
    """Both arms alternately, medians and the ratio generate / sample_text."""
    arms = {
        "sample_text": lambda: ours(model, prompts, new),
        "generate": lambda: theirs(model, prompts, new),
    }
    times: dict[str, list[float]] = {k: [] for k in arms}
    for fn in arms.values():  # warm-up
        fn()
    for r in range(repeats):
        for name in list(arms) if r % 2 == 0 else list(arms)[::-1]:
            seconds, tokens = timed(arms[name])
            if tokens != len(prompts) * new:
                raise RuntimeError(f"{name} made {tokens} tokens, not {len(prompts) * new}")
            times[name].append(seconds)
    med = {k: statistics.median(v) for k, v in times.items()}
    return {
        "median_s": med,
        "tokens_per_s": {k: len(prompts) * new / s for k, s in med.items()},
        "ratio": med["generate"] / med["sample_text"],
    }


def main(argv: Sequence[str] | None = None) -> list[dict]:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", nargs="+", default=["tiny", "qwen2"], choices=["tiny", "qwen2"])
    ap.add_argument("--batches", nargs="+", type=int, default=[64, 256])
    ap.add_argument("--new-tokens", nargs="+", type=int, default=[32, 128])
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    ap.add_argument("--device", default="cpu", help="torch device of both models, e.g. cuda")
    ap.add_argument("--quick", action="store_true", help="smoke run: batch 4, 4 tokens, 1 repeat")
    args = ap.parse_args(argv)
    if args.quick:
        args.batches, args.new_tokens, args.repeats = [4], [4], 1
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.device != "cpu" and not args.device.startswith("cuda"):
        ap.error(f"--device {args.device}: only cpu and cuda are measured")
    if args.device != "cpu" and not torch.cuda.is_available():
        ap.error(f"--device {args.device}: torch sees no GPU here")
    policy = kuhn_policy()
    models = {"tiny": policy.model.eval().to(args.device), "qwen2": None}
    prompts = kuhn_prompts(policy, max(args.batches))
    rows = []
    print(
        f"{'model':6} {'batch':>5} {'new':>4} {'sample_text s':>13} {'generate s':>10} {'ratio':>6}"
    )
    for name in args.models:
        model = models[name] or qwen2_model().to(args.device)
        for batch in args.batches:
            for new in args.new_tokens:
                row = {"model": name, "batch": batch, "new_tokens": new}
                row |= compare(model, prompts[:batch], new, args.repeats)
                rows.append(row)
                med = row["median_s"]
                print(
                    f"{name:6} {batch:5d} {new:4d} {med['sample_text']:13.3f} "
                    f"{med['generate']:10.3f} {row['ratio']:6.2f}",
                    flush=True,
                )
    machine = f"{platform.machine()}, {torch.get_num_threads()} torch thread(s)"
    if args.device != "cpu":
        machine += f", {torch.cuda.get_device_name(args.device)}"
    print(json.dumps({"machine": machine, "repeats": args.repeats, "rows": rows}, indent=2))
    return rows


if __name__ == "__main__":
    main()
