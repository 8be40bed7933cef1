"""Scoring and sampling kernels shared by rollout and learner.

Every function here takes token ids and a causal LM and returns log-probs; the
rollout calls them under ``no_grad`` and the learner with gradients, so the two
compute the same numbers. Sequences are left-padded with positions that skip the
padding, so a sequence scores the same whatever it is batched with.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from itertools import chain

import numpy as np
import torch
import torch.nn.functional as F
from transformers import PreTrainedModel


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
    agree = (head == head[:1]).all(axis=0)  # (shortest - 1,) column by column
    return int(agree.argmin()) if not agree.all() else head.shape[1]


def prefix_groups(seqs: Sequence[Sequence[int]], max_groups: int = 4) -> list[list[int]]:
    """Row indices split into at most ``max_groups`` groups that share long prefixes.

    The prefix is extended one token at a time while the rows still fall into at
    most ``max_groups`` distinct prefixes: prompts that differ early (the seat's mark)
    and then agree again (the rules text) form one group per early variant, each of
    which ``forward_shared`` then runs once. Groups and their rows come in order of
    first appearance.

    >>> prefix_groups([(1, 2, 5, 6), (1, 3, 5, 7), (1, 2, 5, 8)], max_groups=2)
    [[0, 2], [1]]
    """
    b = len(seqs)
    # A row keeps its last token to itself: past it, it is a group of its own
    # (a negative id no other row has).
    own = -1 - np.arange(b)[:, None]
    tokens, _ = _packed([s[:-1] for s in seqs], own, align="left", width=1)
    labels = np.zeros(b, dtype=np.int64)
    span = int(max(tokens.max(), 0)) + b + 1  # room for every token id and every own id
    for k in range(max(len(s) for s in seqs)):
        column = tokens[:, k] if k < tokens.shape[1] else own[:, 0]
        step, count = _first_seen(labels * span + column + b)
        if count > max_groups:
            break
        labels = step
    order = np.argsort(labels, kind="stable")
    cuts = np.flatnonzero(np.diff(labels[order])) + 1
    return [part.tolist() for part in np.split(order, cuts)]


def _first_seen(keys: np.ndarray) -> tuple[np.ndarray, int]:
    """Each key's rank in order of first appearance, and the number of distinct keys.

    >>> _first_seen(np.array([7, 3, 7, 9]))[0].tolist()
    [0, 1, 0, 2]
    """
    uniq, first, inverse = np.unique(keys, return_index=True, return_inverse=True)
    rank = np.empty(len(uniq), dtype=np.int64)
    rank[np.argsort(first)] = np.arange(len(uniq))
    return rank[inverse.reshape(-1)], len(uniq)


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
    n = shared_prefix_len(seqs) if len(seqs) > 1 else 0
    n = n if limit is None else max(0, min(n, limit))
    ids, attn, pos = left_pad([s[n:] for s in seqs], pad_id)
    ids, attn, pos = ids.to(device), attn.to(device), pos.to(device)
    if n == 0:
        out = model(input_ids=ids, attention_mask=attn, position_ids=pos, **kwargs)
        return out, attn, pos
    # Only its cache is read: no logits (a large vocabulary makes them costly).
    prefix_ids = torch.tensor([list(seqs[0][:n])], device=device)
    prefix = model(input_ids=prefix_ids, use_cache=True, logits_to_keep=1)
    cache = prefix.past_key_values
    cache.batch_repeat_interleave(len(seqs))
    attn = torch.cat([torch.ones((len(seqs), n), dtype=attn.dtype, device=device), attn], dim=-1)
    out = model(
        input_ids=ids, attention_mask=attn, position_ids=pos + n, past_key_values=cache, **kwargs
    )
    return out, attn, pos + n


def token_logps(
    model: PreTrainedModel,
    pairs: Sequence[tuple[Sequence[int], Sequence[int]]],
    *,
    temperature: float,
    pad_id: int = 0,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Log-prob and entropy of every response token after its prompt.

    Returns three (B, R) tensors, R the longest response, left-aligned: log-probs,
    entropies of the full next-token distribution, and the response mask. Pairs
    are grouped by shared prefix as in ``choice_sequence_logps``.
    """
    groups = prefix_groups([tuple(p) + tuple(r) for p, r in pairs])
    if len(groups) == 1:
        return _token_group(model, pairs, temperature=temperature, pad_id=pad_id)
    width = max(len(r) for _, r in pairs)
    parts = [
        _token_group(model, [pairs[i] for i in g], temperature=temperature, pad_id=pad_id)
        for g in groups
    ]
    rows = torch.tensor([i for g in groups for i in g], device=parts[0][0].device)
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
    )
    # Column j of the kept logits predicts the token at column j + 1.
    logits = out.logits[:, :-1].float() / temperature  # (B, R, V)
    dist = F.log_softmax(logits, dim=-1)
    # Right-aligned in the padded batch; realigned to the left for the loss.
    packed, lens = _packed([r for _, r in pairs], pad_id, align="right", width=width)
    tgt = torch.from_numpy(packed).to(device)
    mask = torch.from_numpy(np.arange(width)[None, :] >= (width - lens)[:, None]).float()
    mask = mask.to(device)
    logp = dist.gather(-1, tgt[..., None]).squeeze(-1) * mask
    entropy = -(dist.exp() * dist).sum(-1) * mask
    return _left_align(logp, mask), _left_align(entropy, mask), _left_align(mask, mask)


