"""``coplay sft``: supervised fine-tuning on chat JSONL, the warm start before RL.

The model is the run config's (``model.path`` or the tiny default, whose tokenizer is
trained on the game's text and the dataset's), fine-tuned in full or through a LoRA
adapter (``sft.lora``) with the loss on assistant tokens only (``coplay.sft.tokens``).
The run directory holds ``config.yaml`` (the run config the model was built from),
``sft.yaml`` (these settings), ``metrics.jsonl`` (one row per optimizer step) and
``checkpoints/final``: a plain checkpoint folder (a LoRA adapter is merged into it),
which ``coplay train model.path=RUN/checkpoints/final`` starts from.

Of the run config's ``optim`` section SFT applies only how an update runs
(``OPTIM_APPLIED``, ``coplay.sft.config``). In text mode the data must fit the
checkpoint, which records the answer format and length it plays with:
``coplay.sft.fit`` refuses it, before anything is written, where play would read
its answers as invalid or cut them off.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from contextlib import nullcontext
from pathlib import Path
from typing import Any

import torch
import yaml

from coplay.envs.gameref import GameRef
from coplay.models.build import build_policy
from coplay.models.lora import LoraSettings
from coplay.policies.lm import LMPolicy, learned_positions
from coplay.report import sinks
from coplay.report.atomic import write_text
from coplay.sft.config import OPTIM_APPLIED, SftConfig, SftSettings
from coplay.sft.data import Conversation, DataError, read_conversations
from coplay.sft.fit import check_answer_format, check_answer_lengths
from coplay.sft.tokens import Example, encode, ensure_chat_template
from coplay.train import micro, vocab_grads
from coplay.train.config import ConfigError, OptimConfig, RunConfig
from coplay.train.learner import FUSED_FROM, count, enable_checkpointing


def base_policy(cfg: RunConfig, conversations: Sequence[Conversation]) -> LMPolicy:
    """The model to fine-tune: ``model.path``, or the tiny model with a tokenizer trained
    on the game's text and the dataset's (so its words get tokens of their own)."""
    from coplay.train.trainer import game_text

    game = GameRef(cfg.game.name, cfg.game.params)
    text = game_text(game.make, seed=cfg.train.seed)
    corpus = text.texts + [m.content for c in conversations for m in c.messages]
    return build_policy(cfg.model, corpus=corpus, actions=text.actions, seed=cfg.train.seed)


def token_limit(settings: SftSettings, model: torch.nn.Module) -> int:
    """The longest conversation to train on: ``sft.max_tokens``, by default the model's
    context length. Refused past a learned position table (GPT-2's ``wpe``), where a
    longer conversation would be an IndexError deep in torch."""
    if settings.max_tokens is None:
        return model.config.max_position_embeddings
    positions = learned_positions(model)
    if positions is not None and settings.max_tokens > positions:
        raise ConfigError(
            f"sft.max_tokens={settings.max_tokens} is more than the model's {positions} "
            "positions (max_position_embeddings, a learned table it cannot run past); "
            f"set it to at most {positions} or leave it out"
        )
    return settings.max_tokens


def check_lengths(examples: Sequence[Example], limit: int, source: Path) -> None:
    for ex in examples:
        if len(ex.ids) > limit:
            raise DataError(
                f"{source}:{ex.line}: the conversation is {len(ex.ids)} tokens, longer than "
                f"{limit} (sft.max_tokens, or the model's context length)"
            )


def masked_nll(model: torch.nn.Module, batch: Sequence[Example], pad_id: int) -> torch.Tensor:
    """Summed negative log-likelihood of the batch's assistant tokens (right-padded).

    Logits are kept only from the position before the batch's first trained token on
    (the model's own ``logits_to_keep``), and the log-softmax is taken only at trained
    positions, as a log-sum-exp: at a large vocabulary the (rows, length, vocabulary)
    tensors of every position, and their float copies, were most of the memory."""
    width = max(len(ex.ids) for ex in batch)
    ids = torch.full((len(batch), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(batch), width), dtype=torch.bool)
    attention = torch.zeros((len(batch), width), dtype=torch.long)
    for row, ex in enumerate(batch):
        ids[row, : len(ex.ids)] = torch.tensor(ex.ids)
        mask[row, : len(ex.ids)] = torch.tensor(ex.loss_mask)
        attention[row, : len(ex.ids)] = 1
    mask[:, 0] = False  # the first token is not predicted
    device = next(model.parameters()).device
    first = _first_trained(mask)
    if first is None:  # nothing to learn here: a zero that still reaches the weights
        return sum(p.sum() * 0.0 for p in model.parameters() if p.requires_grad)
    keep = width - first + 1  # logits at positions first - 1 .. width - 1
    logits = model(  # no KV cache: nothing continues from it (and checkpointing drops it)
        input_ids=ids.to(device),
        attention_mask=attention.to(device),
        logits_to_keep=keep,
        use_cache=False,
    ).logits
    trained = mask[:, first:].to(device)  # kept column j predicts token first + j
    rows = logits[:, :-1][trained].float()  # (N, V): only the trained positions
    target = ids[:, first:].to(device)[trained]
    picked = rows.gather(-1, target[:, None]).squeeze(-1)
    return (torch.logsumexp(rows, dim=-1) - picked).sum()


def _first_trained(mask: torch.Tensor) -> int | None:
    """The first column where any row has a trained token, or None."""
    cols = mask.any(0).nonzero()
    return int(cols[0]) if len(cols) else None


def _passes(model: torch.nn.Module, batch: Sequence[Example], settings: SftSettings):
    """The batch cut into runs of consecutive conversations whose pass stays within the
    token budget (``micro_batch_tokens``): its rows times the longest of them, plus
    each row's kept logits (from the run's earliest trained token to the longest end),
    a kept position weighing its vocabulary rows (``micro.logit_tokens``). A
    conversation over the budget runs alone."""
    config = model.config
    budget = settings.micro_batch_tokens or micro.auto_budget(config)
    weight = micro.logit_tokens(config)
    runs, start, width, first = [], 0, 0, 0
    for i, ex in enumerate(batch):
        own = _first_index(ex.loss_mask)
        wider = max(width, len(ex.ids))
        earlier = min(first, own) if i > start else own
        rows = i + 1 - start
        if i > start and rows * (wider + (wider - earlier + 1) * weight) > budget:
            runs.append(batch[start:i])
            start, wider, earlier = i, len(ex.ids), own
        width, first = wider, earlier
    runs.append(batch[start:])
    return runs


def _first_index(loss_mask: Sequence[bool]) -> int:
    """Where an example's first trained token is (its length if it has none)."""
    return next((i for i, m in enumerate(loss_mask) if m and i), len(loss_mask))


def _batches(n: int, size: int, generator: torch.Generator) -> list[list[int]]:
    order = torch.randperm(n, generator=generator).tolist()
    return [order[i : i + size] for i in range(0, n, size)]


def _wrap_lora(policy: LMPolicy, settings: LoraSettings) -> torch.nn.Module:
    from peft import get_peft_model

    from coplay.models.lora import peft_config

    return get_peft_model(policy.model, peft_config(settings))


def sft_optimizer(
    params: list[torch.nn.Parameter], settings: SftSettings, optim: OptimConfig
) -> torch.optim.AdamW:
    """AdamW at the ``sft.*`` rates, stepped as the RL learner steps it (``optim.fused``,
    by default fused past ``FUSED_FROM`` trainable parameters, one foreach call below)."""
    small = count(params) <= FUSED_FROM
    fused = optim.fused if optim.fused is not None else not small
    step = {"fused": True} if fused else {"foreach": True if small else None}
    return torch.optim.AdamW(params, lr=settings.lr, weight_decay=settings.weight_decay, **step)


def fine_tune(
    model: torch.nn.Module,
    examples: Sequence[Example],
    settings: SftSettings,
    *,
    pad_id: int,
    seed: int,
    log: Callable[[int, dict[str, float]], None],
    optim: OptimConfig | None = None,
) -> int:
    """Minimise the assistant tokens' mean NLL; ``log(step, metrics)`` after each step.
    ``optim``'s ``OPTIM_APPLIED`` keys say how an update runs. Returns the steps."""
    optim = optim or OptimConfig()
    params = [p for p in model.parameters() if p.requires_grad]
    opt = sft_optimizer(params, settings, optim)
    generator = torch.Generator().manual_seed(seed)
    if optim.activation_checkpointing:  # a large model's long conversations outgrow memory
        enable_checkpointing(model)
    # The vocabulary matrices' gradients added in place where they are large (as the
    # RL learner does): otherwise each pass builds two vocabulary-sized copies.
    in_place = optim.vocab_grads_in_place
    if in_place is None:
        in_place = vocab_grads.worth_it(model)
    model.train()
    step, start = 0, time.perf_counter()
    for epoch in range(settings.epochs):
        for idx in _batches(len(examples), settings.batch_size, generator):
            batch = [examples[i] for i in idx]
            tokens = sum(ex.trained_tokens for ex in batch)
            opt.zero_grad(set_to_none=True)
            loss = 0.0
            with vocab_grads.grads_in_place(model) if in_place else nullcontext():
                for part in _passes(model, batch, settings):
                    nll = masked_nll(model, part, pad_id) / max(1, tokens)
                    nll.backward()
                    loss += nll.item()
            norm = torch.nn.utils.clip_grad_norm_(params, settings.max_grad_norm)
            opt.step()
            step += 1
            log(
                step,
                {
                    "sft/loss": loss,
                    "sft/tokens": float(tokens),
                    "sft/grad_norm": float(norm),
                    "sft/epoch": float(epoch + 1),
                    "perf/elapsed_s": time.perf_counter() - start,
                },
            )
    model.eval()
    return step


def run_sft(
    cfg: SftConfig,
    data: str | Path,
    out: str | Path,
    *,
    progress: Callable[[int, dict[str, float]], None] | None = None,
) -> dict[str, Any]:
    """Fine-tune as configured on ``data``, writing the run directory ``out`` (claimed
    by the caller); returns the summary (also ``summary.json``)."""
    from coplay.train.trainer import save_checkpoint

    data, out = Path(data), Path(out)
    conversations = read_conversations(data)
    # A text-mode checkpoint plays in the format and length it records; a choice-mode
    # one scores the legal actions and writes no answer.
    text = cfg.run.model.mode == "text"
    if text:
        check_answer_format(conversations, cfg.run.model.text.answer, data)
    torch.manual_seed(cfg.run.train.seed)
    policy = base_policy(cfg.run, conversations)
    limit = token_limit(cfg.sft, policy.model)
    fallback = ensure_chat_template(policy.tokenizer)
    examples = [encode(c, policy.tokenizer, str(data), ends=policy.ends) for c in conversations]
    check_lengths(examples, limit, data)
    if text:
        check_answer_lengths(examples, policy.ends, cfg.run.model.max_new_tokens, data)
    _start(out, cfg)
    model = _wrap_lora(policy, cfg.sft.lora) if cfg.sft.lora is not None else policy.model
    losses: list[float] = []

    def log(step: int, metrics: dict[str, float]) -> None:
        losses.append(metrics["sft/loss"])
        sinks.append_metrics(out / "metrics.jsonl", step, metrics)
        if progress:
            progress(step, metrics)

    steps = fine_tune(
        model,
        examples,
        cfg.sft,
        pad_id=policy.tokenizer.pad_token_id or 0,
        seed=cfg.run.train.seed,
        log=log,
        optim=cfg.run.optim,
    )
    if cfg.sft.lora is not None:
        policy.model = model.merge_and_unload()
    final = save_checkpoint(policy, out / "checkpoints" / "final", game=cfg.run.game.played())
    summary = {
        "conversations": len(examples),
        "trained_tokens": sum(ex.trained_tokens for ex in examples),
        "steps": steps,
        "first/sft/loss": losses[0],
        "final/sft/loss": losses[-1],
        "fallback_chat_template": fallback,
        "checkpoint": str(final),
    }
    sinks.write_summary(out / "summary.json", summary)
    return summary


def steps_total(conversations: int, settings: SftSettings) -> int:
    """Optimizer steps a run takes (for a progress bar)."""
    return settings.epochs * -(-conversations // settings.batch_size)


def _start(out: Path, cfg: SftConfig) -> None:
    out.mkdir(parents=True, exist_ok=True)
    run = cfg.run.model_dump(mode="json")
    # Only the optim keys SFT applied: the rest are coplay train's, and sft.yaml says
    # what SFT trained with.
    run["optim"] = {k: v for k, v in run["optim"].items() if k in OPTIM_APPLIED}
    write_text(out / "config.yaml", yaml.safe_dump(run, sort_keys=False))
    write_text(out / "sft.yaml", yaml.safe_dump(cfg.sft.model_dump(mode="json"), sort_keys=False))
    (out / "metrics.jsonl").write_text("")
