"""Aggregation of a per-unit loss (B, T) into a scalar.

- ``token_mean``: sum over all valid units / number of valid units (DAPO).
- ``sequence_mean``: mean over each row's valid units, then mean over rows (GRPO's
  original form; long rows weigh as much as short ones).
- ``constant_norm``: sum over all valid units / a constant (Dr. GRPO, Liu et al.,
  2025, arXiv 2503.20783, which divides by rows x max generation length).

Gradient accumulation: a mean over each micro-batch is not the mean over the batch.
Passing ``denom=global_denom(name, all_masks)`` to every micro-batch makes the sum of
the micro-batch losses equal the full-batch loss exactly (1 x 8 == 8 x 1).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from torch import Tensor


def token_mean(x: Tensor, mask: Tensor, *, denom: float | None = None) -> Tensor:
    """sum(x * mask) / denom; denom defaults to this batch's number of valid units."""
    total = (x * mask).sum()
    return total / (mask.sum().clamp(min=1.0) if denom is None else denom)


def sequence_mean(x: Tensor, mask: Tensor, *, denom: float | None = None) -> Tensor:
    """sum over rows of (row's masked mean) / denom; denom defaults to non-empty rows here."""
    per_row = (x * mask).sum(-1) / mask.sum(-1).clamp(min=1.0)  # (B,)
    if denom is None:
        denom = (mask.sum(-1) > 0).sum().clamp(min=1).item()
    return per_row.sum() / denom


def constant_norm(x: Tensor, mask: Tensor, *, denom: float | None) -> Tensor:
    """sum(x * mask) / denom, with denom a constant you choose (e.g. rows x max units)."""
    if denom is None:
        raise ValueError(
            "constant_norm needs denom, e.g. global_denom('constant_norm', masks, "
            "units_per_row=max_new_tokens)"
        )
    return (x * mask).sum() / denom


AGGREGATIONS: dict[str, Callable[..., Tensor]] = {
    "token_mean": token_mean,
    "sequence_mean": sequence_mean,
    "constant_norm": constant_norm,
}
"""Aggregations by name; each is ``fn(x, mask, *, denom) -> scalar``."""


def valid_units(masks: Sequence[Tensor], *, units_per_row: float | None = None) -> float:
    """Total valid units: token_mean's denominator."""
    return max(1.0, float(sum(m.sum().item() for m in masks)))


def nonempty_rows(masks: Sequence[Tensor], *, units_per_row: float | None = None) -> float:
    """Total rows with at least one valid unit: sequence_mean's denominator."""
    return max(1.0, float(sum((m.sum(-1) > 0).sum().item() for m in masks)))


def row_budget(masks: Sequence[Tensor], *, units_per_row: float | None = None) -> float:
    """Total rows x ``units_per_row``: constant_norm's denominator (Dr. GRPO)."""
    if units_per_row is None:
        raise ValueError("constant_norm's global denominator needs units_per_row")
    return float(sum(m.shape[0] for m in masks)) * units_per_row


GLOBAL_DENOMS: dict[str, Callable[..., float]] = {
    "token_mean": valid_units,
    "sequence_mean": nonempty_rows,
    "constant_norm": row_budget,
}


def global_denom(
    aggregation: str, masks: Sequence[Tensor], *, units_per_row: float | None = None
) -> float:
    """The denominator of ``aggregation`` over all micro-batches' ``masks`` together.

    Pass the result as ``denom`` to every micro-batch's loss so that summing their
    gradients reproduces the full batch's gradient exactly.
    """
    if aggregation not in GLOBAL_DENOMS:
        raise ValueError(f"aggregation must be one of {sorted(GLOBAL_DENOMS)}, got {aggregation!r}")
    return GLOBAL_DENOMS[aggregation](masks, units_per_row=units_per_row)
