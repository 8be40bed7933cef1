"""Scoring and sampling kernels shared by rollout and learner.

Every function here takes token ids and a causal LM and returns log-probs; the
rollout calls them under ``no_grad`` and the learner with gradients, so the two
compute the same numbers. Sequences are left-padded with positions that skip the
padding, so a sequence scores the same whatever it is batched with.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import chain
from typing import Any, TypeVar

import numpy as np
import torch
import torch.nn.functional as F
from transformers import PreTrainedModel
from transformers.cache_utils import DynamicLayer

from coplay.models.devices import to_device
from coplay.policies.choice_inputs import (
    KEPT_ITEMS,
    ChoiceInputs,
    GroupInputs,
    Kept,
    canonical_order,
)

T = TypeVar("T")

CALL_TOKENS = 192
"""What one more model call costs, counted in the prompt tokens it could have run
instead: its fixed work (Python, kernel launches, a KV cache built and repeated).
Prefix sharing pays with calls (two per group: the prefix, then the rows) for the
tokens it saves, so ``prefix_plan`` weighs one against the other. Fitted with
``benchmarks/prefix_plan.py`` on the tiny model's batches of the tic-tac-toe, Kuhn,
Leduc and Goofspiel presets on a CPU (32 to 512 decisions, scoring alone and with the
backward pass): at 192 the plan picked was the fastest, or within 2% of it, in 34 of
40 batches and within 5% in the rest; at 1024 it missed 25 of them, by up to 1.6x.
A GPU runs more tokens in a call's fixed time: rerun the benchmark there to refit."""


def prefix_plan(
    seqs: Sequence[Sequence[int]],
    max_groups: int = 4,
    *,
    call_tokens: int | None = None,
    packed: Prompts | None = None,
) -> list[list[int]] | None:
    """How a batch runs: row indices in at most ``max_groups`` groups, each run with its
    shared prefix once (``forward_shared``); or None, one plain padded batch.

    Each plan is costed as the tokens its passes run (padding included: a group pads
    to its own longest row, and runs its shared prefix once) plus ``call_tokens``
    (default ``CALL_TOKENS``) per model call, and the cheapest wins. The plans are
    those of one cut: the rows sharing up to one of the smallest split points keep
    together. A negative cost makes every call a gain: the plan of the most calls wins.
    ``packed``: ``seqs`` already packed (``Prompts.of``), for a caller that reads them
    again.

    >>> prefix_plan([(1, 2, 5, 6), (1, 3, 5, 7), (1, 2, 5, 8)], 2, call_tokens=0)
    [[0, 2], [1]]
    >>> prefix_plan([(1, 2, 5, 6), (1, 3, 5, 7), (1, 2, 5, 8)]) is None
    True
    """
    cost = CALL_TOKENS if call_tokens is None else call_tokens
    b = len(seqs)
    if b < 2:
        return None
    packed = packed or Prompts.of(seqs)
    lens = packed.lens
    # A row keeps its last token to itself: past it, it is a group of its own (the
    # negative id no other row has, which the packing put past its end).
    tokens = packed.tokens.copy()
    ends = np.flatnonzero(lens)
    tokens[ends, lens[ends] - 1] = -1 - ends
    # Sorted, neighbouring rows share their prefix up to the first column where they
    # differ, and a group of rows sharing n tokens is a run of sorted rows whose
    # neighbours agree past n: every plan is read off one sort. Sharing up to the
    # g-th smallest split point gives at most g groups.
    order = np.lexsort(tokens.T[::-1])
    ranked = tokens[order]
    differ = ranked[1:] != ranked[:-1]  # (B - 1, W)
    split_at = np.where(differ.any(1), differ.argmax(1), tokens.shape[1])
    ranked_lens = lens[order]
    points = np.sort(split_at)[:max_groups]
    if b <= max_groups:  # every row alone: past the last split point
        points = np.append(points, points[-1] + 1)
    best, best_cost = None, b * int(lens.max()) + cost  # one plain pass
    for n in np.unique(points):
        cut = split_at < n  # (B - 1,) where a new group starts after the row
        starts = np.flatnonzero(np.concatenate([[True], cut]))
        sizes = np.diff(np.append(starts, b))
        # A group's shared prefix: the least split point between its own rows.
        inside = np.append(np.where(cut, tokens.shape[1], split_at), tokens.shape[1])
        shared = np.where(sizes > 1, np.minimum.reduceat(inside, starts), 0)
        widths = np.maximum.reduceat(ranked_lens, starts)
        run = int((shared + sizes * (widths - shared)).sum())
        calls = int(np.where(shared > 0, 2, 1).sum())
        if run + cost * calls < best_cost:
            best, best_cost = cut, run + cost * calls
    if best is None:
        return None
    labels = np.empty(b, dtype=np.int64)
    labels[order] = np.concatenate([[0], np.cumsum(best)])
    # Groups numbered in order of first appearance, rows in order within each.
    first = np.full(int(labels.max()) + 1, b)
    np.minimum.at(first, labels, np.arange(b))
    rank = np.empty(len(first), dtype=np.int64)
    rank[np.argsort(first)] = np.arange(len(first))
    labels = rank[labels]
    rows = np.argsort(labels, kind="stable")
    cuts = np.flatnonzero(np.diff(labels[rows])) + 1
    return [part.tolist() for part in np.split(rows, cuts)]


