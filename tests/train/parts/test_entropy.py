"""The entropy term: its linear schedule and its value on a hand case."""

import math

import pytest

from coplay.algos.losses.regularizers import EntropyConfig
from coplay.train.parts.entropy import Entropy


def test_the_weight_anneals_linearly_and_holds_after_the_last_update():
    term = Entropy(EntropyConfig(coef=0.1, final_frac=0.2), iterations=3)
    assert [term.weight(i) for i in (0, 1, 2, 99)] == pytest.approx([0.1, 0.06, 0.02, 0.02])
    assert Entropy(EntropyConfig(coef=0.1), iterations=3).weight(2) == 0.1  # constant
    assert term.after_update(None, 1) == {"loss/entropy_coef": pytest.approx(0.06)}
    assert term.prepare(None, [], 2) == (pytest.approx(0.02), {})


def test_an_entropy_of_a_hand_case_lowers_the_loss(micro_of, sample_of):
    # Entropies log 2 and H(0.8, 0.2), token mean over two units, weight 0.1.
    micro, leaf = micro_of([sample_of(), sample_of()], [[0.5, 0.5], [0.8, 0.2]])
    h = -(0.8 * math.log(0.8) + 0.2 * math.log(0.2))
    value, metrics = Entropy(EntropyConfig(coef=0.1), 1).loss(0.1, micro)
    assert value.item() == pytest.approx(-0.1 * (math.log(2) + h) / 2, rel=1e-6)
    assert metrics == {}


def test_a_zero_weight_adds_nothing(micro_of, sample_of):
    # final_frac 0 reaches weight 0 at the last update: the term skips it, as before.
    micro, _ = micro_of([sample_of()], [[0.5, 0.5]])
    term = Entropy(EntropyConfig(coef=0.1, final_frac=0.0), iterations=2)
    assert term.weight(1) == 0.0
    assert term.loss(term.weight(1), micro) == (None, {})


def test_off_the_weight_is_still_logged():
    assert Entropy.idle_metrics == {"loss/entropy_coef": 0.0}