def _left_align(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Move each row's masked-in (right-aligned) units to the start of the row."""
    n = mask.sum(-1).long()  # (B,)
    width = x.shape[1]
    cols = torch.arange(width, device=x.device)[None, :]  # (1, R)
    src = (cols + (width - n)[:, None]).clamp(max=width - 1)
    keep = cols < n[:, None]
    return x.gather(1, src) * keep


def sequence_logps(
    model: PreTrainedModel,
    pairs: Sequence[tuple[Sequence[int], Sequence[int]]],
    *,
    temperature: float,
) -> torch.Tensor:
    """Total log-prob of each response given its prompt, shape (B,)."""
    logp, _, _ = token_logps(model, pairs, temperature=temperature)
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
    error. Prompts are grouped by shared prefix (``prefix_groups``) so the rules
    text every prompt opens with runs once per group, not once per row.
    """
    groups = prefix_groups([p for p, _ in items])
    if len(groups) == 1:
        return _choice_group(model, items, temperature=temperature, pad_id=pad_id)
    starts = np.cumsum([0] + [len(cs) for _, cs in items])
    parts = [
        _choice_group(model, [items[i] for i in g], temperature=temperature, pad_id=pad_id)
        for g in groups
    ]
    where = torch.tensor(
        np.concatenate([np.arange(starts[i], starts[i + 1]) for g in groups for i in g]),
        device=parts[0].device,
    )
    merged = torch.cat(parts)
    return merged.new_zeros(int(starts[-1])).index_copy(0, where, merged)


def choice_table(
    model: PreTrainedModel,
    items: Sequence[tuple[Sequence[int], Sequence[Sequence[int]]]],
    *,
    temperature: float,
    pad_id: int,
) -> torch.Tensor:
    """(B, K) constrained log-probs, row i over item i's actions, -inf past its last.

    One padded log-softmax instead of one per item: the per-item ops (and their
    backward nodes) cost more than the model on small games."""
    seq_lp = choice_sequence_logps(
        model, items, temperature=temperature, pad_id=pad_id
    )  # (N,) over all items' actions, flattened
    sizes = torch.tensor([len(cs) for _, cs in items])
    rows = torch.repeat_interleave(torch.arange(len(items)), sizes)
    cols = torch.arange(len(rows)) - torch.repeat_interleave(sizes.cumsum(0) - sizes, sizes)
    table = seq_lp.new_full((len(items), int(sizes.max())), -math.inf)
    table = table.index_put((rows.to(table.device), cols.to(table.device)), seq_lp)
    return F.log_softmax(table, dim=1)


def table_rows(
    table: torch.Tensor, items: Sequence[tuple[Sequence[int], Sequence[Sequence[int]]]]
) -> list[torch.Tensor]:
    """Each item's row of a padded choice table, cut to its own actions."""
    sizes = [len(cs) for _, cs in items]
    keep = torch.arange(table.shape[1]) < torch.tensor(sizes)[:, None]  # (B, K)
    return list(table[keep.to(table.device)].split(sizes))


def _choice_group(
    model: PreTrainedModel,
    items: Sequence[tuple[Sequence[int], Sequence[Sequence[int]]]],
    *,
    temperature: float,
    pad_id: int,
) -> torch.Tensor:
    """``choice_sequence_logps`` for prompts run as one batch with one shared prefix."""
    device = next(model.parameters()).device
    out, attn, pos = forward_shared(
        model, [p for p, _ in items], pad_id, use_cache=True, logits_to_keep=1
    )
    sizes = np.fromiter((len(cs) for _, cs in items), dtype=np.int64, count=len(items))
    owner = torch.from_numpy(np.repeat(np.arange(len(items)), sizes)).to(device)
    packed, lens = _packed([c for _, cs in items for c in cs], pad_id, align="left")
    width = packed.shape[1]
    cand_ids = torch.from_numpy(packed).to(device)  # (N, W), each action from the left
    cand_mask = torch.from_numpy(np.arange(width)[None, :] < lens[:, None]).long().to(device)
    first = F.log_softmax(out.logits[owner, -1].float() / temperature, dim=-1)  # (N, V)
    total = first.gather(-1, cand_ids[:, :1]).squeeze(-1)  # (N,)
    if width > 1:
        cache = out.past_key_values
        cache.batch_select_indices(owner)  # one copy of the prompt's cache per candidate
        rest = model(
            input_ids=cand_ids[:, :-1],
            attention_mask=torch.cat([attn[owner], cand_mask[:, :-1]], dim=-1),
            position_ids=pos[owner, -1:] + 1 + torch.arange(width - 1, device=device),
            past_key_values=cache,
            use_cache=True,
        )
        # Column j of the continuation predicts candidate token j + 1.
        lp = F.log_softmax(rest.logits.float() / temperature, dim=-1)  # (N, W-1, V)
        tok = lp.gather(-1, cand_ids[:, 1:, None]).squeeze(-1)  # (N, W-1)
        total = total + (tok * cand_mask[:, 1:]).sum(-1)
    return total


def sample_text(
    model: PreTrainedModel,
    prompts: Sequence[Sequence[int]],
    *,
    max_new_tokens: int,
    temperature: float,
    eos_id: int,
    pad_id: int,
    generator: torch.Generator,
) -> list[tuple[tuple[int, ...], tuple[float, ...]]]:
    """Ancestral sampling from the full softmax(logits / T), with its per-token log-probs.

    A small explicit loop with a KV cache rather than ``generate``: it records the
    exact sampling log-probs and uses the same padding-free positions as
    ``token_logps`` so the learner's recomputation matches.
    """
    device = next(model.parameters()).device
    b = len(prompts)
    out, attn, pos = forward_shared(model, prompts, pad_id, use_cache=True, logits_to_keep=1)
    past, logits = out.past_key_values, out.logits[:, -1]
    next_pos = pos[:, -1:] + 1
    tokens: list[list[int]] = [[] for _ in range(b)]
    lps: list[list[float]] = [[] for _ in range(b)]
    done = torch.zeros(b, dtype=torch.bool)
    for _ in range(max_new_tokens):
        logp = F.log_softmax(logits.float() / temperature, dim=-1)  # (B, V)
        nxt = torch.multinomial(logp.exp().cpu(), 1, generator=generator).squeeze(-1)
        for i in range(b):
            if not done[i]:
                tokens[i].append(int(nxt[i]))
                lps[i].append(float(logp[i, nxt[i]]))
                done[i] = int(nxt[i]) == eos_id
        if bool(done.all()):
            break
        attn = torch.cat([attn, torch.ones((b, 1), dtype=torch.long, device=device)], dim=-1)
        out = model(
            input_ids=nxt[:, None].to(device),
            attention_mask=attn,
            position_ids=next_pos,
            past_key_values=past,
            use_cache=True,
            logits_to_keep=1,
        )
        past, logits, next_pos = out.past_key_values, out.logits[:, -1], next_pos + 1
    return [(tuple(t), tuple(lp)) for t, lp in zip(tokens, lps, strict=True)]
