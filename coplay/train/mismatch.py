"""Behaviour log-probs from an inference engine, and their gap to the learner's.

An engine whose kernels are not the learner's (``coplay.backends.vllm``) records
log-probs that differ from the learner's recomputation under the very same weights
(float error in float32; far more in bfloat16). Before an update, the learner scores
the engine's text decisions once more without gradients: its own log-probs become
``logprobs`` (PPO's pi_old, so the first step's ratio is exactly 1) and the engine's
become ``behavior_logprobs``, which the truncated importance weights
min(exp(pi_old - behaviour), cap) (``model.text.tis_cap``) correct for. The gap
is measured on every such update (``Mismatch``); the decoupled objective is that of
TIS (Yao et al., 2025) and verl's recomputed ``old_log_prob``.

Backends whose log-probs are the learner's own (``exact_logprobs`` absent or true:
the Hugging Face backend) cost nothing here. Choices are scored by the Hugging Face
model on every backend, and exploration's mixture already has its own behaviour
log-probs: both are left as they are.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

import torch

from coplay.train.micro import learner_passes
from coplay.train.parts.term import Sample
from coplay.types import Decision


@dataclass(frozen=True)
class Mismatch:
    """Per-token gap between an engine's log-probs and the learner's, over ``tokens``."""

    mean_abs: float
    """Mean |learner - engine| log-prob."""
    max_abs: float
    """Largest |learner - engine| log-prob."""
    ratio_std: float
    """Standard deviation of the ratio exp(learner - engine) (1 and 0 when equal)."""
    tokens: int

    def metrics(self) -> dict[str, float]:
        return {
            "rollout/logp_mismatch_mean": self.mean_abs,
            "rollout/logp_mismatch_max": self.max_abs,
            "rollout/is_ratio_std": self.ratio_std,
        }


def rebase_on_learner(learner, samples: Sequence[Sample]) -> tuple[list[Sample], Mismatch | None]:
    """``samples`` with each engine-written text decision's ``logprobs`` recomputed by
    the learner and the engine's kept as ``behavior_logprobs``, and their gap; the
    samples unchanged and None where the backend's log-probs are the learner's."""
    samples = list(samples)
    if getattr(learner.policy.backend, "exact_logprobs", True):
        return samples, None
    rows = [i for i, s in enumerate(samples) if _from_engine(s)]
    if not rows:
        return samples, None
    decisions = [samples[i].decision for i in rows]
    ours = learner_logprobs(learner, decisions)
    for i, d, lps in zip(rows, decisions, ours, strict=True):
        samples[i] = replace(
            samples[i], decision=replace(d, logprobs=lps, behavior_logprobs=d.logprobs)
        )
    return samples, measure(ours, [d.logprobs for d in decisions])


def _from_engine(sample: Sample) -> bool:
    d = sample.decision
    return (
        not sample.replay and not d.choice_ids and bool(d.logprobs) and d.behavior_logprobs is None
    )


@torch.no_grad()
def learner_logprobs(learner, decisions: Sequence[Decision]) -> list[tuple[float, ...]]:
    """The learner's per-token log-probs of ``decisions`` under its current weights,
    scored in its own micro-batches."""
    scorer = learner.policy.scorer
    out: list[tuple[float, ...]] = [()] * len(decisions)
    for rows in learner_passes(learner, decisions):
        logp = scorer.score([decisions[i] for i in rows]).logp.float().cpu()  # (B, T)
        for row, i in enumerate(rows):
            out[i] = tuple(logp[row, : len(decisions[i].logprobs)].tolist())
    return out


def measure(learner: Sequence[Sequence[float]], engine: Sequence[Sequence[float]]) -> Mismatch:
    """The per-token gap between two sets of log-probs of the same tokens."""
    ours = torch.tensor([x for row in learner for x in row], dtype=torch.float64)
    theirs = torch.tensor([x for row in engine for x in row], dtype=torch.float64)
    gap = ours - theirs  # (N,)
    ratio = gap.exp()
    std = ratio.std(correction=0).item() if len(gap) else 0.0
    return Mismatch(
        mean_abs=gap.abs().mean().item() if len(gap) else 0.0,
        max_abs=gap.abs().max().item() if len(gap) else 0.0,
        ratio_std=std if math.isfinite(std) else math.inf,
        tokens=len(gap),
    )
