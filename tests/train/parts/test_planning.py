"""Planning parts: exploration marks the learners, restarts replay lost positions."""

import json
import math

import numpy as np
import pytest

from coplay.envs.registry import make_env
from coplay.rollout.restarts import Start
from coplay.rollout.source import Batch, Plan
from coplay.train.checkpoints.safe_tree import load_tree, save_tree
from coplay.train.checkpoints.state import state_records
from coplay.train.loop import make_plan
from coplay.train.parts.planning import (
    Explore,
    ExploreConfig,
    ExploringStartsConfig,
    PlanContext,
    Restarts,
    RestartsConfig,
    RestartState,
    planning_parts,
)
from coplay.train.settings import build_config
from coplay.train.trainer import setup
from coplay.types import Opening
from tests.train.runs import RESTARTS, TINY, play


def context(group_size: int, seed: int = 0) -> PlanContext:
    return PlanContext(
        ("me",), make_env("tic_tac_toe").spec, group_size, np.random.default_rng(seed)
    )


def fresh_plan(groups: int, size: int) -> Plan:
    """``groups`` groups of ``size`` games, seeds (and group ids) 100, 101, ..."""
    seeds = [100 + g for g in range(groups) for _ in range(size)]
    return Plan(seatings=[("me", "bot")] * len(seeds), seeds=seeds)


def test_planning_parts_are_the_set_sections_in_registry_order():
    cfg = build_config(overrides=["rollout.restarts.share=0.5", "rollout.explore.share=0.1"])
    parts = planning_parts(cfg.rollout)
    assert list(parts) == ["explore", "restarts"]
    assert parts["restarts"].cfg.share == 0.5 and parts["explore"].cfg.share == 0.1
    assert planning_parts(build_config().rollout) == {}


def test_explore_marks_the_learners_and_leaves_the_games_alone():
    plan = Plan(seatings=[("me", "bot")] * 2, seeds=[1, 2], explore={"other": 0.2})
    out, state, metrics = Explore(ExploreConfig(share=0.5)).plan(None, plan, context(1))
    assert out.explore == {"other": 0.2, "me": 0.5}
    assert (out.seatings, out.seeds, out.openings) == (plan.seatings, plan.seeds, plan.openings)
    assert state is None and metrics == {}


def test_exploration_samples_the_learners_training_turns_only(tmp_path):
    over = [*TINY, "train.opponent=random", "rollout.explore.share=0.5"]
    run = setup(build_config(overrides=over), tmp_path)
    me = run.learner_ids[0]
    batch, _ = play(run, 1)
    mine = [
        t for e in batch.episodes for tr in e.trajectories if tr.policy_id == me for t in tr.turns
    ]
    bots = [
        t for e in batch.episodes for tr in e.trajectories if tr.policy_id != me for t in tr.turns
    ]
    assert mine and bots
    assert all(t.decision.behavior_logprobs is not None for t in mine)
    assert all(t.decision.behavior_logprobs[0] >= math.log(0.25) for t in mine)  # 0.5 / 2
    assert all(t.decision.behavior_logprobs is None for t in bots)
    assert run.trainees[0].policy.explore == 0.0  # evaluation samples the policy itself
    metrics = run.trainees[0].learn(batch.episodes, run.rng)  # explored turns train, capped
    assert 0.0 <= metrics["loss/tis_capped_frac"] <= 1.0


STARTS = [
    Start(seed=7, seat=1, prefix=(((0, "x(1,1)"),),), seats=("bot", "me")),
    Start(seed=9, seat=0, prefix=(), seats=("me", "bot")),
]