@dataclass(frozen=True)
class Prompts:
    """A batch of prompts packed once, for the plan and the groups to read: one flat
    copy of every token instead of one per reading (the plan, each group's shared
    prefix, its padded rows)."""

    tokens: np.ndarray
    """(B, W) int64: row i's tokens from the left, then its own negative id -1 - i."""
    lens: np.ndarray
    """(B,) each prompt's tokens."""

    @classmethod
    def of(cls, seqs: Sequence[Sequence[int]]) -> Prompts:
        own = -1 - np.arange(len(seqs))[:, None]
        tokens, lens = _packed(seqs, own, align="left")
        return cls(tokens, lens)

    def rows(self, index: Sequence[int]) -> Prompts:
        """The prompts of rows ``index``, in that order (still padded to the batch)."""
        index = np.asarray(index, dtype=np.int64)
        return Prompts(self.tokens[index], self.lens[index])

    def shared(self) -> int:
        """``shared_prefix_len`` of these prompts."""
        return _leading_agreement(self.tokens[:, : int(self.lens.min()) - 1])

    def right_padded(self, n: int, pad_id: int) -> tuple[np.ndarray, np.ndarray]:
        """Each prompt past its first ``n`` tokens, left-padded with ``pad_id`` to the
        longest (``left_pad``'s ids), and where the real tokens are."""
        rest = self.lens - n
        width = int(rest.max(initial=0))
        cols = np.arange(width)[None, :]
        start = (width - rest)[:, None]  # the column each row's tokens start at
        real = cols >= start
        src = np.clip(cols - start + n, 0, self.tokens.shape[1] - 1)
        return np.where(real, np.take_along_axis(self.tokens, src, axis=1), pad_id), real


def fold_common_prefix(
    prompt: tuple[int, ...], choices: tuple[tuple[int, ...], ...]
) -> tuple[tuple[int, ...], tuple[tuple[int, ...], ...]]:
    """Move the tokens every action starts with (such as `` [``) into the prompt.

    Tokens shared by all candidates add the same log-prob to each, so they cancel in
    the renormalised distribution: folding them changes no probability, and every
    decision still records the exact sequence (prompt + response) it was scored on.
    Each action keeps at least one token.

    >>> fold_common_prefix((1,), ((5, 6, 7), (5, 8, 7)))
    ((1, 5), ((6, 7), (8, 7)))
    """
    shortest = min(len(c) for c in choices)
    k = 0
    while k < shortest - 1 and len({c[k] for c in choices}) == 1:
        k += 1
    return prompt + choices[0][:k], tuple(c[k:] for c in choices)


