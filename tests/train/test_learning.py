"""Learning checks: minutes of CPU each, so marked slow (run with `pytest -m slow`)."""

import pytest

from coplay.train.settings import build_config
from coplay.train.trainer import train

pytestmark = pytest.mark.slow


def test_kuhn_selfplay_approaches_equilibrium(tmp_path):
    cfg = build_config(preset="kuhn-selfplay", overrides=["train.eval_opponents=[]"])
    summary = train(cfg, tmp_path / "kuhn")
    assert summary["initial/eval/exploitability"] > 0.4
    assert summary["final/eval/exploitability"] <= 0.15


def test_tictactoe_selfplay_beats_random_more_often(tmp_path):
    cfg = build_config(preset="tictactoe-selfplay", overrides=["train.eval_opponents=[random]"])
    summary = train(cfg, tmp_path / "ttt")
    assert summary["final/eval/random/win"] > summary["initial/eval/random/win"] + 0.1
