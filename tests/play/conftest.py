"""A tiny trained run (one iteration of Kuhn self-play), shared by the play tests."""

from __future__ import annotations

import pytest

from coplay.train.settings import build_config
from coplay.train.trainer import train

TINY_RUN = [
    "train.iterations=1",
    "train.eval_every=1",
    "train.eval_opponents=[]",
    "train.exact=false",
    "train.exact_matches=false",
    "rollout.games_per_iter=8",
    "model.tiny.hidden_size=32",
    "model.tiny.intermediate_size=64",
]


@pytest.fixture(scope="session")
def tiny_run(tmp_path_factory):
    """A Kuhn run directory with a final checkpoint and recorded games."""
    out = tmp_path_factory.mktemp("play") / "run"
    train(build_config(preset="kuhn-selfplay", overrides=TINY_RUN), out)
    assert (out / "transcripts.jsonl").is_file()
    return out
