"""Smoke test of the own-time benchmark: exclusive times that add up, patches undone,
bad input as one error line."""

import importlib

import pytest
import torch

BENCHMARK = "own_time"


def _originals():
    live = importlib.import_module("coplay.rollout.live")
    update = importlib.import_module("coplay.train.learner_update")
    return (
        live.advance,
        update._micro_step,
        torch.Tensor.backward,
        torch.nn.utils.clip_grad_norm_,
    )


def test_the_engine_parts_add_up_to_at_most_the_total(bench, capsys):
    before = _originals()
    result = bench.main(["--arm", "engine", "--game", "kuhn_poker", "--games", "8", "--runs", "2"])
    parts = {row["name"]: row for row in result["parts"]}
    # The env is stepped once a decision in Kuhn (one player acts at a time).
    assert parts["advance"]["calls_per_unit"] == pytest.approx(1.0)
    assert parts["MODEL forward"]["per_unit"] > 0
    # Exclusive times never count a callee twice: their sum is within the total.
    assert sum(row["per_unit"] for row in result["parts"]) <= result["total"] * 1.001
    assert result["own"] == pytest.approx(result["total"] - result["model"])
    assert _originals() == before  # every wrapper taken off again
    assert "us/decision" in capsys.readouterr().out


def test_the_learner_parts_name_the_model_and_the_terms(bench):
    before = _originals()
    result = bench.main(
        ["--arm", "learner", "--runs", "1", "rollout.games_per_iter=8", "train.exact=false"]
    )
    parts = {row["name"] for row in result["parts"]}
    assert {"MODEL forward", "MODEL backward", "MODEL step", "clip", "kl.loss"} <= parts
    assert sum(row["per_unit"] for row in result["parts"]) <= result["total"] * 1.001
    assert _originals() == before


@pytest.mark.parametrize(
    ("args", "named"),
    [
        (["--arm", "engine", "--game", "no_such_game"], "no_such_game"),
        (["--arm", "engine", "--games", "0"], "--games"),
        (["--arm", "learner", "optim.epochs=zero"], "optim.epochs"),
        (["--arm", "engine", "optim.epochs=2"], "overrides"),
    ],
)
def test_a_bad_setting_is_one_error_line(bench, capsys, args, named):
    with pytest.raises(SystemExit):
        bench.main(args)
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert "error:" in last and named in last