def test_restarts_replace_the_last_groups_by_whole_restarted_groups():
    part = Restarts(RestartsConfig(share=0.5))
    out, state, _ = part.plan(RestartState(list(STARTS)), fresh_plan(4, 2), context(2))
    assert out.seeds[:4] == (100, 100, 101, 101) and out.group_ids[:4] == out.seeds[:4]
    assert out.prefixes[:4] == ((),) * 4 and out.seatings[:4] == (("me", "bot"),) * 4
    assert state.restarted == 2 and state.buffer == STARTS
    assert out.group_ids[4:] == (102, 102, 103, 103)  # after the fresh groups' ids
    drawn = {out.seeds[4]: 4, out.seeds[6]: 6}
    assert sorted(drawn) == [7, 9]
    for start in STARTS:
        i = drawn[start.seed]
        for copy in (i, i + 1):  # both copies of a group replay one position
            assert out.seeds[copy] == start.seed and out.prefixes[copy] == start.prefix
            assert out.seatings[copy] == start.seats
    assert out.openings == (None,) * 8


def test_restarts_wait_for_lost_positions_and_round_the_share_down():
    part = Restarts(RestartsConfig(share=0.5))
    plan = fresh_plan(4, 2)
    out, state, _ = part.plan(part.init(), plan, context(2))
    assert out == plan and state.restarted == 0
    out, state, _ = part.plan(RestartState(list(STARTS)), fresh_plan(3, 2), context(2))
    assert state.restarted == 1 and out.group_ids == (100, 100, 101, 101, 102, 102)


def restarted_per_plan(share: float, groups: int, size: int, plans: int) -> list[int]:
    """Groups restarted in each of ``plans`` plans of ``groups`` groups, the state
    passed on through ``observe`` of an empty batch as the loop passes it."""
    part, ctx = Restarts(RestartsConfig(share=share)), context(size)
    state, out = RestartState(list(STARTS)), []
    for _ in range(plans):
        _, state, metrics = part.plan(state, fresh_plan(groups, size), ctx)
        state, _ = part.observe(state, Batch(episodes=(), versions={}, seconds=0.0), ctx)
        out.append(int(metrics["rollout/restart_groups"]))
    return out


def test_a_share_below_one_group_a_plan_adds_up_across_plans():
    # 8 games in groups of 4 at share 0.4: 0.8 of a group a plan, which rounding down
    # each plan on its own made 0 forever.
    assert restarted_per_plan(0.4, groups=2, size=4, plans=5) == [0, 1, 1, 1, 1]
    assert sum(restarted_per_plan(0.1, groups=3, size=2, plans=20)) == 6


def test_a_whole_share_of_groups_restarts_as_many_every_plan():
    # The bundled presets: half of 16 groups, 8 every plan, nothing carried.
    assert restarted_per_plan(0.5, groups=16, size=8, plans=4) == [8] * 4
    # 0.29 * 100 is 28.999999999999996 in floats: still 29 groups.
    assert restarted_per_plan(0.29, groups=100, size=2, plans=3) == [29] * 3


def test_a_restart_state_saved_before_the_carry_existed_loads_with_none(tmp_path):
    records = state_records()
    save_tree({"restarts": RestartState(list(STARTS), 1, 0.5)}, tmp_path, "run", records=records)
    doc = json.loads((tmp_path / "run.json").read_text())
    fields = doc["tree"]["restarts"]["$record"]["fields"]
    assert fields.pop("carry") == 0.5  # what an older run's state lacks
    (tmp_path / "run.json").write_text(json.dumps(doc))
    loaded = load_tree(tmp_path, "run", records=records)["restarts"]
    assert loaded == RestartState(list(STARTS), 1, 0.0)


def test_exploring_starts_assign_each_copy_the_next_legal_move():
    starts = ExploringStartsConfig()
    part = Restarts(RestartsConfig(share=0.5, exploring_starts=starts))
    out, _, _ = part.plan(RestartState(list(STARTS)), fresh_plan(2, 4), context(4))
    assert out.openings[:4] == (None,) * 4
    restarted = out.openings[4:]
    start = next(s for s in STARTS if s.seed == out.seeds[4])
    assert all(isinstance(o, Opening) and o.player == start.seat for o in restarted)
    assert [o.index - restarted[0].index for o in restarted] == [0, 1, 2, 3]


