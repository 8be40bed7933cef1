"""The token tensors a batch of choice items runs on, kept for batches that come back.

Scoring a batch of choices (``coplay.policies.choices.choice_sequence_logps``) first
plans it (``prefix_plan``) and packs its prompts and candidate actions into padded
tensors; only then does the model run. The tensors depend on the token ids alone, not
on the weights. A small game's batches hold the same few distinct states again and
again (Kuhn poker has twelve information states: every minibatch of an update and the
KL reference's pass score the same twelve), so a batch of at most ``KEPT_ITEMS``
distinct items is planned and packed once and its tensors kept (``Kept``), by the
items themselves, in a canonical order (``canonical_order``) so that the order in
which a batch meets its states does not matter. Large batches (tic-tac-toe's boards)
rarely repeat and are built every time: hashing them would cost more than it saves.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass

import torch

KEPT_ITEMS = 32
"""Most distinct items a batch may hold for its tensors to be kept."""
KEPT_BATCHES = 64
"""Batches whose tensors are kept at once, least recently used dropped first."""


@dataclass(frozen=True)
class GroupInputs:
    """One prefix group of a batch of choice items, as the model takes it.

    B prompts (rows), N candidate actions in all, C the longest action's tokens."""

    prefix: torch.Tensor | None  # (1, n) ids every row shares, run once; None: no sharing
    ids: torch.Tensor  # (B, W) the rest of each prompt, left-padded
    attn: torch.Tensor  # (B, n + W) attention mask over prefix and rest
    pos: torch.Tensor  # (B, W) positions, counting real tokens only
    owner: torch.Tensor  # (N,) the row of each candidate
    cands: torch.Tensor  # (N, C) each candidate's ids from the left, padded
    cand_mask: torch.Tensor  # (N, C) 1 on a candidate's own tokens

    @property
    def width(self) -> int:
        """The longest candidate's tokens: above 1, candidates continue from the cache."""
        return self.cands.shape[1]


@dataclass(frozen=True)
class ChoiceInputs:
    """A whole batch: its groups in run order, and where their candidates go."""

    groups: tuple[GroupInputs, ...]
    where: torch.Tensor | None
    """(N,) the place of each candidate, groups in run order, among all items'
    candidates in item order; None where one group holds every item in order."""
    size: int
    """N: the candidates of every item."""


def canonical_order(items: Sequence[tuple]) -> list[int] | None:
    """Item indices in sorted order (items compare by their token ids), or None where
    the batch is too large to keep (``KEPT_ITEMS``) or its items do not compare (ids
    in lists and tuples at once).

    >>> canonical_order([((5, 1), ((2,),)), ((3,), ((2,),))])
    [1, 0]
    """
    if len(items) > KEPT_ITEMS:
        return None
    try:
        return sorted(range(len(items)), key=items.__getitem__)
    except TypeError:
        return None


class Kept:
    """Built inputs by key, the ``KEPT_BATCHES`` most recently used."""

    def __init__(self, capacity: int = KEPT_BATCHES) -> None:
        self.capacity = capacity
        self._inputs: OrderedDict[Hashable, ChoiceInputs] = OrderedDict()
        # One store serves the process: the play server answers requests in threads,
        # and a lookup, insertion and eviction must not interleave with another's.
        self._lock = threading.Lock()

    def get(self, key: Hashable | None, build: Callable[[], ChoiceInputs]) -> ChoiceInputs:
        """The inputs kept under ``key``, built (and kept) on first use; built every
        time where ``key`` is None or holds lists (ids given as lists: no key)."""
        if key is None:
            return build()
        try:
            with self._lock:
                inputs = self._inputs.get(key)
                if inputs is not None:
                    self._inputs.move_to_end(key)
        except TypeError:
            return build()
        if inputs is None:
            inputs = build()  # outside the lock: two threads may build one batch twice
            with self._lock:
                self._inputs[key] = inputs
                if len(self._inputs) > self.capacity:
                    self._inputs.popitem(last=False)
        return inputs

    def __len__(self) -> int:
        return len(self._inputs)

    def clear(self) -> None:
        with self._lock:
            self._inputs.clear()
