"""Choices scored: every legal action's log-prob after its prompt, and per-item tables.

``choice_sequence_logps`` runs each prompt once and continues its KV cache for the
candidate actions; ``choice_table`` renormalises each item's scores over its own
actions, each distinct item run once (``distinct_items``); ``ChoiceRows`` reads each
item's row back. A batch's token tensors are built by ``choice_inputs`` and, for a
small batch, kept (``coplay.policies.choice_inputs``).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from typing import TypeVar

import numpy as np
import torch
import torch.nn.functional as F
from transformers import PreTrainedModel

from coplay.models.devices import to_device
from coplay.policies import prefixes
from coplay.policies.choice_inputs import (
    KEPT_ITEMS,
    ChoiceInputs,
    GroupInputs,
    Kept,
    canonical_order,
)
from coplay.policies.prefixes import Prompts, pack, prefix_plan
from coplay.policies.scoring import caching, run_rows, sequence_logps

T = TypeVar("T")


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
    if not items:
        return torch.zeros(0, device=next(model.parameters()).device)
    share = caching(model)
    if not share and any(len(c) > 1 for _, cs in items for c in cs):
        # no cache to continue the prompts from: each candidate after its prompt, whole
        check_items(items)
        pairs = [(p, c) for p, cs in items for c in cs]
        return sequence_logps(model, pairs, temperature=temperature)
    device = next(model.parameters()).device
    # The plan's cost of a call is in the key: a batch is kept as that cost plans it.
    # Read from its module at each call, as ``prefix_plan`` reads it.
    small = len(items) <= KEPT_ITEMS
    key = (tuple(items), pad_id, share, str(device), prefixes.CALL_TOKENS) if small else None
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
    check_items(items)
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


def check_items(items: Sequence[tuple[Sequence[int], Sequence[Sequence[int]]]]) -> None:
    """Refuse, in one line, an item that defines no choice: no prompt token for its
    first action token to follow, no action, or an action of no tokens (as a whole
    sequence it would score log-prob 0, above every real action, and in the cached
    pass its first token would be read from the padding)."""
    for prompt, cands in items:
        if not prompt:
            raise ValueError("a choice item's prompt has no tokens for its actions to follow")
        if not cands:
            raise ValueError("a choice item lists no actions to choose from")
        if not all(cands):
            raise ValueError(
                f"a choice item lists an action of no tokens among {len(cands)}; "
                "every action needs one token at least"
            )


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
    if not sizes:
        return seq_lp.new_zeros((0, 0))
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
    packed, lens = pack([c for _, cs in items for c in cs], pad_id, align="left")
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
    out = run_rows(
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
