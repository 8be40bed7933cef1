"""Scoring kernels shared by rollout and learner.

Every function here takes token ids and a causal LM and returns log-probs; the
rollout calls them under ``no_grad`` and the learner with gradients, so the two
compute the same numbers. Sequences are left-padded with positions that skip the
padding, so a sequence scores the same whatever it is batched with. Which rows share
a prefix is planned in ``coplay.policies.prefixes``; choices among legal actions are
scored in ``coplay.policies.choices``, free text is sampled in
``coplay.policies.sampling``, all with these kernels.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from transformers import PreTrainedModel

from coplay.models.devices import to_device
from coplay.policies.prefixes import left_pad, pack, prefix_groups, shared_prefix_len

CHECKPOINTED = "coplay_activation_checkpointing"
"""Attribute set on a model whose activation checkpointing the learner turned on
(``coplay.train.learner.enable_checkpointing``): one lookup per forward pass instead of
a walk over the model's modules."""


def caching(model: PreTrainedModel) -> bool:
    """Whether a forward pass of ``model`` may build and read a KV cache. Not in a
    training pass with activation checkpointing (``optim.activation_checkpointing``):
    Hugging Face's checkpointed blocks drop the cache there, and a continuation pass
    would write it again when the backward pass recomputes the block. Scoring then
    runs every sequence whole, which gives the same numbers up to float rounding."""
    return not (model.training and getattr(model, CHECKPOINTED, False))


def forward_shared(
    model: PreTrainedModel,
    seqs: Sequence[Sequence[int]],
    pad_id: int,
    *,
    limit: int | None = None,
    **kwargs,
) -> tuple[object, torch.Tensor, torch.Tensor]:
    """The model on left-padded ``seqs``, their common prefix run once.

    Game prompts open with the same rules text, often half their tokens; a causal
    model's keys and values there are the same for every row, so they are computed
    for one row and repeated (gradients flow back through the repeat). Returns the
    output and the attention mask and positions over prefix + rows, ready for a
    continuation pass. Equal to one pass over the padded batch up to float error.
    ``limit`` caps the shared tokens where the caller needs logits further back.
    """
    device = next(model.parameters()).device
    n = shared_prefix_len(seqs) if len(seqs) > 1 and caching(model) else 0
    n = n if limit is None else max(0, min(n, limit))
    prefix, ids, attn, pos = _shared_rows(seqs, pad_id, n, device)
    return run_rows(model, prefix, ids, attn, pos, **kwargs), attn, pos


def _shared_rows(
    seqs: Sequence[Sequence[int]], pad_id: int, n: int, device: torch.device
) -> tuple[torch.Tensor | None, torch.Tensor, torch.Tensor, torch.Tensor]:
    """``seqs`` as the model takes them with their first ``n`` tokens shared: the
    prefix (1, n) (None where ``n`` is 0), the rest left-padded (B, W), the attention
    mask over prefix and rest (B, n + W), and the rest's positions after the prefix."""
    ids, attn, pos = left_pad([s[n:] for s in seqs], pad_id)
    prefix = None
    if n:
        prefix = to_device(torch.tensor([list(seqs[0][:n])]), device)
        attn = torch.cat([torch.ones((len(seqs), n), dtype=attn.dtype), attn], dim=-1)
    return prefix, to_device(ids, device), to_device(attn, device), to_device(pos + n, device)


def run_rows(
    model: PreTrainedModel,
    prefix: torch.Tensor | None,
    ids: torch.Tensor,
    attn: torch.Tensor,
    pos: torch.Tensor,
    **kwargs,
) -> Any:
    """The model on rows from ``_shared_rows``: the prefix once, its keys and values
    repeated for every row, then the rows."""
    cache = None
    if prefix is not None:
        # Only its cache is read: no logits (a large vocabulary makes them costly).
        cache = model(input_ids=prefix, use_cache=True, logits_to_keep=1).past_key_values
        cache.batch_repeat_interleave(ids.shape[0])
    return model(
        input_ids=ids, attention_mask=attn, position_ids=pos, past_key_values=cache, **kwargs
    )