def test_restarts_replay_lost_positions_as_whole_groups(tmp_path):
    run = setup(build_config(overrides=RESTARTS), tmp_path)
    me = run.learner_ids[0]
    first, m1 = play(run, 1)  # nothing lost yet: all fresh games
    assert not any(e.prefix for e in first.episodes) and m1["rollout/restart_groups"] == 0
    lost = sum(e.returns[s] < 0 for e in first.episodes for s in range(2) if e.seats[s] == me)
    assert m1["rollout/restart_buffer"] == lost > 0  # the untrained model loses to perfect
    second, m2 = play(run, 2)
    assert m2["rollout/restart_groups"] == 2
    episodes = second.episodes
    restarted = episodes[8:]
    assert not any(e.prefix for e in episodes[:8]) and any(e.prefix for e in restarted)
    for group in (restarted[:4], restarted[4:]):
        assert len({(e.seed, e.prefix, e.group_id, e.seats.index(me)) for e in group}) == 1
        seat = group[0].seats.index(me)
        assert len(group[0].prefix) % 2 == seat  # the learner is to move at the restart
    assert len({e.group_id for e in episodes}) == 4
    assert "rollout/return_seat0" in m2  # from the fresh games only


@pytest.mark.parametrize("sources", ["fresh", "all"])
def test_restart_positions_come_from_the_configured_games(tmp_path, sources):
    over = [*RESTARTS, f"rollout.restarts.sources={sources}"]
    run = setup(build_config(overrides=over), tmp_path)
    me = run.learner_ids[0]
    play(run, 1)
    before = len(run.plan_states["restarts"].buffer)
    second, _ = play(run, 2)
    lost = [sum(e.returns[s] < 0 for s in range(2) if e.seats[s] == me) for e in second.episodes]
    fresh, restarted = sum(lost[:8]), sum(lost[8:])  # the first 8 games are fresh
    assert restarted > 0  # so the two settings differ
    after = len(run.plan_states["restarts"].buffer)
    assert after == before + fresh + (restarted if sources == "all" else 0)


def test_exploring_starts_give_each_copy_of_a_group_a_different_first_move(tmp_path):
    over = [*RESTARTS, "rollout.restarts.exploring_starts={}"]
    run = setup(build_config(overrides=over), tmp_path / "x")
    me = run.learner_ids[0]
    play(run, 1)
    games, _ = make_plan(run, 2)
    assert games.openings[:8] == (None,) * 8  # fresh games sample their moves
    for g in (games.openings[8:12], games.openings[12:]):
        assert [o.index - g[0].index for o in g] == [0, 1, 2, 3]
    second, _ = play(run, 3)
    for group in (second.episodes[8:12], second.episodes[12:]):
        seat = group[0].seats.index(me)
        opening = [e.trajectories[seat].turns[0] for e in group]
        k = len(opening[0].observation.legal_actions)
        assert len({t.played_action for t in opening}) == min(4, k)
        assert all(t.step == len(group[0].prefix) for t in opening)
        assert all(t.decision.behavior_logprobs is None for t in opening)
    plain = setup(build_config(overrides=RESTARTS), tmp_path / "y")
    play(plain, 1)
    assert make_plan(plain, 2)[0].openings == (None,) * 16


def test_the_target_memory_replays_earlier_targets_in_later_updates(tmp_path):
    target = "rollout.restarts.exploring_starts.target={coef: 1, memory: 1}"
    run = setup(build_config(overrides=[*RESTARTS, target]), tmp_path)
    trainee = run.trainees[0]
    memory = lambda: trainee.learner.terms["target"].memory  # noqa: E731
    seen, replayed = set(), []
    for it in range(1, 13):
        batch, _ = play(run, it)
        stored = len(memory())
        metrics = trainee.learn(batch.episodes, run.rng)
        replayed.append(metrics["loss/replayed_targets"])
        seen |= set(memory())
        assert len(memory()) <= 1 and all(s.replay for s in memory().values())
        assert metrics["loss/replayed_targets"] <= stored
    # Targets came, the newer replaced the older, and a stored one was replayed.
    assert len(seen) >= 2 and max(replayed) > 0
