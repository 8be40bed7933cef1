"""League of frozen snapshots: samplers, results, snapshot schedule and immutability."""

import hashlib
import itertools
import json

import numpy as np
import pytest
import torch

from coplay.eval.matches import outcome
from coplay.eval.metasolvers import META_SOLVERS, MetaSolverError
from coplay.eval.ratings import elo_ratings
from coplay.policies.scripted import RandomPolicy
from coplay.population.league import (
    SAMPLERS,
    LeagueConfig,
    PoolView,
    Sampler,
    Tally,
    league_elo,
    member_metrics,
    run_league,
    snapshot_reason,
    tally_games,
)
from coplay.population.opponents import OpponentPool
from coplay.train.settings import build_config
from coplay.types import Episode, Trajectory

TINY = [
    "model.tiny.hidden_size=32",
    "model.tiny.intermediate_size=64",
    "model.tiny.num_layers=1",
    "rollout.games_per_iter=16",
    "optim.minibatch_size=64",
    "train.iterations=4",
    "train.eval_every=4",
    "train.eval_opponents=[]",
]


def league_cfg(**kwargs) -> LeagueConfig:
    return LeagueConfig(run=build_config(preset="kuhn-selfplay", overrides=TINY), **kwargs)


def draw_shares(probs, n=40_000, seed=0) -> np.ndarray:
    """Empirical member shares of ``n`` draws through the trainer's OpponentPool."""
    members = [type("M", (), {"policy_id": str(i)})() for i in range(len(probs))]
    draws = OpponentPool(members, probs=probs).sample(np.random.default_rng(seed), [0] * n)
    return np.bincount([int(d.policy_id) for d in draws], minlength=len(probs)) / n


WIN = np.array([0.1, 0.5, 0.8, 1.0])


@pytest.mark.parametrize(
    "kwargs,want",
    [
        ({"sampler": "uniform"}, np.full(4, 0.25)),
        # hard, p=2: (0.81, 0.25, 0.04, 0) / 1.10
        ({"sampler": "pfsp"}, np.array([0.81, 0.25, 0.04, 0.0]) / 1.10),
        # hard, p=1: (0.9, 0.5, 0.2, 0) / 1.6
        ({"sampler": "pfsp", "pfsp_power": 1.0}, np.array([0.9, 0.5, 0.2, 0.0]) / 1.6),
        # variance: (0.09, 0.25, 0.16, 0) / 0.5
        ({"sampler": "pfsp", "pfsp_weighting": "variance"}, np.array([0.09, 0.25, 0.16, 0]) / 0.5),
    ],
)
def test_sampler_formulas_and_draw_frequencies(kwargs, want):
    cfg = league_cfg(**kwargs)
    probs = SAMPLERS[cfg.sampler].weights(PoolView(WIN), cfg)
    np.testing.assert_allclose(probs, want)
    # 40k draws: each share within 4 standard errors of its probability.
    se = np.sqrt(want * (1 - want) / 40_000)
    assert np.all(np.abs(draw_shares(probs) - want) <= 4 * se + 1e-12)


def test_pfsp_is_uniform_when_the_learner_beats_everyone():
    cfg = league_cfg(sampler="pfsp")
    np.testing.assert_allclose(
        SAMPLERS["pfsp"].weights(PoolView(np.ones(3)), cfg), np.full(3, 1 / 3)
    )


def test_meta_sampler_plays_the_nash_of_rock_paper_scissors():
    rps = np.array([[0.0, -1.0, 1.0], [1.0, 0.0, -1.0], [-1.0, 1.0, 0.0]])
    cfg = league_cfg(sampler="meta")
    np.testing.assert_allclose(
        SAMPLERS["meta"].weights(PoolView(np.zeros(3), rps), cfg), 1 / 3, atol=1e-6
    )
    # A dominated member (loses to all) gets no weight.
    dom = np.array([[0.0, 1.0], [-1.0, 0.0]])
    np.testing.assert_allclose(
        SAMPLERS["meta"].weights(PoolView(np.zeros(2), dom), cfg), [1, 0], atol=1e-6
    )


def test_meta_sampler_falls_back_when_its_solver_fails_and_reports_it(monkeypatch):
    def failing(payoffs):
        raise MetaSolverError("no answer")

    monkeypatch.setitem(META_SOLVERS, "nash", failing)
    rps = np.array([[0.0, -1.0, 1.0], [1.0, 0.0, -1.0], [-1.0, 1.0, 0.0]])
    view = PoolView(np.zeros(3), rps)
    with pytest.warns(RuntimeWarning, match="meta-solver 'nash' failed, playing 'mwce'"):
        probs = SAMPLERS["meta"].weights(view, league_cfg(sampler="meta"))
    np.testing.assert_allclose(probs, 1 / 3, atol=1e-6)  # RPS's only CE is uniform
    assert view.metrics == {"league/meta_fallback": 1}


