"""The learner's differentiable scoring of recorded decisions.

A ``Scorer`` recomputes, with gradients, the log-probs a backend sampled with: the
same kernels (``coplay.policies.scoring``) on the same token ids at the same
temperature, so a decision scored right after it was sampled gets its recorded
log-probs back up to float error. Each decision is scored by its own kind: a
constrained choice (it records ``choice_ids``) as one unit, free text as one unit
per generated token, so one batch may mix both. Free-text decisions that continue
one another (chat context) are scored one conversation per sequence
(``coplay.policies.chains``).

A scorer is the learner's own component: the learner, its loss terms and the KL
reference call ``policy.scorer.score``. A policy whose weights need a setting first
(a LoRA role's adapter, a base with its adapters off) gives its scorer a ``context``
that every ``score`` enters.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from transformers import PreTrainedModel

from coplay.models.devices import to_device
from coplay.policies.chains import chain_token_logps, conversations
from coplay.policies.choices import ChoiceRows, distinct_choice_table
from coplay.policies.scoring import token_logps
from coplay.types import Decision


@dataclass(frozen=True)
class Scored:
    """Per-unit log-probs and entropies of a batch of decisions, padded to (B, T)."""

    logp: torch.Tensor  # (B, T)
    entropy: torch.Tensor  # (B, T)
    mask: torch.Tensor  # (B, T) float, 1 for real units
    dists: Sequence[torch.Tensor | None] = ()
    """Per row, the log-distribution over the decision's legal actions (choices only;
    None for free text)."""


@dataclass(frozen=True)
class Scorer:
    """Scores decisions under ``model`` at ``temperature``, with gradients."""

    model: PreTrainedModel
    temperature: float
    pad_id: int = 0
    """Id that pads choice prompts (the tokenizer's pad id, else 0); masked out."""
    context: Callable[[], AbstractContextManager[Any]] = nullcontext
    """Entered around every ``score``: what puts ``model`` in the policy's state (a LoRA
    role activates its adapter; the shared base disables them)."""
    top_k: int = 0
    top_p: float = 1.0
    """Free text: the cut of the distribution it was sampled from (``sampling_logps``),
    so recomputed log-probs are the recorded ones."""

    def score(self, decisions: Sequence[Decision]) -> Scored:
        """Differentiable per-unit log-probs and entropies of recorded decisions.

        Rows keep the order of ``decisions``; units are left-aligned, padded to (B, T).
        """
        with self.context():
            return self._score(decisions)

    def _score(self, decisions: Sequence[Decision]) -> Scored:
        if not decisions:
            raise ValueError("score needs at least one decision")
        listed = [bool(d.choice_ids) for d in decisions]
        if all(listed):  # one kind: nothing to stack and put back in order
            return self._score_choice(decisions)
        if not any(listed):
            return replace(self._score_text(decisions), dists=(None,) * len(decisions))
        choice = self._score_choice([d for d, c in zip(decisions, listed, strict=True) if c])
        text = self._score_text([d for d, c in zip(decisions, listed, strict=True) if not c])
        parts = [choice, text]
        width = max(p.logp.shape[1] for p in parts)
        # Rows of both kinds stacked [choices; texts], then put back in batch order.
        order = [i for i, c in enumerate(listed) if c] + [i for i, c in enumerate(listed) if not c]
        back = torch.argsort(torch.tensor(order))  # on the host: read below as well
        on_device = to_device(back, parts[0].logp.device)
        logp, ent, mask = (
            torch.cat([F.pad(getattr(p, f), (0, width - p.logp.shape[1])) for p in parts])[
                on_device
            ]
            for f in ("logp", "entropy", "mask")
        )
        stacked = [d for p in parts for d in (p.dists or (None,) * len(p.logp))]
        return Scored(
            logp=logp, entropy=ent, mask=mask, dists=tuple(stacked[i] for i in back.tolist())
        )

    def _score_choice(self, decisions: Sequence[Decision]) -> Scored | None:
        if not decisions:
            return None
        items = [(d.prompt_ids, d.choice_ids) for d in decisions]
        # Per distinct item (a small game's batch repeats a few states), read per row.
        table, inverse = distinct_choice_table(
            self.model, items, temperature=self.temperature, pad_id=self.pad_id
        )  # (U, K)
        picked = np.fromiter((d.choice_index for d in decisions), np.int64, len(decisions))
        index = to_device(torch.from_numpy(picked), table.device)
        at = torch.arange(len(decisions), device=table.device) if inverse is None else inverse
        chosen = table[at, index]
        # Padding is -inf; zeroed before the product so 0 * -inf never makes a NaN.
        ent = -(table.exp() * table.masked_fill(table.isinf(), 0.0)).sum(1)
        ent = ent if inverse is None else ent[inverse]
        ones = torch.ones(len(decisions), 1, device=chosen.device)
        dists = ChoiceRows(table, inverse, items)
        return Scored(logp=chosen[:, None], entropy=ent[:, None], mask=ones, dists=dists)

    @property
    def _warp(self) -> dict[str, Any]:
        return {"temperature": self.temperature, "top_k": self.top_k, "top_p": self.top_p}

    def _score_text(self, decisions: Sequence[Decision]) -> Scored | None:
        if not decisions:
            return None
        chains = conversations(decisions)
        if len(chains) < len(decisions):
            # Chat context: one forward pass per conversation scores all its answers.
            logp, ent, mask = chain_token_logps(self.model, decisions, chains, **self._warp)
            return Scored(logp=logp, entropy=ent, mask=mask)
        pairs = [(d.prompt_ids, d.response_ids) for d in decisions]
        # Text rows pad with id 0 whatever ``pad_id`` is, as the learner always has:
        # padding is masked out, and keeping the id keeps every recomputed number.
        logp, ent, mask = token_logps(self.model, pairs, **self._warp)
        return Scored(logp=logp, entropy=ent, mask=mask)
