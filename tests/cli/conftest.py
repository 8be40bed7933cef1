"""The finished tiny runs and saved checkpoints that the command modules' tests read:
built once for the whole test run, never written to by a test."""

from pathlib import Path

import pytest
import yaml

from coplay.cli import main
from tests.cli.helpers import TINY


@pytest.fixture(scope="session")
def kuhn_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("run") / "kuhn"
    assert main(["train", "--quiet", "--out", str(out), *TINY]) == 0
    return out


@pytest.fixture(scope="session")
def writer(tmp_path_factory) -> Path:
    """A saved tiny text-mode Kuhn model: an opponent whose choice scores are no
    distribution of its play."""
    from coplay.models.loading import PlayedGame, save_policy
    from tests.eval.writers import writing_lm

    folder = tmp_path_factory.mktemp("writer") / "writer"
    save_policy(writing_lm(0), folder, game=PlayedGame("kuhn_poker", {}))
    return folder


@pytest.fixture(scope="session")
def three_player_run(tmp_path_factory) -> Path:
    """A run of a tiny choice-mode policy trained on three-player Kuhn with penalties:
    its checkpoint and config.yaml record both."""
    from coplay.envs.registry import make_env
    from coplay.models.build import ModelConfig, build_policy
    from coplay.models.loading import PlayedGame, save_policy
    from coplay.train.trainer import game_text

    text = game_text(lambda: make_env("kuhn_poker", players=3), episodes=20)
    cfg = ModelConfig.model_validate({"tiny": {"hidden_size": 32, "intermediate_size": 64}})
    policy = build_policy(cfg, corpus=text.texts, actions=text.actions, seed=0)
    run = tmp_path_factory.mktemp("three") / "run"
    save_policy(
        policy, run / "checkpoints" / "final", game=PlayedGame("kuhn_poker", {"players": 3})
    )
    game = {"name": "kuhn_poker", "params": {"players": 3}, "invalid": {"on_fail": "penalty"}}
    (run / "config.yaml").write_text(yaml.safe_dump({"game": game}))
    return run
