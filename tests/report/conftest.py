"""A tiny Kuhn run, trained once per session with ``--report``, for the report tests."""

import pytest

from coplay.cli import main

TINY = [
    "train.iterations=2",
    "train.eval_every=1",
    "train.eval_episodes=8",
    "train.transcripts=2",
    "rollout.games_per_iter=8",
    "model.tiny.hidden_size=32",
    "model.tiny.intermediate_size=64",
]


@pytest.fixture(scope="session")
def tiny_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("report") / "kuhn"
    assert main(["train", "--quiet", "--report", "--out", str(out), *TINY]) == 0
    return out
