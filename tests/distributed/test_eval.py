"""Distributed evaluation: a tournament on Ray workers plays what the local engine
plays on the same seeds, scripted bots and frozen language models alike.

One private local Ray (two CPUs) serves the module; the tournament starts its two
workers and stops them, as any evaluation does (``evaluation_source``)."""

from __future__ import annotations

import json

import pytest

from coplay.cli import main
from coplay.cli.common import build_player
from coplay.envs.gameref import GameRef
from coplay.envs.probe import resolve_factory
from coplay.eval.crossplay import cross_play, to_json
from coplay.models.loading import build_policy
from coplay.rollout.source import LocalSource
from coplay.train.config import build_config
from coplay.train.trainer import game_text, save_checkpoint
from tests.train.runs import TINY

ray = pytest.importorskip("ray")

pytestmark = pytest.mark.ray


@pytest.fixture(scope="module", autouse=True)
def local_ray():
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        yield
    finally:
        ray.shutdown()


def lm_checkpoints(root, seeds):
    """Untrained tiny Kuhn LMs saved in folders of one name (``<root>/<seed>/lm``), so
    that the tournament loads them under one policy id."""
    cfg = build_config(overrides=TINY)
    text = game_text(resolve_factory("kuhn_poker", {}), seed=0)
    folders = []
    for seed in seeds:
        lm = build_policy(cfg.model, corpus=text.texts, actions=text.actions, seed=seed)
        folders.append(str(save_checkpoint(lm, root / str(seed) / "lm", game=cfg.game.played())))
    return folders


def test_a_tournament_on_two_workers_writes_the_local_results(tmp_path, capsys):
    players = ["random", "nash", *lm_checkpoints(tmp_path, [0, 1])]
    out = tmp_path / "t.json"
    argv = ["tournament", "--game", "kuhn_poker", "--players", *players, "--episodes", "12"]
    assert main([*argv, "--seed", "3", "--workers", "2", "--out", str(out)]) == 0
    assert "mean return of row vs column" in capsys.readouterr().out
    data = json.loads(out.read_text())
    # The same players as the command builds them, played by this process's engine.
    policies = {p: build_player(p, "kuhn_poker", {}, seed=3 + i) for i, p in enumerate(players)}
    assert len({p.policy_id for p in policies.values()}) == 3  # both LMs: frozen:lm
    local = to_json(
        cross_play(
            "kuhn_poker", policies, episodes=12, seed=3, source=LocalSource(GameRef("kuhn_poker"))
        )
    )
    # Cross-play reads moves and returns only (no log-probs): equal to the last bit.
    assert data["complete"] and data["players"] == players
    for key in ("mean_return", "win_rate", "wins", "draws", "meta_game", "invalid_rate"):
        assert data[key] == local[key], key
    assert data["wins"][0][1] + data["wins"][1][0] + data["draws"][0][1] == 12