def left_pad(
    seqs: Sequence[Sequence[int]], pad_id: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Left-padded ids, attention mask and position ids (positions count real tokens only).

    Left padding puts every sequence's end in the last column, so only the last
    few positions need logits; positions skip the padding so a sequence scores the
    same whatever it is batched with.
    """
    ids, lens = _packed(seqs, pad_id, align="right")
    width = ids.shape[1]
    attn = torch.from_numpy(np.arange(width)[None, :] >= (width - lens)[:, None]).long()
    pos = (attn.cumsum(-1) - 1).clamp(min=0)
    return torch.from_numpy(ids), attn, pos


def _packed(
    seqs: Sequence[Sequence[int]], fill: int | np.ndarray, *, align: str, width: int = 0
) -> tuple[np.ndarray, np.ndarray]:
    """``seqs`` as one (B, W) int64 array, each row's tokens at its left or right end
    (``align``), the rest ``fill`` (a value or a (B, 1) column); and the lengths.

    One flat copy of every token instead of one small array per row.
    >>> _packed([(5, 6), (7,)], 0, align="right")[0].tolist()
    [[5, 6], [0, 7]]
    """
    lens = np.fromiter(map(len, seqs), dtype=np.int64, count=len(seqs))
    width = max(width, int(lens.max(initial=0)))
    out = np.empty((len(seqs), width), dtype=np.int64)
    out[:] = fill
    total = int(lens.sum())
    if total:
        flat = np.fromiter(chain.from_iterable(seqs), dtype=np.int64, count=total)
        rows = np.repeat(np.arange(len(seqs)), lens)
        cols = np.arange(total) - np.repeat(np.cumsum(lens) - lens, lens)
        if align == "right":
            cols += np.repeat(width - lens, lens)
        out[rows, cols] = flat
    return out, lens


def shared_prefix_len(seqs: Sequence[Sequence[int]]) -> int:
    """Tokens every sequence starts with, leaving each at least one token of its own.

    >>> shared_prefix_len([(1, 5, 6, 7), (1, 5, 8)])
    2
    >>> shared_prefix_len([(1, 5), (1, 5)])
    1
    """
    shortest = min(len(s) for s in seqs)
    head, _ = _packed([s[: shortest - 1] for s in seqs], 0, align="left")
    return _leading_agreement(head)


def _leading_agreement(head: np.ndarray) -> int:
    """How many leading columns of ``head`` (B, W) hold one value in every row."""
    agree = (head == head[:1]).all(axis=0)  # column by column
    return int(agree.argmin()) if not agree.all() else head.shape[1]


def prefix_groups(
    seqs: Sequence[Sequence[int]], max_groups: int = 4, *, call_tokens: int | None = None
) -> list[list[int]]:
    """``prefix_plan``'s groups, all rows in one group where it runs plain: for callers
    that always share a prefix (``token_logps``).

    >>> prefix_groups([(1, 2, 5, 6), (1, 3, 5, 7), (1, 2, 5, 8)])
    [[0, 1, 2]]
    """
    plan = prefix_plan(seqs, max_groups, call_tokens=call_tokens)
    return [list(range(len(seqs)))] if plan is None else plan


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
    return _run_rows(model, prefix, ids, attn, pos, **kwargs), attn, pos


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


def _run_rows(
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
    packed, lens = _packed([r for _, r in pairs], pad_id, align="right", width=width)
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


def choice_sequence_logps(
    model: PreTrainedModel,
    items: Sequence[tuple[Sequence[int], Sequence[Sequence[int]]]],
    *,
    temperature: float,
    pad_id: int = 0,
) -> torch.Tensor:
    """Total log-prob of every candidate action after its prompt, flattened to (N,).

    Each prompt runs once; its KV cache is then shared by all of its candidates, so
    scoring k actions costs one prompt pass plus k short continuations instead of k
    full sequences. Equal to ``sequence_logps`` on the concatenated pairs up to float
    error. Prompts are grouped by shared prefix (``prefix_plan``) so the rules
    text every prompt opens with runs once per group, not once per row, where the
    tokens saved pay for the calls; otherwise the batch runs as one plain batch.
    A small batch's tensors are built once and kept (``coplay.policies.choice_inputs``).
    """
    share = caching(model)
    if not share and any(len(c) > 1 for _, cs in items for c in cs):
        # no cache to continue the prompts from: each candidate after its prompt, whole
        pairs = [(p, c) for p, cs in items for c in cs]
        return sequence_logps(model, pairs, temperature=temperature)
    device = next(model.parameters()).device
    # The plan's cost of a call is in the key: a batch is kept as that cost plans it.
    small = len(items) <= KEPT_ITEMS
    key = (tuple(items), pad_id, share, str(device), CALL_TOKENS) if small else None
    inputs = _KEPT.get(key, lambda: choice_inputs(items, pad_id, share=share, device=device))
    parts = [_choice_group(model, g, temperature) for g in inputs.groups]
    if inputs.where is None:
        return parts[0]
    merged = torch.cat(parts)
    return merged.new_zeros(inputs.size).index_copy(0, inputs.where, merged)


_KEPT = Kept()
"""Inputs of the small batches met lately (``choice_inputs``)."""


def choice_inputs(
    items: Sequence[tuple[Sequence[int], Sequence[Sequence[int]]]],
    pad_id: int,
    *,
    share: bool,
    device: torch.device,
) -> ChoiceInputs:
    """``items``' token tensors, grouped as ``prefix_plan`` runs them (one plain batch
    where it says so, or where ``share`` is off: no cache to share a prefix through)."""
    prompts = [p for p, _ in items]
    packed = Prompts.of(prompts)  # read by the plan and by every group
    groups = prefix_plan(prompts, packed=packed) if share else None
    if groups is None or len(groups) == 1:
        whole = _group_inputs(items, packed, pad_id, share=groups is not None, device=device)
        return ChoiceInputs((whole,), None, int(whole.owner.shape[0]))
    parts = tuple(
        _group_inputs([items[i] for i in g], packed.rows(g), pad_id, share=True, device=device)
        for g in groups
    )
    # Where each group's candidates go among all items' candidates: entry j of item i
    # is at starts[i] + j, the items taken in the groups' row order.
    sizes = [len(cs) for _, cs in items]
    starts = torch.tensor(np.cumsum(sizes) - sizes)
    order = [i for g in groups for i in g]
    runs, cols = _cells([sizes[i] for i in order])
    where = to_device(starts[order][runs] + cols, device)
    return ChoiceInputs(parts, where, sum(sizes))


def choice_table(
    model: PreTrainedModel,
    items: Sequence[tuple[Sequence[int], Sequence[Sequence[int]]]],
    *,
    temperature: float,
    pad_id: int,
) -> torch.Tensor:
    """(B, K) constrained log-probs, row i over item i's actions, -inf past its last.

    One padded log-softmax instead of one per item: the per-item ops (and their
    backward nodes) cost more than the model on small games. Items that repeat (the
    same prompt and actions: a small game's batch holds few distinct information
    states) run once and their row is read for each copy; gradients of the copies
    add up in the shared row, as they would in separate ones."""
    table, inverse = distinct_choice_table(model, items, temperature=temperature, pad_id=pad_id)
    return table if inverse is None else table[inverse]


def distinct_choice_table(
    model: PreTrainedModel,
    items: Sequence[tuple[Sequence[int], Sequence[Sequence[int]]]],
    *,
    temperature: float,
    pad_id: int,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """``choice_table`` of the distinct items only, and each item's row in it (None:
    every item is distinct, row i is item i). Whatever is computed per row (an
    entropy, a chosen action's entry) costs less on the distinct rows, read out per
    item after."""
    unique, inverse = distinct_items(items)
    # A small batch's rows in sorted order: the same states met in another order are
    # the same batch, whose tensors are kept (``choice_inputs``).
    order = canonical_order(unique)
    moved = order is not None and order != list(range(len(order)))
    if moved:
        unique = [unique[i] for i in order]
        rank = np.empty(len(order), dtype=np.int64)
        rank[order] = np.arange(len(order))
        inverse = rank[inverse]
    table = _distinct_table(model, unique, temperature=temperature, pad_id=pad_id)
    if len(unique) == len(items) and not moved:
        return table, None
    return table, to_device(torch.from_numpy(inverse), table.device)


def _distinct_table(
    model: PreTrainedModel,
    items: Sequence[tuple[Sequence[int], Sequence[Sequence[int]]]],
    *,
    temperature: float,
    pad_id: int,
) -> torch.Tensor:
    seq_lp = choice_sequence_logps(
        model, items, temperature=temperature, pad_id=pad_id
    )  # (N,) over all items' actions, flattened
    sizes = [len(cs) for _, cs in items]
    if min(sizes) == max(sizes):  # as many actions each (Kuhn's two): rows as they come
        return F.log_softmax(seq_lp.view(len(items), sizes[0]), dim=1)
    rows, cols = _table_cells(sizes)
    table = seq_lp.new_full((len(items), max(sizes)), -math.inf)
    table = table.index_put((to_device(rows, table.device), to_device(cols, table.device)), seq_lp)
    return F.log_softmax(table, dim=1)


def _table_cells(sizes: Sequence[int]) -> tuple[torch.Tensor, torch.Tensor]:
    """``_cells``, kept for a small table (``_small_cells``)."""
    return _small_cells(tuple(sizes)) if len(sizes) <= KEPT_ITEMS else _cells(sizes)


@functools.lru_cache(maxsize=1024)
def _small_cells(sizes: tuple[int, ...]) -> tuple[torch.Tensor, torch.Tensor]:
    """``_cells`` kept by the sizes of a small batch (a small game's tables have a
    few shapes, met at every call); read only, never written."""
    return _cells(sizes)


def _cells(sizes: Sequence[int]) -> tuple[torch.Tensor, torch.Tensor]:
    """(row, column) of every action of a choice table, items in turn: item i's
    ``sizes[i]`` actions fill row i from the left.

    >>> [t.tolist() for t in _cells([2, 1])]
    [[0, 0, 1], [0, 1, 0]]
    """
    counts = torch.tensor(sizes, dtype=torch.long)
    rows = torch.repeat_interleave(torch.arange(len(counts)), counts)
    starts = torch.repeat_interleave(counts.cumsum(0) - counts, counts)
    return rows, torch.arange(len(rows)) - starts


def distinct_items(items: Sequence[T]) -> tuple[list[T], np.ndarray]:
    """The distinct items in order of first appearance, and each item's index among them.

    >>> distinct_items([((1, 2), ((3,),)), ((4,), [[3]]), ((1, 2), ((3,),))])
    ([((1, 2), ((3,),)), ((4,), [[3]])], array([0, 1, 0]))
    """
    # Copies of one state usually hold the very same prompt and actions objects (the
    # policy's caches, a decision's fields): those are matched by identity first, in
    # C loops, and only one item per pair of objects is hashed by its ids.
    keys = [(id(prompt), id(cands)) for prompt, cands in items]
    index: dict = {}
    unique: list[T] = []
    at: dict[tuple[int, int], int] = {}
    for key, item in dict(zip(keys, items, strict=True)).items():
        try:
            i = index.setdefault(item, len(index))
        except TypeError:  # lists inside: the same ids as tuples
            prompt, cands = item
            i = index.setdefault((tuple(prompt), tuple(map(tuple, cands))), len(index))
        if i == len(unique):
            unique.append(item)
        at[key] = i
    return unique, np.fromiter(map(at.__getitem__, keys), dtype=np.int64, count=len(keys))


class ChoiceRows(Sequence):
    """Each item's row of a choice table of the distinct items (``distinct_choice_table``,
    read through ``inverse`` where given), cut to its own actions when first read.

    Most readers want every item's entries in one flat tensor (``flat``: the engine
    samples from it, the learner reads the chosen entries) or none at all (an update
    without a term over whole distributions): a tensor per item, cut and later
    concatenated again, is a tensor op per decision either way."""

    def __init__(
        self,
        table: torch.Tensor,
        inverse: torch.Tensor | np.ndarray | None,
        items: Sequence[tuple[Sequence[int], Sequence[Sequence[int]]]],
    ) -> None:
        self._table, self._items = table, items
        self._inverse = None if inverse is None else torch.as_tensor(inverse)
        self._rows: list[torch.Tensor] | None = None

    def sizes(self) -> list[int]:
        """How many actions each item has."""
        return [len(cs) for _, cs in self._items]

    def flat(self) -> torch.Tensor:
        """(N,) every item's entries in turn, N the items' actions in all: one gather
        from the distinct table."""
        device = self._table.device
        items, cols = (to_device(t, device) for t in _table_cells(self.sizes()))
        rows = items if self._inverse is None else to_device(self._inverse, device)[items]
        return self._table[rows, cols]

    def _cut(self) -> list[torch.Tensor]:
        if self._rows is None:
            self._rows = list(self.flat().split(self.sizes()))
        return self._rows

    def __getitem__(self, i):
        return self._cut()[i]

    def __len__(self) -> int:
        return len(self._items)


def _group_inputs(
    items: Sequence[tuple[Sequence[int], Sequence[Sequence[int]]]],
    prompts: Prompts,
    pad_id: int,
    *,
    share: bool,
    device: torch.device,
) -> GroupInputs:
    """One group's tensors: its prompts (``prompts``, packed) left-padded after their
    shared prefix (where ``share``), as ``_shared_rows`` pads them, and its candidates
    from the left."""
    n = prompts.shared() if share and len(items) > 1 else 0
    rest, real = prompts.right_padded(n, pad_id)
    attn = torch.from_numpy(real).long()
    pos = (attn.cumsum(-1) - 1).clamp(min=0) + n
    prefix = None
    if n:
        prefix = to_device(torch.from_numpy(prompts.tokens[:1, :n].copy()), device)
        attn = torch.cat([torch.ones((len(items), n), dtype=attn.dtype), attn], dim=-1)
    ids, attn, pos = (to_device(t, device) for t in (torch.from_numpy(rest), attn, pos))
    packed, lens = _packed([c for _, cs in items for c in cs], pad_id, align="left")
    sizes = np.fromiter((len(cs) for _, cs in items), dtype=np.int64, count=len(items))
    mask = np.arange(packed.shape[1])[None, :] < lens[:, None]
    return GroupInputs(
        prefix=prefix,
        ids=ids,
        attn=attn,
        pos=pos,
        owner=to_device(torch.from_numpy(np.repeat(np.arange(len(items)), sizes)), device),
        cands=to_device(torch.from_numpy(packed), device),
        cand_mask=to_device(torch.from_numpy(mask).long(), device),
    )


def _choice_group(model: PreTrainedModel, g: GroupInputs, temperature: float) -> torch.Tensor:
    """(N,) every candidate's total log-prob in one group: the shared prefix once
    (its cache repeated for every row), the rows, then the candidates' further tokens
    from the rows' cache."""
    out = _run_rows(
        model,
        g.prefix,
        g.ids,
        g.attn,
        g.pos,
        # Only a longer action continues from the prompts' keys and values; one-token
        # actions (Kuhn's, Leduc's) would build a cache per layer for nothing, and in
        # training its concatenations would be backward nodes too.
        use_cache=g.width > 1,
        logits_to_keep=1,
    )
    # One log-softmax per prompt, then each candidate's first token read from its
    # prompt's row: not one per candidate (K times the vocabulary-wide work, and its
    # backward, for a choice among K actions).
    first = F.log_softmax(out.logits[:, -1].float() / temperature, dim=-1)  # (B, V)
    total = first[g.owner, g.cands[:, 0]]  # (N,)
    if g.width > 1:
        cache = out.past_key_values
        cache.batch_select_indices(g.owner)  # one copy of the prompt's cache per candidate
        rest = model(
            input_ids=g.cands[:, :-1],
            attention_mask=torch.cat([g.attn[g.owner], g.cand_mask[:, :-1]], dim=-1),
            position_ids=g.pos[g.owner, -1:] + 1 + torch.arange(g.width - 1, device=g.cands.device),
            past_key_values=cache,
            use_cache=True,
        )
        # Column j of the continuation predicts candidate token j + 1.
        lp = F.log_softmax(rest.logits.float() / temperature, dim=-1)  # (N, W-1, V)
        tok = lp.gather(-1, g.cands[:, 1:, None]).squeeze(-1)  # (N, W-1)
        total = total + (tok * g.cand_mask[:, 1:]).sum(-1)
    return total


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