def test_meta_samplers_nash_falls_back_when_forfeits_break_the_constant_sum():
    # Self-play where both seats forfeited (both paid the minimum) leaves a negative
    # diagonal: payoff + payoff.T is not constant, which nash's LP refuses.
    payoff = np.array([[-0.3, -0.2], [0.2, 0.0]])
    view = PoolView(np.zeros(2), payoff)
    with pytest.warns(RuntimeWarning, match="meta-solver 'nash' failed, playing 'mwce'"):
        probs = SAMPLERS["meta"].weights(view, league_cfg(sampler="meta"))
    assert probs.sum() == pytest.approx(1.0)
    assert view.metrics == {"league/meta_fallback": 1}


def episode(seats, returns) -> Episode:
    return Episode("kuhn_poker", 0, 0, tuple(seats), (), tuple(returns))


def two_player(wins, draws, games) -> Tally:
    """A two-player tally: one result per game, the rest of the games lost."""
    wins, draws, games = np.array(wins), np.array(draws), np.array(games)
    return Tally(wins, draws, games, games - wins - draws)


def test_tally_reads_the_learners_games_from_the_seats():
    eps = [
        episode(["learner", "a"], [1, -1]),  # win against a
        episode(["b", "learner"], [2, -2]),  # loss against b
        episode(["learner", "b"], [0, 0]),  # draw against b
        episode(["learner", "learner"], [1, -1]),  # self-play: skipped
        episode(["x", "learner"], [-1, 1]),  # not in the league: skipped
    ]
    t = tally_games(eps, "learner", ["a", "b"])
    assert t.games.tolist() == [1, 2] and t.wins.tolist() == [1, 0] and t.draws.tolist() == [0, 1]
    # (wins + draws/2 + 1/2) / (games + 1)
    np.testing.assert_allclose(t.win_rates(), [1.5 / 2, 1.0 / 3])
    assert t.score() == pytest.approx(1.5 / 3)
    assert (t + Tally.empty(3)).games.tolist() == [1, 2, 0]


def test_tally_judges_a_game_by_the_board_not_by_a_penalty():
    # The learner won on the board (+1) but was charged two invalid-answer penalties.
    mine = Trajectory(0, "learner", ret=1.0 - 2.0, shaping=-2.0)
    eps = [Episode("kuhn_poker", 0, 0, ("learner", "a"), (mine, Trajectory(1, "a")), (-1.0, -1.0))]
    t = tally_games(eps, "learner", ["a"])
    assert t.wins.tolist() == [1] and t.draws.tolist() == [0]


def test_a_three_player_game_counts_one_result_per_member_seat():
    # The learner against each of the member's seats, by their two returns alone: the
    # old "strictly best of the table" read these as draw, loss, win and loss.
    eps = [
        episode(["learner", "a", "a"], [1, 1, -2]),  # ties seat 1, beats seat 2
        episode(["a", "learner", "a"], [2, 0, -2]),  # loses to seat 0, beats seat 2
        episode(["a", "a", "learner"], [-1, -1, 2]),  # beats both
        episode(["learner", "b", "b"], [-1, 0, 1]),  # loses to both
        episode(["learner", "a", "b"], [1, 0, -1]),  # two members at once: skipped
        episode(["learner"] * 3, [1, 0, -1]),  # self-play: skipped
    ]
    t = tally_games(eps, "learner", ["a", "b"])
    assert (t.wins.tolist(), t.draws.tolist(), t.games.tolist()) == ([4, 0], [1, 0], [3, 1])
    assert t.losses.tolist() == [1, 2] and t.results.tolist() == [6, 2]
    np.testing.assert_allclose(t.win_rates(), [(4 + 0.5 + 0.5) / 7, 0.5 / 3])
    assert t.score() == pytest.approx(4.5 / 8)


@pytest.mark.parametrize("players", [2, 3, 4])
def test_equal_policies_are_even_whatever_the_number_of_players(players):
    # Every ordering of distinct returns, the learner in seat 0: a member as strong as the
    # learner. Counting "the learner's return is the table's best" gave 1/n (1/3 for
    # three players: a ~120-point Elo gap and a PFSP weight above the learner's).
    seats = ["learner", *["m"] * (players - 1)]
    eps = [episode(seats, r) for r in itertools.permutations(range(players))]
    t = tally_games(eps, "learner", ["m"])
    assert t.score() == pytest.approx(0.5) and t.win_rates() == pytest.approx([0.5])
    assert t.games.tolist() == [len(eps)]
    elo = league_elo(t)
    assert elo[0] == pytest.approx(elo[1], abs=1e-6)
    even = league_cfg(snapshot_every=0, win_threshold=0.5, min_games=1)
    assert snapshot_reason(1, even, t) == "threshold"  # the threshold reads this score