def token_logps(
    model: PreTrainedModel,
    pairs: Sequence[tuple[Sequence[int], Sequence[int]]],
    *,
    temperature: float,
    pad_id: int = 0,
    top_k: int = 0,
    top_p: float = 1.0,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Log-prob and entropy of every response token after its prompt.

    Returns three (B, R) tensors, R the longest response, left-aligned: log-probs,
    entropies of the next-token distribution, and the response mask. The
    distribution is ``sampling_logps``'s: pass the ``top_k`` and ``top_p`` the text
    was sampled with to recompute exactly the log-probs ``sample_text`` recorded (the
    response's own tokens are never cut: ``sampling_logps``'s ``keep``). Pairs are
    grouped by shared prefix
    as in ``choice_sequence_logps``.
    """
    warp = {"temperature": temperature, "top_k": top_k, "top_p": top_p}
    groups = prefix_groups([tuple(p) + tuple(r) for p, r in pairs])
    if len(groups) == 1:
        return _token_group(model, pairs, pad_id=pad_id, **warp)
    width = max(len(r) for _, r in pairs)
    parts = [_token_group(model, [pairs[i] for i in g], pad_id=pad_id, **warp) for g in groups]
    rows = to_device(torch.tensor([i for g in groups for i in g]), parts[0][0].device)
    # Left-aligned, so a group's narrower rows pad on the right.
    return tuple(
        torch.cat([F.pad(p[j], (0, width - p[j].shape[1])) for p in parts])[torch.argsort(rows)]
        for j in range(3)
    )


def _token_group(
    model: PreTrainedModel,
    pairs: Sequence[tuple[Sequence[int], Sequence[int]]],
    *,
    temperature: float,
    pad_id: int,
    top_k: int,
    top_p: float,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``token_logps`` for pairs run as one batch with one shared prefix."""
    device = next(model.parameters()).device
    width = max(len(r) for _, r in pairs)
    # The shared prefix stops before each response's last prompt token, whose logits
    # score the response's first token.
    limit = min(len(p) - 1 for p, r in pairs if r) if width else None
    out, _, _ = forward_shared(
        model,
        [tuple(p) + tuple(r) for p, r in pairs],
        pad_id,
        limit=limit,
        logits_to_keep=width + 1,
        use_cache=False,  # no continuation reads it
    )
    # Right-aligned in the padded batch; realigned to the left for the loss.
    packed, lens = pack([r for _, r in pairs], pad_id, align="right", width=width)
    tgt = to_device(torch.from_numpy(packed), device)
    # Column j of the kept logits predicts the token at column j + 1.
    dist = sampling_logps(
        out.logits[:, :-1], temperature=temperature, top_k=top_k, top_p=top_p, keep=tgt
    )  # (B, R, V)
    mask = torch.from_numpy(np.arange(width)[None, :] >= (width - lens)[:, None]).float()
    mask = to_device(mask, device)
    # Filled, not multiplied: a cut token's -inf times 0 would be NaN.
    logp = dist.gather(-1, tgt[..., None]).squeeze(-1).masked_fill(mask == 0, 0.0)
    if top_k or top_p < 1.0:  # cut tokens: 0 * -inf would be NaN
        entropy = -(dist.exp() * dist.masked_fill(dist.isinf(), 0.0)).sum(-1) * mask
    else:
        entropy = -(dist.exp() * dist).sum(-1) * mask
    return _left_align(logp, mask), _left_align(entropy, mask), _left_align(mask, mask)


def _left_align(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Move each row's masked-in (right-aligned) units to the start of the row."""
    n = mask.sum(-1).long()  # (B,)
    width = x.shape[1]
    cols = torch.arange(width, device=x.device)[None, :]  # (1, R)
    src = (cols + (width - n)[:, None]).clamp(max=width - 1)
    keep = cols < n[:, None]
    return torch.where(keep, x.gather(1, src), 0.0)


def sequence_logps(
    model: PreTrainedModel,
    pairs: Sequence[tuple[Sequence[int], Sequence[int]]],
    *,
    temperature: float,
    top_k: int = 0,
    top_p: float = 1.0,
) -> torch.Tensor:
    """Total log-prob of each response given its prompt, shape (B,)."""
    logp, _, _ = token_logps(model, pairs, temperature=temperature, top_k=top_k, top_p=top_p)
    return logp.sum(-1)


def sampling_logps(
    logits: torch.Tensor,
    *,
    temperature: float,
    top_k: int = 0,
    top_p: float = 1.0,
    keep: torch.Tensor | None = None,
) -> torch.Tensor:
    """Log-probs of the distribution text is sampled from, over the last dimension.

    softmax(logits / T), cut to the ``top_k`` most likely tokens (0: all; ties with the
    k-th are kept), then to the most likely tokens until their mass reaches ``top_p``
    (a token is kept when the tokens more likely than it hold less than ``top_p``),
    renormalised; cut tokens get -inf. This is Hugging Face's order and rule, and both
    ``sample_text`` and ``token_logps`` call it, so the learner recomputes the very
    distribution each token was drawn from.

    ``keep`` (token ids, the logits' shape without its last dimension): tokens never
    cut. The learner passes the tokens that were drawn: a token drawn at the edge of
    the cut set can fall just outside it in a pass of other numerics (a batch of
    another shape, bfloat16 on a GPU), and would then score -inf and turn the loss into
    NaN. Where it stays inside, as in float32 here, nothing changes.
    """
    raw = logits.float() / temperature
    x = raw
    if top_k and top_k < x.shape[-1]:
        kth = x.topk(top_k, dim=-1).values[..., -1:]
        x = x.masked_fill(x < kth, -math.inf)
    if top_p < 1.0:
        ranked, order = x.sort(dim=-1, descending=True)
        probs = ranked.softmax(-1)
        ahead = probs.cumsum(-1) - probs  # mass of the tokens ranked before each
        x = x.scatter(-1, order, ranked.masked_fill(ahead >= top_p, -math.inf))
    if keep is not None and x is not raw:
        x = x.scatter(-1, keep[..., None], raw.gather(-1, keep[..., None]))
    return F.log_softmax(x, dim=-1)
