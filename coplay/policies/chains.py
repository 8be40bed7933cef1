"""Whole conversations scored as one sequence each (chat context's training sequences).

In chat context a player's turn t+1 prompt begins with turn t's prompt and answer,
token for token (``coplay.policies.chat``). So the decisions of one conversation are
prefixes of its last one: one forward pass over the last decision's prompt + answer
gives the logits of every answer in it, and the loss reads only the player's own
sampled tokens (the answers), never the prompts. Where the chain breaks (an earlier
reasoning block dropped, the oldest turns cut for the context budget) a new sequence
starts.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from transformers import PreTrainedModel

from coplay.models.devices import to_device
from coplay.policies.prefixes import left_pad
from coplay.policies.scoring import sampling_logps
from coplay.types import Decision


def _full(d: Decision) -> tuple[int, ...]:
    return tuple(d.prompt_ids) + tuple(d.response_ids)


def conversations(decisions: Sequence[Decision]) -> list[list[int]]:
    """Indices of ``decisions`` grouped into chains, each in turn order: a decision
    follows another when its prompt begins with the other's prompt + answer. A chain
    never branches (a second follower starts a chain of its own).

    >>> d = lambda p, r: Decision("", None, "x", prompt_ids=p, response_ids=r)
    >>> conversations([d((1, 5, 6, 9), (4,)), d((1,), (5,)), d((1, 5, 6), (7,)), d((2,), (3,))])
    [[0], [1, 2], [3]]
    """
    fulls = [_full(d) for d in decisions]
    order = sorted(range(len(decisions)), key=lambda i: (fulls[i], len(decisions[i].prompt_ids)))
    chains: list[list[int]] = []
    chain_of: dict[int, int] = {}
    stack: list[int] = []  # decisions whose full sequence is a prefix of the current one
    for i in order:
        prompt = tuple(decisions[i].prompt_ids)
        while stack and fulls[stack[-1]] != fulls[i][: len(fulls[stack[-1]])]:
            stack.pop()
        parent = next(
            (
                j
                for j in reversed(stack)
                if len(fulls[j]) <= len(prompt) and fulls[j] == prompt[: len(fulls[j])]
            ),
            None,
        )
        if parent is not None and chains[chain_of[parent]][-1] == parent:
            chain_of[i] = chain_of[parent]
            chains[chain_of[i]].append(i)
        else:
            chain_of[i] = len(chains)
            chains.append([i])
        stack.append(i)
    return sorted(chains, key=lambda c: c[0])


def chain_token_logps(
    model: PreTrainedModel,
    decisions: Sequence[Decision],
    chains: Sequence[Sequence[int]],
    *,
    temperature: float,
    pad_id: int = 0,
    top_k: int = 0,
    top_p: float = 1.0,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Per answer token of every decision: log-prob, entropy of the next-token
    distribution it was sampled from (``sampling_logps``), and mask, each (B, R) left-aligned in the order of ``decisions`` (R
    the longest answer), from one forward pass per chain (all chains in one batch)."""
    device = next(model.parameters()).device
    seqs = [_full(decisions[c[-1]]) for c in chains]
    ids, attn, pos = left_pad(seqs, pad_id)
    width = max(len(d.response_ids) for d in decisions)
    n = len(decisions)
    rows, cols, where, targets = [], [], [], []
    for c, chain in enumerate(chains):
        offset = ids.shape[1] - len(seqs[c])  # left padding of this chain
        for i in chain:
            start = offset + len(decisions[i].prompt_ids)
            for k, tok in enumerate(decisions[i].response_ids):
                rows.append(c)
                cols.append(start + k - 1)  # the logits one step back predict the token
                where.append(i * width + k)
                targets.append(tok)
    # Logits only at the columns some answer token is read from: the prompts (rules,
    # observations) are most of a conversation, and each logit row is vocabulary-wide.
    keep = torch.tensor(sorted(set(cols)))
    logits = model(
        input_ids=to_device(ids, device),
        attention_mask=to_device(attn, device),
        position_ids=to_device(pos, device),
        logits_to_keep=to_device(keep, device),
        use_cache=False,  # no continuation reads it
    ).logits  # (C, len(keep), V)
    kept = torch.searchsorted(keep, torch.tensor(cols))
    picked = logits[to_device(torch.tensor(rows), device), to_device(kept, device)]
    tgt = to_device(torch.tensor(targets), device)
    # The drawn tokens are never cut (``sampling_logps``'s ``keep``).
    dist = sampling_logps(picked, temperature=temperature, top_k=top_k, top_p=top_p, keep=tgt)
    logp = dist.gather(-1, tgt[:, None]).squeeze(-1)
    # a cut token's -inf times its 0 probability would be NaN
    entropy = -(dist.exp() * dist.masked_fill(dist.isinf(), 0.0)).sum(-1)
    index = to_device(torch.tensor(where), device)
    out = []
    for values in (logp, entropy, torch.ones_like(logp)):
        flat = values.new_zeros(n * width).index_copy(0, index, values)
        out.append(flat.view(n, width))
    return out[0], out[1], out[2]
