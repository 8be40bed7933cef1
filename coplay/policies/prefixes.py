"""Prompts' shared prefixes: how a batch runs, and its token ids packed into arrays.

Game prompts open with the same rules text. ``prefix_plan`` decides whether a batch
runs as one plain padded batch or as groups whose common prefix runs once
(``coplay.policies.scoring.forward_shared``); ``Prompts`` packs a batch's ids once for
the plan and every group to read; ``left_pad`` and ``pack`` lay ids out as the model
takes them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from itertools import chain

import numpy as np
import torch

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
        tokens, lens = pack(seqs, own, align="left")
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
    ids, lens = pack(seqs, pad_id, align="right")
    width = ids.shape[1]
    attn = torch.from_numpy(np.arange(width)[None, :] >= (width - lens)[:, None]).long()
    pos = (attn.cumsum(-1) - 1).clamp(min=0)
    return torch.from_numpy(ids), attn, pos


def pack(
    seqs: Sequence[Sequence[int]], fill: int | np.ndarray, *, align: str, width: int = 0
) -> tuple[np.ndarray, np.ndarray]:
    """``seqs`` as one (B, W) int64 array, each row's tokens at its left or right end
    (``align``), the rest ``fill`` (a value or a (B, 1) column); and the lengths.

    One flat copy of every token instead of one small array per row.
    >>> pack([(5, 6), (7,)], 0, align="right")[0].tolist()
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
    head, _ = pack([s[: shortest - 1] for s in seqs], 0, align="left")
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
