"""A league of frozen snapshots: the run, its snapshot schedule and resume, immutability."""

import hashlib
import json

import numpy as np
import pytest
import torch

from coplay.policies.scripted import RandomPolicy
from coplay.population.league import member_metrics, run_league, snapshot_reason
from coplay.population.league_config import LeagueConfig
from coplay.population.league_samplers import SAMPLERS, Sampler
from coplay.population.league_tally import Tally
from coplay.population.opponents import OpponentPool
from coplay.train.settings import build_config
from tests.population.league_runs import TINY, league_cfg, two_player


def test_snapshot_on_schedule_and_on_threshold():
    cfg = league_cfg(snapshot_every=10, win_threshold=0.7, min_games=20)
    few = two_player([15], [0], [19])
    strong = two_player([14], [1], [20])  # score 0.725
    weak = two_player([13], [0], [20])  # score 0.65
    assert snapshot_reason(10, cfg, Tally.empty(1)) == "schedule"
    assert snapshot_reason(7, cfg, few) is None  # too few games to read the rate
    assert snapshot_reason(7, cfg, strong) == "threshold"
    assert snapshot_reason(7, cfg, weak) is None
    off = league_cfg(snapshot_every=0, win_threshold=None)
    assert snapshot_reason(10, off, strong) is None


def digest(folder) -> str:
    return hashlib.sha256((folder / "model.safetensors").read_bytes()).hexdigest()


def test_league_run_adds_snapshots_on_schedule_and_keeps_them_frozen(tmp_path):
    cfg = league_cfg(sampler="pfsp", snapshot_every=2, win_threshold=None, bots=["random"])
    res = run_league(cfg, tmp_path)
    assert res.members == ("random", "snap:0", "snap:2", "snap:4")
    assert res.snapshots == ((0, "initial"), (2, "schedule"), (4, "schedule"))
    assert res.tally.games.sum() > 0 and len(res.elo) == 5
    assert "eval/exploitability" in res.final
    # The learner moved on after snapshot 0; the snapshot on disk is the initial model.
    first = tmp_path / "snapshots" / "iter_000000"
    assert digest(first) != digest(tmp_path / "checkpoints" / "final")
    assert digest(tmp_path / "snapshots" / "iter_000004") == digest(
        tmp_path / "checkpoints" / "final"
    )


def test_two_checkpoint_bots_of_one_folder_name_are_refused(tiny_policy, tmp_path):
    # Both would play as frozen:final, and games are seated by id: one bot, not two.
    from coplay.models.loading import save_policy

    for run in ("a", "b"):
        save_policy(tiny_policy, tmp_path / run / "final")
    bots = [str(tmp_path / "a" / "final"), str(tmp_path / "b" / "final")]
    out = tmp_path / "league"
    with pytest.raises(ValueError, match="both play as 'frozen:final'"):
        run_league(league_cfg(bots=bots), out)
    assert not out.exists()  # refused before the run's directory is written


def test_snapshot_member_keeps_its_weights_while_the_learner_trains(tmp_path):
    from coplay.population.league import _add_snapshot, _League
    from coplay.train.loop import make_plan
    from coplay.train.parts.seating import FromPool
    from coplay.train.trainer import setup

    cfg = league_cfg()
    run = setup(cfg.run, tmp_path)
    league = _League([], [], Tally.empty(0), Tally.empty(0))
    _add_snapshot(cfg, run, league, 0, "initial")
    snap = league.members[0]
    assert run.policies["snap:0"] is snap
    before = {k: v.clone() for k, v in snap.model.state_dict().items()}
    run.seating = FromPool(run.trainees[0].name, OpponentPool(league.members), 2)
    plan, _ = make_plan(run, 1)
    assert all("snap:0" in row for row in plan.seatings)
    run.trainees[0].learn(run.source.play(plan, run.policies).episodes, run.rng)
    after, learner = snap.model.state_dict(), run.trainees[0].policy.model.state_dict()
    assert all(torch.equal(before[k], after[k]) for k in before)
    assert not all(torch.equal(before[k], learner[k]) for k in before)  # the learner moved
    assert snap.policy_id == "snap:0" and league.tally.games.tolist() == [0]


