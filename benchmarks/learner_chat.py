"""Learner throughput on chat-context text trajectories against a raw forward + backward.

In chat context every turn's prompt is the player's whole conversation so far, so the
learner scores each conversation as one sequence (``coplay.policies.chains``). Arms,
timed alternately on the same samples (medians of ``--repeats``, tokens/s):

- ``learner``: the update as the training loop runs it (``Trainee.learn``: advantages,
  samples, every loss term, the epochs' minibatches and micro-batches).
- ``raw``: the model work that update cannot do without, on token tensors built before
  the clock starts, in the same minibatches and micro-batches: per micro-batch one
  padded forward pass over its conversations, the sampled answer tokens' log-probs at
  the sampling temperature (logits only at the answer positions), a policy-gradient
  loss and its backward pass; per minibatch the gradient clipping and the AdamW step;
  where the config has a KL term, the reference's no-grad forward once per
  conversation.

Tokens counted: every token of every conversation sequence, once per epoch. The
samples come from one iteration of the config's own rollout (``--model-path`` for a
warm-started checkpoint; otherwise the untrained tiny model writes to its token
limit). Printed: both medians and learner / raw; ``--json`` writes them.

    python benchmarks/learner_chat.py --preset kuhn-selfplay --repeats 5 \\
        model.mode=text model.text.context=chat
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from learner_throughput import samples_of

from coplay.policies.chains import _full, conversations
from coplay.policies.prefixes import left_pad
from coplay.train.learner import Learner
from coplay.train.learner_update import shuffled
from coplay.train.loop import make_plan
from coplay.train.micro import learner_micro_batches
from coplay.train.settings import build_config
from coplay.train.trainer import setup


def chain_batch(samples, pad: int):
    """One micro-batch's conversations as a padded batch: ids, attention mask,
    positions, the kept logit columns, and per answer token (kept row, kept column,
    target id, advantage)."""
    decisions = [s.decision for s in samples]
    chains = conversations(decisions)
    seqs = [_full(decisions[c[-1]]) for c in chains]
    ids, attn, pos = left_pad(seqs, pad)
    rows, cols, targets, adv = [], [], [], []
    for c, chain in enumerate(chains):
        offset = ids.shape[1] - len(seqs[c])
        for i in chain:
            start = offset + len(decisions[i].prompt_ids)
            for k, tok in enumerate(decisions[i].response_ids):
                rows.append(c)
                cols.append(start + k - 1)
                targets.append(tok)
                adv.append(samples[i].advantage)
    keep = torch.tensor(sorted(set(cols)))
    where = torch.searchsorted(keep, torch.tensor(cols))
    tokens = int(attn.sum())
    return (ids, attn, pos, keep, torch.tensor(rows), where, torch.tensor(targets)), (
        torch.tensor(adv),
        tokens,
    )


def prepare(learner: Learner, samples, seed: int, epochs: int):
    """Per epoch and minibatch (in the learner's conversation-keeping order), its
    micro-batches prebuilt, and the tokens they run."""
    pad = learner.policy.tokenizer.pad_token_id or 0
    rng = np.random.default_rng(seed)
    plan, tokens = [], 0
    for _ in range(epochs):
        order = shuffled(samples, rng, by_conversation=True)
        for start in range(0, len(samples), learner.minibatch_size):
            minibatch = [samples[i] for i in order[start : start + learner.minibatch_size]]
            micros = []
            for s, e in learner_micro_batches(learner, [x.decision for x in minibatch]):
                batch, (adv, n) = chain_batch(minibatch[s:e], pad)
                micros.append((batch, adv))
                tokens += n
            plan.append((micros, len(minibatch)))
    return plan, tokens


def answer_logps(model, batch, temperature: float) -> torch.Tensor:
    ids, attn, pos, keep, rows, where, targets = batch
    logits = model(
        input_ids=ids, attention_mask=attn, position_ids=pos, logits_to_keep=keep
    ).logits  # (C, len(keep), V)
    picked = F.log_softmax(logits[rows, where].float() / temperature, dim=-1)
    return picked.gather(-1, targets[:, None]).squeeze(-1)


def raw_update(learner: Learner, plan, reference) -> None:
    """The timed raw arm: forward + backward per micro-batch, clip + step per minibatch."""
    model, temp = learner.policy.model, learner.policy.temperature
    if reference is not None:
        with torch.no_grad():
            for batch in reference:
                answer_logps(model, batch, temp)
    model.train()
    params = [p for group in learner.optimizer.param_groups for p in group["params"]]
    for micros, size in plan:
        learner.optimizer.zero_grad(set_to_none=True)
        for batch, adv in micros:
            loss = -(adv * answer_logps(model, batch, temp)).sum() / size
            loss.backward()
        torch.nn.utils.clip_grad_norm_(params, learner.max_grad_norm)
        learner.optimizer.step()
    model.eval()


def measure(args: argparse.Namespace) -> dict:
    torch.set_num_threads(args.threads)
    overrides = list(args.overrides)
    if args.model_path:
        overrides.append(f"model.path={args.model_path}")
    cfg = build_config(preset=args.preset, overrides=overrides)
    if cfg.model.mode != "text" or cfg.model.text.context != "chat":
        raise SystemExit("learner_chat: needs model.mode=text model.text.context=chat")
    with tempfile.TemporaryDirectory() as tmp:
        run = setup(cfg, Path(tmp))
        trainee = run.trainees[0]
        plan, _ = make_plan(run, 1)
        episodes = run.source.play(plan, run.policies).episodes
        samples = samples_of(trainee, episodes)
        learner = trainee.learner
        pad = learner.policy.tokenizer.pad_token_id or 0
        reference = None
        if learner.reference is not None and cfg.loss.kl is not None:
            parts = learner_micro_batches(learner, [s.decision for s in samples])
            reference = [chain_batch(samples[a:b], pad)[0] for a, b in parts]
        trainee.learn(episodes, run.rng)  # warm-up
        secs: dict[str, list[float]] = {"learner": [], "raw": []}
        tokens = 0
        for r in range(args.repeats):
            for arm in ("learner", "raw") if r % 2 == 0 else ("raw", "learner"):
                if arm == "raw":
                    built, tokens = prepare(learner, samples, r, learner.epochs)
                    start = time.perf_counter()
                    raw_update(learner, built, reference)
                else:
                    start = time.perf_counter()
                    trainee.learn(episodes, run.rng)
                secs[arm].append(time.perf_counter() - start)
    med = {arm: statistics.median(v) for arm, v in secs.items()}
    chains = conversations([s.decision for s in samples])
    answers = [len(s.decision.response_ids) for s in samples]
    return {
        "preset": args.preset,
        "overrides": overrides,
        "decisions": len(samples),
        "conversations": len(chains),
        "mean_answer_tokens": float(np.mean(answers)),
        "tokens_per_update": tokens,
        "epochs": learner.epochs,
        "machine": f"{platform.machine()}, {torch.get_num_threads()} torch thread(s)",
        "median_s": med,
        "tokens_per_s": {arm: tokens / s for arm, s in med.items()},
        "learner/raw": med["raw"] / med["learner"],
        "seconds": secs,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--preset", default="kuhn-selfplay")
    ap.add_argument("--model-path", default=None, help="a checkpoint to start from")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--json", type=Path)
    ap.add_argument("overrides", nargs="*", help="config overrides, key=value")
    args = ap.parse_args()
    result = measure(args)
    print(
        f"{result['decisions']} decisions in {result['conversations']} conversations, "
        f"{result['mean_answer_tokens']:.1f} answer tokens each, "
        f"{result['tokens_per_update']} tokens per update"
    )
    for arm, rate in result["tokens_per_s"].items():
        print(f"{arm:8s} {rate:9.1f} tokens/s ({result['median_s'][arm]:.3f} s median)")
    print(f"learner/raw {result['learner/raw']:.3f}")
    if args.json:
        args.json.write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