def check_sampling(*, temperature: float, top_k: int, top_p: float) -> None:
    """Refuse sampling parameters that define no distribution."""
    if temperature <= 0:
        raise ValueError(f"temperature must be > 0, got {temperature}")
    if top_k < 0:
        raise ValueError(f"top_k must be >= 0 (0 keeps every token), got {top_k}")
    if not 0.0 < top_p <= 1.0:
        raise ValueError(f"top_p must be in (0, 1], got {top_p}")


def draw(logp: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """One token per row of ``logp`` (B, V), by inverting its CDF at ``u`` (B,) in [0, 1).

    Exact for the distribution exp(logp) (up to float rounding of the CDF) and
    needs one uniform per row, where the exponential race behind ``multinomial``
    needs one per vocabulary entry. Zero-probability tokens are never drawn: the
    first token whose CDF exceeds ``u`` has mass, and rounding at the top end falls
    back to the last token with mass.
    """
    cdf = logp.exp().cumsum(-1)
    total = cdf[:, -1:].contiguous()
    idx = torch.searchsorted(cdf, u[:, None].to(cdf.dtype) * total, right=True)
    return torch.minimum(idx, torch.searchsorted(cdf, total)).squeeze(-1)


class _SlabLayer(DynamicLayer):
    """A layer's keys and values in buffers allocated once for the whole answer.

    ``update`` writes the new step into the next free column and returns views of
    the filled part, so attention reads exactly the tokens a grown cache would hold,
    without the copy of the whole cache that concatenation makes every step.
    """

    def __init__(self, keys: torch.Tensor, values: torch.Tensor, room: int) -> None:
        super().__init__()
        b, h, n, _ = keys.shape
        self.kbuf = keys.new_empty((b, h, n + room, keys.shape[-1]))
        self.vbuf = values.new_empty((b, h, n + room, values.shape[-1]))
        self.kbuf[:, :, :n] = keys
        self.vbuf[:, :, :n] = values
        self.dtype, self.device, self.n = keys.dtype, keys.device, n
        self.is_initialized = True
        self._views()

    def _views(self) -> None:
        self.keys, self.values = self.kbuf[:, :, : self.n], self.vbuf[:, :, : self.n]

    def update(self, key_states, value_states, *args, **kwargs):
        q = key_states.shape[-2]
        self.kbuf[:, :, self.n : self.n + q] = key_states
        self.vbuf[:, :, self.n : self.n + q] = value_states
        self.n += q
        self._views()
        return self.keys, self.values

    def batch_select_indices(self, indices: torch.Tensor) -> None:
        self.kbuf, self.vbuf = self.kbuf[indices], self.vbuf[indices]
        self._views()


# Attention kernels that take a ready-made additive 4-D mask as it is.
_ADDITIVE_MASK_KERNELS = ("sdpa", "eager")


class _Decoder:
    """One-token steps of a batch after its prompt pass, with a preallocated cache.

    The prompt's cache moves into buffers with room for ``room`` more tokens, and
    the attention mask is allocated at its final width; ``select`` drops rows. With
    full attention and the sdpa or eager kernels, the mask is passed ready-made as
    an additive (B, 1, 1, K) float mask: the model then builds none per step, and
    the kernels run faster on it than on the boolean mask they would be given. Other
    layer kinds (a sliding window) and kernels keep their own cache and 2-D mask.
    """

    def __init__(
        self, model: PreTrainedModel, cache, attn: torch.Tensor, pos: torch.Tensor, room: int
    ) -> None:
        full = all(type(layer) is DynamicLayer for layer in cache.layers)
        if full:
            cache.layers = [_SlabLayer(la.keys, la.values, room) for la in cache.layers]
        self.cache, self.width = cache, attn.shape[1]
        mask = torch.cat([attn, attn.new_ones((attn.shape[0], room))], dim=-1)
        if full and model.config._attn_implementation in _ADDITIVE_MASK_KERNELS:
            dtype = cache.layers[0].keys.dtype
            mask = torch.zeros(mask.shape, dtype=dtype, device=mask.device).masked_fill_(
                mask == 0, torch.finfo(dtype).min
            )[:, None, None, :]
        self.attn = mask
        self.next_pos = pos[:, -1:] + 1

    def step(self, model: PreTrainedModel, tokens: torch.Tensor) -> torch.Tensor:
        """Feed ``tokens`` (B,), one per row; the next-token logits (B, V)."""
        self.width += 1
        out = model(
            input_ids=tokens[:, None],
            attention_mask=self.attn[..., : self.width],
            position_ids=self.next_pos,
            past_key_values=self.cache,
            use_cache=True,
            logits_to_keep=1,
        )
        self.next_pos = self.next_pos + 1
        return out.logits[:, -1]

    def select(self, keep: torch.Tensor) -> None:
        self.cache.batch_select_indices(keep)
        self.attn, self.next_pos = self.attn[keep], self.next_pos[keep]


def _stop_table(
    stop: Sequence[Sequence[int]], eos_id: int | None, device: torch.device
) -> list[torch.Tensor]:
    """EOS and the stop sequences as (S, m) id tensors, one per length m."""
    by_len: dict[int, list[tuple[int, ...]]] = {}
    for s in [*([(eos_id,)] if eos_id is not None else []), *(tuple(s) for s in stop)]:
        if not s:
            raise ValueError("a stop sequence must hold at least one token id")
        by_len.setdefault(len(s), []).append(s)
    return [to_device(torch.tensor(v, dtype=torch.long), device) for _, v in sorted(by_len.items())]


# Rows that ended stay in the batch (their steps ignored) until this share of it has:
# dropping copies every layer's cache, so it is batched rather than done row by row.
_DROP_SHARE = 8


class _Answers:
    """The answers being written: for each batch row (``rows``: the prompt it answers)
    its tokens, their log-probs and where it ended; rows that ended are moved out
    when ``drop`` takes them from the batch."""

    def __init__(self, b: int, n: int, device: torch.device) -> None:
        self.rows = torch.arange(b, device=device)
        self.tokens = torch.zeros((b, n), dtype=torch.long, device=device)
        self.logps = torch.zeros((b, n), device=device)
        self.ends = torch.full((b,), n, dtype=torch.long, device=device)
        self.live = torch.ones(b, dtype=torch.bool, device=device)
        self.alive = b
        self.done = (self.tokens.clone(), self.logps.clone(), self.ends.clone())

    def record(self, t: int, nxt: torch.Tensor, logp: torch.Tensor, stops: list) -> int:
        """Step ``t``'s tokens and their log-probs; how many rows are still writing."""
        self.tokens[:, t] = nxt
        self.logps[:, t] = logp.gather(-1, nxt[:, None]).squeeze(-1)
        ended = self.live & _ends(self.tokens, t, stops)
        self.ends = torch.where(ended, t + 1, self.ends)
        self.live &= ~ended
        self.alive = int(self.live.sum())  # the one host sync of a step
        return self.alive

    def drop(self) -> torch.Tensor | None:
        """Move ended rows out once they are ``1/_DROP_SHARE`` of the batch; the
        batch rows kept, or None when none were dropped."""
        if len(self.rows) - self.alive < max(1, len(self.rows) // _DROP_SHARE):
            return None
        self._move_out(~self.live)
        keep = self.live.nonzero().squeeze(-1)
        self.rows, self.tokens, self.logps = self.rows[keep], self.tokens[keep], self.logps[keep]
        self.ends, self.live = self.ends[keep], self.live[keep]
        return keep

    def _move_out(self, which: torch.Tensor) -> None:
        rows = self.rows[which]
        for out, mine in zip(self.done, (self.tokens, self.logps, self.ends), strict=True):
            out[rows] = mine[which]

    def result(self) -> list[tuple[tuple[int, ...], tuple[float, ...]]]:
        self._move_out(torch.ones_like(self.live))
        ids, lps, lens = (x.tolist() for x in self.done)
        return [(tuple(i[:n]), tuple(lp[:n])) for i, lp, n in zip(ids, lps, lens, strict=True)]


def _ends(tokens: torch.Tensor, t: int, table: list[torch.Tensor]) -> torch.Tensor:
    """Rows whose tokens[:, : t + 1] end with a stop sequence, (B,) bool."""
    hit = torch.zeros(tokens.shape[0], dtype=torch.bool, device=tokens.device)
    for seqs in table:
        m = seqs.shape[1]
        if m <= t + 1:
            tail = tokens[:, t + 1 - m : t + 1]  # (B, m)
            hit |= (tail[:, None, :] == seqs[None]).all(-1).any(-1)
    return hit


@torch.no_grad()
def _uniforms(
    steps: int, rows: int, generator: torch.Generator, row_seeds: Sequence[int] | None
) -> torch.Tensor:
    """(steps, rows) uniforms: from ``generator`` at once, or column i from its own
    generator seeded with ``row_seeds[i]``."""
    if row_seeds is None:
        return torch.rand((steps, rows), generator=generator)
    if len(row_seeds) != rows:
        raise ValueError(f"got {rows} prompts but {len(row_seeds)} row seeds")
    own = [torch.rand(steps, generator=torch.Generator().manual_seed(s)) for s in row_seeds]
    return torch.stack(own, dim=1)


@torch.no_grad()  # sampling is never differentiated: no graph through the cache
def sample_text(
    model: PreTrainedModel,
    prompts: Sequence[Sequence[int]],
    *,
    max_new_tokens: int,
    temperature: float,
    eos_id: int | None,
    pad_id: int,
    generator: torch.Generator,
    top_p: float = 1.0,
    top_k: int = 0,
    stop: Sequence[Sequence[int]] = (),
    row_seeds: Sequence[int] | None = None,
) -> list[tuple[tuple[int, ...], tuple[float, ...]]]:
    """Ancestral sampling from ``sampling_logps`` (temperature, top-k, top-p), with the
    log-prob of every token under the distribution it was drawn from.

    An answer ends after EOS, after any of the ``stop`` id sequences (included in the
    answer), or at ``max_new_tokens``. A small explicit loop rather than
    ``generate``: it records the exact sampling log-probs and uses the padding-free
    positions of ``token_logps``, so the learner's recomputation (with the same
    parameters) matches. The prompt pass shares the batch's common prefix; the cache
    is preallocated (``_Decoder``); finished rows leave the batch (``_Answers``). One
    uniform per row and step is drawn up front from ``generator`` and indexed by
    row, so a row's draws do not depend on which other rows have finished; with
    ``row_seeds`` row i's uniforms come from its own seed instead, so they do not depend
    on which other prompts share the call either.
    """
    check_sampling(temperature=temperature, top_k=top_k, top_p=top_p)
    b = len(prompts)
    if b == 0 or max_new_tokens <= 0:
        return [((), ())] * b
    device = next(model.parameters()).device
    uniforms = to_device(_uniforms(max_new_tokens, b, generator, row_seeds), device)
    stops = _stop_table(stop, eos_id, device)
    out, attn, pos = forward_shared(model, prompts, pad_id, use_cache=True, logits_to_keep=1)
    dec = _Decoder(model, out.past_key_values, attn, pos, room=max_new_tokens - 1)
    answers, logits = _Answers(b, max_new_tokens, device), out.logits[:, -1]
    for t in range(max_new_tokens):
        logp = sampling_logps(logits, temperature=temperature, top_k=top_k, top_p=top_p)
        nxt = draw(logp, uniforms[t, answers.rows])
        if answers.record(t, nxt, logp, stops) == 0 or t + 1 == max_new_tokens:
            break
        keep = answers.drop()
        if keep is not None:
            dec.select(keep)
            nxt = nxt[keep]
        logits = dec.step(model, nxt)
    return answers.result()
