"""The vLLM backend against vLLM's own ``LLM.generate`` and the Hugging Face backend.

All three arms write answers to the same prompts (Kuhn poker observations) with the
same model: ``VLLMBackend.generate`` (a seed per answer drawn from a torch generator,
processed log-probs returned), ``LLM.generate`` on the backend's own engine with one
shared ``SamplingParams`` (no seeds, the sampled token's log-prob), the same with the
backend's own requests (``llm_seeded``: a seed per answer), and ``HFBackend.generate``
(coplay's ``sample_text``). Throughput is generated tokens per second (answers may end
early at EOS; each arm counts its own tokens). ``backend/llm`` is the backend against
vLLM's plainest call (target >= 0.9); ``backend/llm_seeded`` its own overhead on
identical requests, the rest being what per-answer seeds cost in vLLM's sampler. It also times in-memory
weight syncs (``load_weights`` of a perturbed state dict) and the largest per-token
gap between the engine's log-probs and the learner's recomputation.

Models, built from configs (nothing is downloaded), head_dim >= 32 as vLLM's CPU
attention needs: ``tiny``, a Llama of 2 layers, 64 wide, 2 heads, over the Kuhn
tokenizer's vocabulary; ``30m``, a Qwen2 of 8 layers, 512 wide, 8 heads (2 KV heads),
8192-token vocabulary (~29M parameters).

    OMP_NUM_THREADS=2 python benchmarks/vllm_generation.py --repeats 3 --json vllm.json
    python benchmarks/vllm_generation.py --quick   # smoke run: tiny model, batch 8

Run it in the vLLM venv (``make install-vllm``, then ``.venv-vllm/bin/python``).
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import time
from collections.abc import Callable

import torch
from transformers import LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM

from coplay.backends import HFBackend
from coplay.backends.base import Sampling
from coplay.backends.vllm import VLLMBackend
from coplay.envs.registry import make_env
from coplay.models.tokenizer import train_tokenizer
from coplay.policies.lm import LMPolicy
from coplay.policies.scoring import token_logps

SHAPES = {
    "tiny": (LlamaConfig, {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
                           "num_attention_heads": 2, "num_key_value_heads": 2}),
    "30m": (Qwen2Config, {"hidden_size": 512, "intermediate_size": 1536, "num_hidden_layers": 8,
                          "num_attention_heads": 8, "num_key_value_heads": 2,
                          "vocab_size": 8192}),
}  # fmt: skip


def kuhn_tokenizer():
    env = make_env("kuhn_poker")
    corpus = []
    for seed in range(30):
        env.reset(seed)
        corpus.append(env.observe(env.players_to_act()[0]).text)
    return train_tokenizer(corpus + ["Action: [Pass] [Bet] [Call] [Fold]"] * 20, vocab_size=320)


def build_model(name: str, vocab: int):
    config_cls, shape = SHAPES[name]
    config = config_cls(
        **{"vocab_size": vocab, **shape},
        max_position_embeddings=1024,
        tie_word_embeddings=True,
        bos_token_id=1,
        eos_token_id=2,
        pad_token_id=0,
    )
    cls = LlamaForCausalLM if config_cls is LlamaConfig else Qwen2ForCausalLM
    with torch.random.fork_rng():
        torch.manual_seed(0)
        return cls(config).eval()


def prompts_for(tok, batch: int) -> list[tuple[int, ...]]:
    env, policy = make_env("kuhn_poker"), LMPolicy(build_model("tiny", len(tok)), tok)
    out = []
    for seed in range(batch):
        env.reset(seed)
        out.append(policy.prompt_ids(env.observe(env.players_to_act()[0])))
    return out


def timed(fn: Callable[[], int]) -> tuple[float, int]:
    start = time.perf_counter()
    tokens = fn()
    return time.perf_counter() - start, tokens


def arms(vb: VLLMBackend, hf: HFBackend, prompts, new_tokens: int) -> dict[str, Callable[[], int]]:
    from vllm import SamplingParams
    from vllm.inputs import TokensPrompt

    vb.max_new_tokens = hf.max_new_tokens = new_tokens
    gen = torch.Generator().manual_seed(0)
    params = SamplingParams(max_tokens=new_tokens, logprobs=0, stop_token_ids=[2], detokenize=False)
    requests = [TokensPrompt(prompt_token_ids=list(p)) for p in prompts]

    def backend() -> int:
        return sum(len(a.ids) for a in vb.generate(prompts, generator=gen))

    def llm() -> int:
        outs = vb.llm.generate(requests, params, use_tqdm=False)
        return sum(len(o.outputs[0].token_ids) for o in outs)

    def llm_seeded() -> int:
        # The backend's very requests (a seed per answer, its SamplingParams), so the
        # ratio to it is the backend's own overhead, and llm / llm_seeded the cost of
        # the per-answer seeds inside vLLM's sampler.
        seeds = torch.randint(0, 2**62, (len(prompts),), generator=gen).tolist()
        outs = vb.llm.generate(requests, [vb._params(Sampling(), s) for s in seeds], use_tqdm=False)
        return sum(len(o.outputs[0].token_ids) for o in outs)

    def hf_arm() -> int:
        return sum(len(a.ids) for a in hf.generate(prompts, generator=gen))

    return {"backend": backend, "llm": llm, "llm_seeded": llm_seeded, "hf": hf_arm}


def measure_cell(vb, hf, prompts, new_tokens: int, repeats: int, skip_hf: bool) -> dict:
    runs = arms(vb, hf, prompts, new_tokens)
    if skip_hf:
        runs.pop("hf")
    rates: dict[str, list[float]] = {k: [] for k in runs}
    for fn in runs.values():
        fn()  # warm-up
    for r in range(repeats):
        for name in list(runs)[:: 1 if r % 2 == 0 else -1]:
            seconds, tokens = timed(runs[name])
            rates[name].append(tokens / seconds)
    out = {f"{k}_tok_s": statistics.median(v) for k, v in rates.items()}
    out["backend/llm"] = out["backend_tok_s"] / out["llm_tok_s"]
    out["backend/llm_seeded"] = out["backend_tok_s"] / out["llm_seeded_tok_s"]
    if "hf_tok_s" in out:
        out["backend/hf"] = out["backend_tok_s"] / out["hf_tok_s"]
    return out


def sync_seconds(vb: VLLMBackend, repeats: int) -> float:
    state = {k: v + 1e-3 * torch.randn_like(v) for k, v in vb.model.state_dict().items()}
    times = []
    for version in range(1, repeats + 1):
        vb.load_weights(state, version)
        times.append(vb.sync_seconds)
    return statistics.median(times)


def mismatch(vb: VLLMBackend, prompts) -> float:
    answers = vb.generate(prompts[:16], generator=torch.Generator().manual_seed(1))
    pairs = [(p, a.ids) for p, a in zip(prompts, answers, strict=False)]
    logp, _, _ = token_logps(vb.model, pairs, temperature=vb.temperature)
    return max(
        (logp[i, : len(a.ids)] - torch.tensor(a.logprobs)).abs().max().item()
        for i, a in enumerate(answers)
    )


def run_model(name: str, tok, args) -> list[dict]:
    model = build_model(name, len(tok) if name == "tiny" else SHAPES[name][1]["vocab_size"])
    params = sum(p.numel() for p in model.parameters())
    vb = VLLMBackend(model, tok)
    hf = HFBackend(model, tok)
    rows = []
    for batch in args.batches:
        prompts = prompts_for(tok, batch)
        for new_tokens in args.new_tokens:
            skip_hf = args.skip_hf_above is not None and batch * new_tokens > args.skip_hf_above
            cell = measure_cell(vb, hf, prompts, new_tokens, args.repeats, skip_hf)
            rows.append(
                {"model": name, "params": params, "batch": batch, "new_tokens": new_tokens} | cell
            )
            print(json.dumps(rows[-1]), flush=True)
    extra = {"model": name, "params": params, "sync_s": sync_seconds(vb, args.repeats),
             "max_logp_gap": mismatch(vb, prompts_for(tok, 16))}  # fmt: skip
    print(json.dumps(extra), flush=True)
    rows.append(extra)
    return rows


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--models", nargs="+", default=["tiny", "30m"], choices=list(SHAPES))
    p.add_argument("--batches", nargs="+", type=int, default=[64, 256])
    p.add_argument("--new-tokens", nargs="+", type=int, default=[32, 128])
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--skip-hf-above", type=int, default=None, help="no HF arm past batch x tokens")
    p.add_argument("--quick", action="store_true", help="tiny model, batch 8, 8 tokens")
    p.add_argument("--json", help="write the rows to this file")
    args = p.parse_args()
    if args.quick:
        args.models, args.batches, args.new_tokens, args.repeats = ["tiny"], [8], [8], 1
    tok = kuhn_tokenizer()
    rows = [row for name in args.models for row in run_model(name, tok, args)]
    if args.json:
        meta = {"torch": torch.__version__, "threads": torch.get_num_threads(),
                "machine": platform.machine()}  # fmt: skip
        with open(args.json, "w") as f:
            json.dump({"meta": meta, "rows": rows}, f, indent=2)


if __name__ == "__main__":  # vLLM's engine may spawn processes, which re-import this file
    main()
