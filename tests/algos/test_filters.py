"""Sample filters: keep-masks worked out by hand, and the share-dropped metrics."""

import doctest

import numpy as np
import pytest

from coplay.algos.losses import filters
from coplay.algos.losses.filters import filter_metrics, informative_groups, nonzero_advantage_mask


def test_nonzero_advantage_mask_keeps_strictly_above_eps():
    adv = np.array([0.0, 1.0, -0.5, 1e-8, -0.0])
    assert nonzero_advantage_mask(adv).tolist() == [False, True, True, True, False]
    assert nonzero_advantage_mask(adv, eps=0.5).tolist() == [False, True, False, False, False]
    assert nonzero_advantage_mask(adv).dtype == np.bool_


def test_nonzero_advantage_mask_keeps_shape_and_rejects_negative_eps():
    assert nonzero_advantage_mask([[0.0, 2.0], [3.0, 0.0]]).tolist() == [
        [False, True],
        [True, False],
    ]
    with pytest.raises(ValueError, match="eps must be >= 0"):
        nonzero_advantage_mask([1.0], eps=-1.0)


def test_informative_groups_drops_flat_and_singleton_groups():
    # groups interleaved in batch order; keys may be tuples such as (game, group_id, seat)
    ids = [("g", 0, 0), ("g", 1, 0), ("g", 0, 0), ("g", 1, 0), ("g", 2, 0), ("g", 0, 0)]
    returns = [1.0, 0.5, 1.0, 0.5, -1.0, 0.0]
    keep = informative_groups(ids, returns)
    assert keep.dtype == np.bool_
    # group 0 has returns {1, 1, 0}: informative; group 1 all 0.5: flat; group 2 alone
    assert keep.tolist() == [True, False, True, False, False, True]


def test_informative_groups_tests_equality_not_rounded_std():
    # rounding in the mean leaves a nonzero std for three equal returns of 0.1
    assert np.std([0.1, 0.1, 0.1]) > 0.0
    assert informative_groups([7, 7, 7], [0.1, 0.1, 0.1]).tolist() == [False, False, False]
    assert informative_groups([7, 7], [0.3, 0.3 + 1e-12]).tolist() == [True, True]


def test_informative_groups_checks_lengths():
    with pytest.raises(ValueError, match="one per group id"):
        informative_groups(["a", "b"], [1.0, 2.0, 3.0])
    assert informative_groups([], []).tolist() == []


def test_filter_metrics_share_dropped_per_mask_and_together():
    zero_adv = np.array([True, False, True, True])
    flat_group = np.array([True, False, False, True])
    m = filter_metrics(zero_adv=zero_adv, flat_group=flat_group)
    assert m == {
        "adv/zero_adv_dropped_frac": pytest.approx(0.25),
        "adv/flat_group_dropped_frac": pytest.approx(0.5),
        "adv/dropped_frac": pytest.approx(0.5),  # rows 1 and 2
    }
    assert filter_metrics(zero_adv=np.array([], dtype=bool)) == {
        "adv/zero_adv_dropped_frac": 0.0,
        "adv/dropped_frac": 0.0,
    }
    assert filter_metrics() == {}


def test_docstring_examples():
    assert doctest.testmod(filters, raise_on_error=True).attempted == 3
