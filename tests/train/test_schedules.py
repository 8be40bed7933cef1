"""Learning-rate schedules: analytic factors with and without warm-up, the linear
decay as it always was, and one-line refusals."""

import math

import pytest

from coplay.train.config import OptimConfig
from coplay.train.schedules import SCHEDULES, check_schedule, check_warmup, lr_factor


def factors(total: int, **settings) -> list[float]:
    """The factor at every update of a run of ``total``, and one past its end."""
    factor = lr_factor(OptimConfig(**settings), total)
    return [factor(t) for t in range(total + 1)]


@pytest.mark.parametrize(
    ("settings", "expected"),
    [
        ({"lr_schedule": "linear"}, [1.0, 0.775, 0.55, 0.325, 0.1, 0.1]),
        (
            {"lr_schedule": "cosine"},
            [
                1.0,
                0.1 + 0.45 * (1 + math.sqrt(0.5)),
                0.55,
                0.1 + 0.45 * (1 - math.sqrt(0.5)),
                0.1,
                0.1,
            ],
        ),
        ({"lr_schedule": "constant", "warmup_updates": 2}, [0.0, 0.5, 1.0, 1.0, 1.0, 1.0]),
        # The decay spans the three updates after the warm-up, to the same end.
        ({"lr_schedule": "linear", "warmup_updates": 2}, [0.0, 0.5, 1.0, 0.55, 0.1, 0.1]),
        ({"lr_schedule": "cosine", "warmup_updates": 2}, [0.0, 0.5, 1.0, 0.55, 0.1, 0.1]),
        ({"lr_schedule": "linear", "warmup_updates": 3}, [0.0, 1 / 3, 2 / 3, 1.0, 0.1, 0.1]),
    ],
)
def test_each_schedule_gives_its_analytic_factors(settings, expected):
    assert factors(5, final_lr_frac=0.1, **settings) == pytest.approx(expected, abs=1e-12)


def test_a_constant_schedule_without_warm_up_needs_no_scheduler():
    assert lr_factor(OptimConfig(), 5) is None
    assert lr_factor(OptimConfig(lr_schedule="constant", warmup_updates=1), 5)(0) == 0.0


@pytest.mark.parametrize("total", [1, 2, 3, 7, 100])
@pytest.mark.parametrize("end", [0.1, 0.02, 1.0, 1 / 3])
def test_the_linear_decay_is_the_earlier_formula_bit_for_bit(total, end):
    # Presets and runs saved before the registry train at exactly these rates.
    span = max(1, total - 1)

    def earlier(it):
        return 1.0 - (1.0 - end) * min(it, span) / span

    factor = lr_factor(OptimConfig(lr_schedule="linear", final_lr_frac=end), total)
    assert [factor(t) for t in range(total + 2)] == [earlier(t) for t in range(total + 2)]


def test_every_registered_schedule_starts_at_one_and_ends_at_its_floor():
    optim = OptimConfig(final_lr_frac=0.25)
    for name, schedule in SCHEDULES.items():
        assert schedule(0, 10, optim) == 1.0, name
        assert schedule(9, 10, optim) == schedule(50, 10, optim), name
        assert schedule(9, 10, optim) in (1.0, pytest.approx(0.25)), name


def test_an_unknown_schedule_is_one_line_naming_the_registered_ones():
    with pytest.raises(
        ValueError, match=r"^unknown lr schedule 'cosin'; registered: constant, linear, cosine$"
    ):
        check_schedule("cosin")


@pytest.mark.parametrize("warmup", [5, 6])
def test_a_warm_up_as_long_as_the_run_is_refused(warmup):
    with pytest.raises(ValueError, match=f"optim.warmup_updates={warmup} .* train.iterations=5"):
        check_warmup(warmup, 5)
    with pytest.raises(ValueError, match="set it below 5"):
        lr_factor(OptimConfig(warmup_updates=warmup), 5)
    check_warmup(4, 5)


def test_the_worked_examples_in_the_docstrings_hold():
    # coplay/train is a namespace package, which tests/test_doctests.py's walk skips.
    import doctest

    from coplay.train import schedules

    result = doctest.testmod(schedules)
    assert result.attempted >= 3 and result.failed == 0
