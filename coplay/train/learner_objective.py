"""The objective of one micro-batch: the PPO loss over its own samples plus the
per-unit terms (``own_loss``), the sampled and behaviour log-probs padded to the scored
width, and the units a row counts for under ``constant_norm`` (``units_per_row``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from itertools import chain
from typing import Any

import numpy as np
import torch

from coplay.algos.losses.compose import policy_loss
from coplay.models.devices import to_device
from coplay.train.learner import Learner
from coplay.train.parts.term import LossMetrics, Micro


def _pad(rows: Sequence[Sequence[float]], width: int) -> torch.Tensor:
    """(B, width) float32, row i's values from the left, zeros after (one flat copy)."""
    if width == 1:  # one unit a row (choices): no offsets to compute
        return _column([r[0] for r in rows])
    lens = np.fromiter(map(len, rows), dtype=np.int64, count=len(rows))
    out = np.zeros((len(rows), width), dtype=np.float32)
    flat = np.fromiter(chain.from_iterable(rows), dtype=np.float64, count=int(lens.sum()))
    cols = np.arange(len(flat)) - np.repeat(np.cumsum(lens) - lens, lens)
    out[np.repeat(np.arange(len(rows)), lens), cols] = flat  # rounded as torch rounds
    return torch.from_numpy(out)


def _column(values: Sequence[float]) -> torch.Tensor:
    """(B, 1) float32 of ``values``, rounded as ``torch.tensor`` rounds them (one
    numpy copy instead of one Python float at a time)."""
    flat = np.fromiter(values, dtype=np.float64, count=len(values))
    return torch.from_numpy(flat.astype(np.float32)[:, None])


def _behavior(decision) -> tuple[float, ...]:
    return decision.logprobs if decision.behavior_logprobs is None else decision.behavior_logprobs


def own_loss(
    learner: Learner, micro: Micro, contexts: Mapping[str, Any]
) -> tuple[torch.Tensor, LossMetrics, float]:
    """The objective over the micro-batch's own samples plus the per-unit terms, their
    metrics (``loss/total`` is this sum, not the per-decision terms) and the own units
    the metrics' means are over."""
    decisions = [s.decision for s in micro.own]
    width, device = micro.logp.shape[1], micro.logp.device
    total, metrics = policy_loss(
        learner.loss,
        logp=micro.logp,
        old_logp=to_device(_pad([d.logprobs for d in decisions], width), device),
        adv=to_device(_column([s.advantage for s in micro.own]), device),  # (B, 1)
        mask=micro.mask,
        denom=micro.denom,
        # The behaviour policy is the recorded one unless exploration mixed in uniform
        # choices (``rollout.explore``); then the truncated weights pi_old / mixture
        # keep the update on the policy's own distribution (read only with ``tis_cap``).
        behavior_logp=(
            to_device(_pad([_behavior(d) for d in decisions], width), device)
            if learner.tis_cap is not None
            else None
        ),
        tis_cap=learner.tis_cap,
    )
    for name, term in learner.terms.items():
        if term.per_unit:
            value, term_metrics = term.loss(contexts[name], micro)
            total = total if value is None else total + value
            metrics |= term_metrics
    metrics["loss/total"] = total.item()
    units = micro.mask.sum()
    metrics["loss/entropy"] = float((micro.entropy.detach() * micro.mask).sum() / units)
    return total, metrics, float(units)


def units_per_row(policy: Any) -> float:
    """A decision's unit budget, constant_norm's constant (Dr. GRPO): the longest answer
    in text mode (``max_new_tokens``), the one chosen action in choice mode."""
    if getattr(policy, "mode", "choice") == "text":
        return float(policy.max_new_tokens)
    return 1.0
