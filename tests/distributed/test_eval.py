"""Distributed evaluation: a tournament on Ray workers plays what the local engine
plays on the same seeds, scripted bots and frozen language models alike; a text
policy's sampled answers asked on workers are the ones asked here.

One private local Ray (two CPUs) serves the module; every test starts its two
workers and stops them, as any evaluation does (``evaluation_source``)."""

from __future__ import annotations

import json

import pytest
import torch

from coplay.cli import main
from coplay.cli.common import build_player
from coplay.distributed.config import RayConfig
from coplay.envs.gameref import GameRef
from coplay.envs.probe import resolve_factory
from coplay.eval.crossplay import cross_play, to_json
from coplay.eval.sampled import SampledPolicy, forfeiting_exploitability, sample_tallies
from coplay.models.build import build_policy
from coplay.rollout.source import LocalSource
from coplay.train.evaluate import evaluate
from coplay.train.settings import build_config
from coplay.train.trainer import game_text, save_checkpoint, setup
from tests.eval.writers import TEXT, kuhn_observations, write_actions, writing_lm
from tests.train.runs import TINY

ray = pytest.importorskip("ray")
from coplay.distributed.source import RaySource  # noqa: E402

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


K = 128
"""Answers per state in the tests of sampled answers on workers."""


@pytest.fixture(scope="class")
def pool():
    """Two workers for the tests of one class, stopped after them (so that the tests
    that start their own find the CPUs free)."""
    source = RaySource(GameRef("kuhn_poker"), workers=2, ray_config=RayConfig())
    try:
        yield source.workers
    finally:
        source.close()


class TestSampledAnswersOnWorkers:
    """A text policy's K answers per state asked on one or two Ray workers: the local
    estimate exactly. K = 128 makes Kuhn's 12 states 3 calls (``per_call``), so that
    two workers share them."""

    def test_on_one_or_two_workers_they_are_the_local_ones(self, pool):
        lm, states = writing_lm(), kuhn_observations()
        local = SampledPolicy(lm, k=K, seed=2)
        expected = forfeiting_exploitability(local, "kuhn_poker")
        assert len(local.tallies) == 12 and 0.1 < local.invalid_rate() < 0.9
        one, two = on(pool[:1]), on(pool)
        for source in (one, two):
            sampled = SampledPolicy(lm, k=K, seed=2, sampler=source.tally)
            assert forfeiting_exploitability(sampled, "kuhn_poker") == expected
            assert sampled.tallies == local.tallies
        # Another seed, other answers: the workers sample rather than echo.
        assert two.tally(lm, states, k=K, seed=3) != local.tally(states)

    def test_they_follow_the_weights(self, pool):
        lm, states = writing_lm(), kuhn_observations()
        two = on(pool)
        before = two.tally(lm, states, k=K, seed=2)
        # A policy they do not play goes whole at each call: weights moved in place
        # without a new version (as a magnet's move) reach them.
        with torch.no_grad():
            lm.model.lm_head.bias.neg_()  # now it hardly ever writes an action
        after = sample_tallies(lm, states, k=K, seed=2)
        assert after != before and two.tally(lm, states, k=K, seed=2) == after
        # The learner they play goes as for play: only a new version's weights follow.
        sent = two.shipping.ship([lm.policy_id], {lm.policy_id: lm})  # as a rollout does
        with torch.no_grad():
            lm.model.lm_head.bias.neg_()
        lm.publish()
        assert two.tally(lm, states, k=K, seed=2) == before
        assert two.shipping.sent[lm.policy_id].token == sent[lm.policy_id].token
        assert two.shipping.weights[lm.policy_id][0] == lm.version == 1

    def test_a_text_runs_evaluation_asks_them_on_its_workers(self, pool, tmp_path):
        over = [*TINY, *TEXT, "train.eval_samples=3", "train.eval_bootstrap=5"]
        run = setup(build_config(overrides=[*over, "train.eval_opponents=[nash]"]), tmp_path)
        write_actions(run.trainees[0].policy)
        local = sampled_metrics(evaluate(run))
        run.source = on(pool)  # as rollout.workers=2 makes it
        asked = []
        run.source.tally = spy(run.source.tally, asked)
        assert sampled_metrics(evaluate(run)) == local
        assert asked and sum(asked) >= 12  # every information state, on the workers
        assert {"eval/exploitability_sampled", "eval/nash/exact_loss_seat0_sampled"} <= set(local)
        assert 0.1 < local["eval/invalid_rate_sampled"] < 0.9


def on(actors) -> RaySource:
    return RaySource(GameRef("kuhn_poker"), workers=len(actors), actors=actors)


def spy(tally, asked):
    def counted(policy, observations, *, k, seed):
        asked.append(len(observations))
        return tally(policy, observations, k=k, seed=seed)

    return counted


def sampled_metrics(metrics):
    return {k: v for k, v in metrics.items() if "_sampled" in k}


def test_coplay_eval_of_a_text_checkpoint_on_two_workers_prints_the_local_rows(tmp_path, capsys):
    cfg = build_config(overrides=[*TINY, *TEXT, "model.max_new_tokens=8"])
    text = game_text(resolve_factory("kuhn_poker", {}), seed=0)
    lm = build_policy(cfg.model, corpus=text.texts, actions=text.actions, seed=0)
    folder = str(save_checkpoint(lm, tmp_path / "lm", game=cfg.game.played()))
    argv = ["eval", folder, "--episodes", "4", "--samples", "128", "--exact", "--costly", "2"]
    shown = []
    for workers in ("0", "2"):
        assert main([*argv, "--workers", workers]) == 0
        shown.append(capsys.readouterr().out)
    assert "exploitability (sampled, K=128)" in shown[0] and "costliest positions" in shown[0]
    assert shown[1] == shown[0]
