"""Aggregations by hand, and their global denominators."""

import pytest
import torch

from coplay.algos.losses import AGGREGATIONS, constant_norm, global_denom, sequence_mean, token_mean

X = torch.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0], [7.0, 8.0, 9.0]])
MASK = torch.tensor([[1.0, 1.0, 0.0], [1.0, 0.0, 0.0], [0.0, 0.0, 0.0]])  # last row empty


def test_token_mean():
    assert token_mean(X, MASK).item() == pytest.approx(7 / 3)
    assert token_mean(X, MASK, denom=7.0).item() == pytest.approx(1.0)


def test_sequence_mean_skips_empty_rows():
    assert sequence_mean(X, MASK).item() == pytest.approx((1.5 + 4.0) / 2)
    assert sequence_mean(X, MASK, denom=5.5).item() == pytest.approx(1.0)


def test_constant_norm():
    assert constant_norm(X, MASK, denom=14.0).item() == pytest.approx(0.5)
    with pytest.raises(ValueError, match="denom"):
        constant_norm(X, MASK, denom=None)


def test_all_masked_gives_zero_not_nan():
    empty = torch.zeros_like(MASK)
    assert token_mean(X, empty).item() == 0.0
    assert sequence_mean(X, empty).item() == 0.0


def test_registry_and_global_denominators():
    assert set(AGGREGATIONS) == {"token_mean", "sequence_mean", "constant_norm"}
    masks = [MASK, torch.ones(2, 3)]
    assert global_denom("token_mean", masks) == 9.0
    assert global_denom("sequence_mean", masks) == 4.0
    assert global_denom("constant_norm", masks, units_per_row=10) == 50.0
    with pytest.raises(ValueError, match="units_per_row"):
        global_denom("constant_norm", masks)
    with pytest.raises(ValueError, match="token_mean"):
        global_denom("median", masks)


def test_global_denominators_of_padding_only_are_one_not_zero():
    # An update whose samples hold no valid unit must give a zero loss, not 0 / 0.
    empty = [torch.zeros(2, 3)]
    assert global_denom("token_mean", empty) == 1.0
    assert global_denom("sequence_mean", empty) == 1.0
    assert token_mean(X[:2], empty[0], denom=global_denom("token_mean", empty)).item() == 0.0