def test_two_player_tallies_are_the_games_own_results():
    # n - 1 = 1 result per game: the game's win / draw / loss, as before (ties included).
    rng = np.random.default_rng(0)
    eps, want = [], {"a": [0, 0, 0], "b": [0, 0, 0]}  # wins, draws, games
    for k in range(200):
        member, seat = "ab"[k % 2], int(rng.integers(2))
        returns = [float(x) for x in rng.integers(-1, 2, size=2)]
        seats = ["learner", member] if seat == 0 else [member, "learner"]
        eps.append(episode(seats, returns))
        result = outcome(returns, seat)
        want[member][0] += result == 1
        want[member][1] += result == 0
        want[member][2] += 1
    t = tally_games(eps, "learner", ["a", "b"])
    wins, draws, games = (np.array(x) for x in zip(want["a"], want["b"], strict=True))
    assert t.wins.tolist() == wins.tolist() and t.draws.tolist() == draws.tolist()
    assert t.games.tolist() == games.tolist() and draws.sum() > 0
    np.testing.assert_allclose(t.win_rates(), (wins + draws / 2 + 0.5) / (games + 1))
    reference = np.zeros((3, 3), np.int64)
    reference[0, 1:], reference[1:, 0] = wins, games - wins - draws
    ties = np.zeros((3, 3), np.int64)
    ties[0, 1:] = ties[1:, 0] = draws
    np.testing.assert_allclose(league_elo(t), elo_ratings(reference, ties))


def test_a_tally_saved_before_losses_were_kept_is_restored():
    # Saved states held [wins, draws, games]: one result per game then.
    t = Tally.restored([[30, 10], [2, 0], [40, 12]])
    assert t.losses.tolist() == [8, 2] and t.results.tolist() == [40, 12]
    again = Tally.restored(t.saved())
    assert all(np.array_equal(x, y) for x, y in zip(again.saved(), t.saved(), strict=True))


def test_league_elo_ranks_the_beaten_member_below_the_learner():
    t = two_player([30, 10], [0, 0], [40, 40])
    elo = league_elo(t)
    assert elo[1] < elo[0] < elo[2]
    # 30-10 against member a: 400 log10(3) ~ 191 points, symmetric for b at 10-30.
    assert elo[0] - elo[1] == pytest.approx(191, abs=15)


def test_a_member_without_games_gets_no_elo():
    # The last snapshot joined at the end and never played.
    t = two_player([30, 0], [0, 0], [40, 0])
    elo = league_elo(t)
    assert np.isnan(elo[2]) and elo[0] - elo[1] == pytest.approx(191, abs=15)


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


@pytest.mark.parametrize(
    "kwargs,match",
    [
        ({"sampler": "elo"}, "unknown sampler 'elo'"),
        ({"meta_solver": "best"}, "unknown meta_solver"),
        ({"bots": ["random", "random"]}, "distinct"),
        ({"win_threshold": 1.5}, "less than or equal to 1"),
        ({"self_play": -0.1}, "greater than or equal to 0"),
        ({"seat_weights": [0, 0]}, r"seat_weights must be >= 0 and not all 0, got \[0.0, 0.0\]"),
        ({"seat_weights": [1, 2, 3]}, "seat_weights has 3 weights; kuhn_poker has 2 seats"),
    ],
)
def test_bad_league_settings_are_refused(kwargs, match):
    with pytest.raises(ValueError, match=match):
        league_cfg(**kwargs)


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
    from coplay.population.league import _add_snapshot, _League, uniform_sampler
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


def test_the_meta_samplers_nash_is_refused_for_a_general_sum_game():
    run = build_config(preset="kuhn-selfplay", overrides=[*TINY, "game.name=dilemma"])
    with pytest.raises(ValueError, match="meta_solver=nash needs a zero-sum game"):
        LeagueConfig(run=run, sampler="meta")
    assert LeagueConfig(run=run, sampler="pfsp").sampler == "pfsp"  # nash is not read


def test_the_meta_sampler_is_refused_for_a_game_that_is_not_two_player():
    # Its meta-game pairs two members: three-player Kuhn failed with an IndexError
    # traceback at the first snapshot, its run folder already written.
    run = build_config(preset="kuhn-selfplay", overrides=[*TINY, "game.params={players: 3}"])
    with pytest.raises(
        ValueError, match="sampler=meta needs a two-player game; 'kuhn_poker' has 3"
    ):
        LeagueConfig(run=run, sampler="meta")
    assert LeagueConfig(run=run, sampler="pfsp").sampler == "pfsp"


def test_a_league_refuses_a_single_player_game_before_writing(tmp_path):
    # Its snapshots had no one to play: every one stayed "not rated (no games)".
    run = build_config(preset="frozenlake", overrides=TINY)
    with pytest.raises(
        ValueError, match="a league needs a game of 2 or more players; 'frozen_lake' has 1"
    ):
        run_league(LeagueConfig(run=run, bots=["random"]), tmp_path / "league")
    assert not (tmp_path / "league").exists()