@pytest.mark.parametrize("needs_payoff", [False, True])
def test_a_sampler_that_needs_the_payoff_gets_it_refreshed_at_each_snapshot(
    tmp_path, monkeypatch, needs_payoff
):
    from coplay.population.league import _add_snapshot, _League
    from coplay.population.league_samplers import uniform_sampler
    from coplay.train.trainer import setup

    # The flag, not the sampler's name, decides whether snapshots pay for a meta-game.
    monkeypatch.setitem(SAMPLERS, "uniform", Sampler(uniform_sampler, needs_payoff=needs_payoff))
    cfg = league_cfg(sampler="uniform")
    run = setup(cfg.run, tmp_path)
    league = _League([], [], Tally.empty(0), Tally.empty(0))
    _add_snapshot(cfg, run, league, 0, "initial")
    _add_snapshot(cfg, run, league, 1, "schedule")
    if not needs_payoff:
        assert league.payoff is None
        return
    # Two copies of one policy in a zero-sum game, seats averaged: every entry is 0.
    assert league.payoff.shape == (2, 2)
    np.testing.assert_allclose(league.payoff, 0.0, atol=1e-12)
    assert len(league.tables) == 2  # the exact meta-game grew with the league
    metagame = json.loads((tmp_path / "metagame.json").read_text())  # the report's heatmap
    assert metagame == {"members": ["snap:0", "snap:1"], "payoffs": [league.payoff.tolist()]}


def test_each_iteration_logs_the_members_weights_and_win_rates():
    members = [RandomPolicy(seed=0, policy_id="snap:0"), RandomPolicy(seed=1, policy_id="bot")]
    m = member_metrics(members, np.array([0.25, 0.75]), np.array([0.5, 0.9]))
    assert m == {
        "league/weight/snap:0": 0.25,
        "league/win_rate/snap:0": 0.5,
        "league/weight/bot": 0.75,
        "league/win_rate/bot": 0.9,
    }


def _rows(out):
    return [
        {k: v for k, v in json.loads(x).items() if not k.startswith("perf/")}
        for x in (out / "metrics.jsonl").read_text().splitlines()
    ]


@pytest.mark.parametrize("sampler", ["pfsp", "meta"])
def test_league_killed_and_resumed_equals_the_uninterrupted_run(tmp_path, monkeypatch, sampler):
    from coplay.train import hooks

    cfg = league_cfg(sampler=sampler, snapshot_every=2, win_threshold=None, bots=["random"])
    run = cfg.run.model_copy(
        update={"train": cfg.run.train.model_copy(update={"save_every": 1, "eval_every": 2})}
    )
    cfg = cfg.model_copy(update={"run": run})
    whole = run_league(cfg, tmp_path / "whole")
    # A job that stops after iteration 2, then a Ctrl-C during iteration 4 (the state of
    # iteration 3 saved), each resumed.
    run_league(cfg, tmp_path / "split", stop_after=2)
    real = hooks.Log.after

    def killed(self, run, it, batch, metrics):
        if it == 4:
            raise KeyboardInterrupt
        return real(self, run, it, batch, metrics)

    monkeypatch.setattr(hooks.Log, "after", killed)
    with pytest.raises(KeyboardInterrupt):
        run_league(cfg, tmp_path / "split", resume=True)
    monkeypatch.setattr(hooks.Log, "after", real)
    split = run_league(cfg, tmp_path / "split", resume=True)
    assert split.snapshots == whole.snapshots == ((0, "initial"), (2, "schedule"), (4, "schedule"))
    assert split.tally.games.tolist() == whole.tally.games.tolist()
    assert _rows(tmp_path / "split") == _rows(tmp_path / "whole")
    assert [r["iteration"] for r in _rows(tmp_path / "split")] == [0, 1, 2, 3, 4]
    for sub in ("snapshots/iter_000004", "checkpoints/final"):
        assert digest(tmp_path / "split" / sub) == digest(tmp_path / "whole" / sub)


def test_a_league_refuses_a_single_player_game_before_writing(tmp_path):
    # Its snapshots had no one to play: every one stayed "not rated (no games)".
    run = build_config(preset="frozenlake", overrides=TINY)
    with pytest.raises(
        ValueError, match="a league needs a game of 2 or more players; 'frozen_lake' has 1"
    ):
        run_league(LeagueConfig(run=run, bots=["random"]), tmp_path / "league")
    assert not (tmp_path / "league").exists()
