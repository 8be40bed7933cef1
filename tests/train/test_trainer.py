"""Trainer pieces: seatings, rollout metrics, one full iteration, determinism."""

import json
import math

import pytest

from coplay.envs.registry import make_env
from coplay.policies.scripted import RandomPolicy
from coplay.rollout.engine import play_episodes
from coplay.train.config import ConfigError, build_config
from coplay.train.trainer import (
    collect,
    evaluate,
    group_metrics,
    group_seats,
    learn,
    plan,
    rollout_metrics,
    seatings,
    selfplay_metrics,
    setup,
    train,
    wants_exact,
)

TINY = [
    "train.iterations=2",
    "train.eval_every=2",
    "train.eval_episodes=10",
    "train.eval_opponents=[]",
    "rollout.games_per_iter=8",
    "model.tiny.hidden_size=32",
    "model.tiny.intermediate_size=64",
]


def test_self_play_fills_every_seat_and_fixed_opponent_rotates(tmp_path):
    run = setup(build_config(overrides=TINY), tmp_path / "a")
    me = run.learner.policy
    assert all(s == [me, me] for s in seatings(run, 4))
    run = setup(build_config(overrides=[*TINY, "train.opponent=random"]), tmp_path / "b")
    me = run.learner.policy
    rows = seatings(run, 4)
    assert [row.index(me) for row in rows] == [0, 1, 0, 1]


def test_seat_weights_split_the_groups_between_seats(tmp_path):
    over = [*TINY, "train.opponent=random", "train.seat_weights=[1, 3]", "rollout.group_size=2"]
    run = setup(build_config(overrides=over), tmp_path)
    me = run.learner.policy
    rows = seatings(run, 16)
    seats = [row.index(me) for row in rows]
    assert seats[::2] == seats[1::2]  # a group keeps its seat
    assert seats[::2] == [1, 0, 1, 1, 1, 0, 1, 1]
    assert all(row.count(me) == 1 for row in rows)


def test_group_seats_interleave_in_proportion():
    assert group_seats(6, 2, None) == [0, 1, 0, 1, 0, 1]
    assert group_seats(6, 2, [1.0, 1.0]) == [0, 1, 0, 1, 0, 1]
    assert group_seats(3, 3, [0.0, 0.0, 2.0]) == [2, 2, 2]
    seats = group_seats(100, 3, [1.0, 2.0, 7.0])
    assert [seats.count(s) for s in range(3)] == [10, 20, 70]
    # every prefix stays within one group of its share
    for k in range(1, 101):
        assert abs(seats[:k].count(2) - 0.7 * k) < 1


def test_seat_weights_bad_input(tmp_path):
    with pytest.raises(ConfigError, match="seat_weights"):
        build_config(overrides=[*TINY, "train.opponent=random", "train.seat_weights=[0, 0]"])
    with pytest.raises(ConfigError, match="seat_weights"):
        build_config(overrides=[*TINY, "train.opponent=random", "train.seat_weights=[-1, 2]"])
    cfg = build_config(overrides=[*TINY, "train.opponent=random", "train.seat_weights=[1, 2, 3]"])
    with pytest.raises(ValueError, match="3 weights; kuhn_poker has 2 seats"):
        setup(cfg, tmp_path / "a")
    run = setup(build_config(overrides=[*TINY, "train.seat_weights=[1, 1]"]), tmp_path / "b")
    with pytest.raises(ValueError, match="in self-play the learner fills every seat"):
        seatings(run, 4)


def test_rollout_metrics_report_only_the_learners_seats():
    learner, other = RandomPolicy(seed=0, policy_id="learner"), RandomPolicy(seed=1)
    eps = play_episodes(
        lambda: make_env("kuhn_poker"), [[learner, other], [other, learner]], [0, 1]
    )
    m = rollout_metrics(eps, "learner", seconds=1.0)
    assert m["rollout/return_seat0"] == eps[0].returns[0]
    assert m["rollout/return_seat1"] == eps[1].returns[1]
    assert m["rollout/invalid_rate"] == 0.0


def test_same_seed_gives_the_same_run(tmp_path):
    rows = []
    for name in ("a", "b"):
        train(build_config(overrides=TINY), tmp_path / name)
        lines = (tmp_path / name / "metrics.jsonl").read_text().splitlines()
        rows.append(
            [{k: v for k, v in json.loads(x).items() if not k.startswith("perf/")} for x in lines]
        )
    assert rows[0] == rows[1]


def test_grpo_moves_the_policy_toward_above_average_play(tmp_path):
    # GRPO scores each return against its group's mean. One update must climb that
    # objective: the advantage-weighted change in the log-probability of the played
    # actions is positive (to first order, which a small step keeps).
    cfg = build_config(overrides=[*TINY, "algo.estimator=grpo", "rollout.group_size=4"])
    run = setup(cfg, tmp_path)
    me = run.learner.policy
    episodes, _ = collect(run, 1)
    advantages = run.estimator.estimate(episodes, run.adv_state).advantages
    played = [
        (turn, adv)
        for ep, per_seat in zip(episodes, advantages, strict=True)
        for traj, advs in zip(ep.trajectories, per_seat, strict=True)
        if traj.policy_id == me.policy_id
        for turn, adv in zip(traj.turns, advs, strict=True)
    ]

    def logps() -> list[float]:
        probs = me.action_probs([t.observation for t, _ in played])
        return [math.log(p[t.played_action]) for (t, _), p in zip(played, probs, strict=True)]

    before = logps()
    metrics = learn(run, episodes)
    after = logps()
    assert metrics["adv/singleton_group_frac"] == 0.0
    assert any(adv != 0 for _, adv in played)
    climb = sum(adv * (b - a) for (_, adv), a, b in zip(played, before, after, strict=True))
    moved = sum(abs(adv * (b - a)) for (_, adv), a, b in zip(played, before, after, strict=True))
    assert climb > 0.1 * moved > 0
    # Groups of one give GRPO no baseline: every advantage would be 0.
    with pytest.raises(ConfigError, match="group_size >= 2"):
        build_config(overrides=[*TINY, "algo.estimator=grpo"])


@pytest.mark.parametrize(
    "extra",
    [
        [],
        ["model.mode=text", "model.max_new_tokens=3", "game.invalid.on_fail=penalty"],
        ["algo.estimator=gae", "algo.params={}", "critic.clip=0.2"],
        ["loss.entropy={coef: 0.1, final_frac: 0.1}"],  # the schedule resumes too
        ["rollout.restart_share=0.5", "rollout.group_size=2"],  # the restart buffer too
        [
            "rollout.restart_share=0.5",
            "rollout.group_size=2",
            "rollout.restart_explore=true",  # assigned first moves draw from the saved rng
            "rollout.restart_target={coef: 1, memory: 64}",  # and the memory of targets is saved
        ],
    ],
)
def test_resume_equals_uninterrupted(tmp_path, extra):
    import torch

    from coplay.models.loading import load_policy

    over = [
        *TINY,
        "train.iterations=3",
        "train.eval_every=1",
        "train.save_every=0",
        "loss.kl.coef=0.1",
        "reference.ema=0.1",
        "optim.lr_schedule=linear",
        "train.eval_opponents=[random]",
        *extra,
    ]
    cfg = build_config(overrides=over)
    train(cfg, tmp_path / "whole")
    train(cfg, tmp_path / "split", stop_after=2)
    # Pretend the interrupted job had logged a row past its saved state.
    with (tmp_path / "split" / "metrics.jsonl").open("a") as f:
        f.write(json.dumps({"iteration": 3, "junk": 1}) + "\n")
    train(cfg, tmp_path / "split", resume=True)

    def rows(name):
        lines = (tmp_path / name / "metrics.jsonl").read_text().splitlines()
        return [
            {k: v for k, v in json.loads(x).items() if not k.startswith("perf/")} for x in lines
        ]

    assert rows("whole") == rows("split")
    a, b = load_policy(tmp_path / "whole"), load_policy(tmp_path / "split")
    for p, q in zip(a.model.parameters(), b.model.parameters(), strict=True):
        assert torch.equal(p, q)


def test_resume_without_state_is_a_clear_error(tmp_path):
    with pytest.raises(FileNotFoundError, match="no saved state"):
        train(build_config(overrides=TINY), tmp_path / "empty", resume=True)


def test_group_metrics_spread_and_flat_share():
    learner = RandomPolicy(seed=0, policy_id="learner")
    eps = play_episodes(lambda: make_env("kuhn_poker"), [[learner, learner]] * 4, [0, 0, 1, 1])
    # Force known returns: group 0 flat (1, 1), group 1 spread (2, -2) on seat 0.
    for e, r in zip(eps, [1.0, 1.0, 2.0, -2.0], strict=True):
        e.returns = (r, -r)
    m = group_metrics(eps, "learner")
    assert m["rollout/flat_group_frac"] == pytest.approx(0.5)
    assert m["rollout/group_return_std"] == pytest.approx((0 + 0 + 2 + 2) / 4)
    assert group_metrics(eps[:1], "learner") == {}


def test_gae_trains_a_critic_and_filters_report(tmp_path):
    over = [
        *TINY,
        "algo.estimator=grpo",
        "algo.params={}",
        "rollout.group_size=4",
        "algo.filter_flat_groups=true",
        "algo.filter_zero_advantage=true",
    ]
    train(build_config(overrides=over), tmp_path / "f")
    row = json.loads((tmp_path / "f" / "metrics.jsonl").read_text().splitlines()[1])
    assert 0.0 <= row["adv/flat_group_dropped_frac"] <= 1.0
    assert "adv/zero_adv_dropped_frac" in row
    assert "rollout/group_return_std" in row
    train(build_config(overrides=[*TINY, "algo.estimator=gae", "algo.params={}"]), tmp_path / "g")
    row = json.loads((tmp_path / "g" / "metrics.jsonl").read_text().splitlines()[-1])
    assert row["critic/steps"] > 0 and "adv/explained_variance" in row


def test_selfplay_metrics_welfare_is_zero_in_a_zero_sum_game(tmp_path):
    run = setup(build_config(overrides=TINY), tmp_path / "w")
    m = selfplay_metrics(run)
    assert m["eval/selfplay/welfare"] == pytest.approx(0.0, abs=1e-12)
    assert m["eval/selfplay/return_seat0"] == pytest.approx(-m["eval/selfplay/return_seat1"])


def test_pool_seats_the_learner_against_drawn_members(tmp_path):
    from coplay.population.opponents import OpponentPool

    run = setup(build_config(overrides=TINY), tmp_path / "p")
    me, bot = run.learner.policy, RandomPolicy(seed=0, policy_id="bot")
    run.pool = OpponentPool([bot], self_play=0.0)
    rows = seatings(run, 4)
    assert rows == [[me, bot], [bot, me], [me, bot], [bot, me]]
    run.pool = OpponentPool([bot], self_play=1.0)
    assert seatings(run, 2) == [[me, me], [me, me]]


RESTARTS = [
    *TINY,
    "game.name=tic_tac_toe",
    "train.opponent=perfect",
    "rollout.games_per_iter=16",
    "rollout.group_size=4",
    "rollout.restart_share=0.5",
    "algo.estimator=grpo",
]
"""Tic-tac-toe against the perfect player, 4 groups of 4, half of them restarted."""


def test_restarts_replay_lost_positions_as_whole_groups(tmp_path):
    run = setup(build_config(overrides=RESTARTS), tmp_path / "r")
    me = run.learner.policy.policy_id
    first, m1 = collect(run, 1)  # nothing lost yet: all fresh games
    assert not any(e.prefix for e in first) and m1["rollout/restart_groups"] == 0
    lost = sum(e.returns[s] < 0 for e in first for s in range(2) if e.seats[s] == me)
    assert m1["rollout/restart_buffer"] == lost > 0  # the untrained model loses to perfect
    second, m2 = collect(run, 2)
    assert m2["rollout/restart_groups"] == 2
    restarted = second[8:]
    assert not any(e.prefix for e in second[:8]) and any(e.prefix for e in restarted)
    for group in (restarted[:4], restarted[4:]):
        assert len({(e.seed, e.prefix, e.group_id, e.seats.index(me)) for e in group}) == 1
        seat = group[0].seats.index(me)
        assert len(group[0].prefix) % 2 == seat  # the learner is to move at the restart
    assert len({e.group_id for e in second}) == 4
    assert "rollout/return_seat0" in m2  # from the fresh games only


@pytest.mark.parametrize("sources", ["fresh", "all"])
def test_restart_positions_come_from_the_configured_games(tmp_path, sources):
    run = setup(
        build_config(overrides=[*RESTARTS, f"rollout.restart_sources={sources}"]), tmp_path / "s"
    )
    me = run.learner.policy.policy_id
    collect(run, 1)
    before = len(run.restarts)
    second, _ = collect(run, 2)
    lost = [sum(e.returns[s] < 0 for s in range(2) if e.seats[s] == me) for e in second]
    fresh, restarted = sum(lost[:8]), sum(lost[8:])  # the first 8 games are fresh
    assert restarted > 0  # so the two settings differ
    assert len(run.restarts) == before + fresh + (restarted if sources == "all" else 0)


def test_the_target_memory_replays_earlier_targets_in_later_updates(tmp_path):
    over = [
        *RESTARTS,
        "rollout.restart_explore=true",
        "rollout.restart_target={coef: 1, memory: 1}",
    ]
    run = setup(build_config(overrides=over), tmp_path / "m")
    memory = lambda: run.learner.terms["target"].memory  # noqa: E731
    seen, replayed = set(), []
    for it in range(1, 7):
        episodes, _ = collect(run, it)
        stored = len(memory())
        metrics = learn(run, episodes)
        replayed.append(metrics["loss/replayed_targets"])
        seen |= set(memory())
        assert len(memory()) <= 1 and all(s.replay for s in memory().values())
        assert metrics["loss/replayed_targets"] <= stored
    # Targets came, the newer replaced the older, and a stored one was replayed.
    assert len(seen) >= 2 and max(replayed) > 0


def test_restart_explore_gives_each_copy_of_a_group_a_different_first_move(tmp_path):
    run = setup(build_config(overrides=[*RESTARTS, "rollout.restart_explore=true"]), tmp_path / "x")
    me = run.learner.policy.policy_id
    first, _ = collect(run, 1)
    games = plan(run, 2)
    assert games.openings[:8] == [None] * 8  # fresh games sample their moves
    for g in (games.openings[8:12], games.openings[12:]):
        assert [o.index - g[0].index for o in g] == [0, 1, 2, 3]
    second, _ = collect(run, 3)
    for group in (second[8:12], second[12:]):
        seat = group[0].seats.index(me)
        opening = [e.trajectories[seat].turns[0] for e in group]
        k = len(opening[0].observation.legal_actions)
        assert len({t.played_action for t in opening}) == min(4, k)
        assert all(t.step == len(group[0].prefix) for t in opening)
        assert all(t.decision.behavior_logprobs is None for t in opening)
    plain = setup(build_config(overrides=RESTARTS), tmp_path / "y")
    collect(plain, 1)
    assert plan(plain, 2).openings == [None] * 16


def test_restarts_need_a_fixed_opponent_or_self_play(tmp_path):
    from coplay.population.opponents import OpponentPool

    run = setup(build_config(overrides=[*TINY, "rollout.restart_share=0.5"]), tmp_path / "p")
    run.pool = OpponentPool([RandomPolicy(seed=0, policy_id="bot")], self_play=0.0)
    with pytest.raises(ValueError, match="restart_share is not supported with a league or PSRO"):
        collect(run, 1)


def test_final_policy_magnet_is_saved_and_evaluated(tmp_path):
    import torch

    from coplay.models.loading import load_policy
    from coplay.train.checkpoints.safe_tree import load_tree
    from coplay.train.checkpoints.state import STATE_RECORDS

    over = [*TINY, "loss.kl.coef=0.1", "reference.ema=0.5", "train.final_policy=magnet"]
    summary = train(build_config(overrides=over), tmp_path / "m")
    row = json.loads((tmp_path / "m" / "metrics.jsonl").read_text().splitlines()[-1])
    assert row["eval/exploitability"] == summary["final/eval/exploitability"]
    assert "eval/learner/exploitability" in row
    blob = load_tree(tmp_path / "m" / "state", "trainer", records=STATE_RECORDS)
    saved = load_policy(tmp_path / "m").model.state_dict()
    magnet = blob["terms"]["kl"]["weights"]
    assert all(torch.equal(saved[k], v) for k, v in magnet.items())


def test_final_policy_magnet_needs_a_magnet():
    from coplay.train.config import ConfigError

    with pytest.raises(ConfigError, match="needs a magnet"):
        build_config(overrides=[*TINY, "loss.kl=null", "train.final_policy=magnet"])


def test_learner_keeps_its_seat_and_opponent_within_a_group(tmp_path):
    from coplay.population.opponents import OpponentPool

    run = setup(build_config(overrides=[*TINY, "rollout.group_size=4"]), tmp_path / "g")
    me = run.learner.policy
    bots = [RandomPolicy(seed=i, policy_id=f"bot{i}") for i in range(5)]
    run.pool = OpponentPool(bots)
    rows = seatings(run, 16)
    for g in range(4):
        group = rows[4 * g : 4 * g + 4]
        assert all(row.index(me) == g % 2 for row in group)
        assert len({row[1 - g % 2].policy_id for row in group}) == 1


def test_a_users_own_game_trains_by_module_path(tmp_path):
    over = [*TINY, "game.name=examples.bidding:make", "rollout.group_size=1"]
    summary = train(build_config(overrides=over), tmp_path / "own")
    assert summary["game"] == "examples.bidding:make"
    rows = (tmp_path / "own" / "metrics.jsonl").read_text().splitlines()
    assert len(rows) == 3  # the initial evaluation and two iterations


def test_an_unknown_module_game_is_a_config_error():
    from coplay.train.config import ConfigError

    with pytest.raises(ConfigError, match="no_such_pkg"):
        build_config(overrides=[*TINY, "game.name=no_such_pkg.mod:make"])


@pytest.mark.parametrize(
    ("game", "mode", "expected"),
    [
        ("kuhn_poker", "auto", True),
        ("kuhn_poker", "off", False),
        ("tic_tac_toe", "auto", False),  # perfect information: matches, not exploitability
        ("openspiel:liars_dice", "auto", False),  # 294,883 histories: over the auto limit
        ("openspiel:liars_dice", "on", True),
    ],
)
def test_exact_evaluation_follows_train_exact(game, mode, expected):
    cfg = build_config(overrides=[f"game.name={game}", f"train.exact={mode}"])
    assert wants_exact(cfg, make_env(game).spec) is expected


def test_exact_on_for_a_game_without_it_is_a_clear_error():
    cfg = build_config(overrides=["game.name=tic_tac_toe", "train.exact=on"])
    with pytest.raises(ValueError, match="train.exact=on needs an imperfect-information"):
        wants_exact(cfg, make_env("tic_tac_toe").spec)


@pytest.fixture(scope="module")
def tic_tac_toe_eval(tmp_path_factory) -> dict:
    """The evaluation of a tiny tic-tac-toe run with an averaged final policy after two
    updates. Each exact match against the perfect player walks the whole game tree, so
    the two tests share one, and the iterations run by hand (``train`` would evaluate
    the initial policy too)."""
    over = [
        *TINY,
        "game.name=tic_tac_toe",
        "train.eval_opponents=[random, perfect]",
        "loss.kl=null",
        "reference.ema=0.5",
        "train.final_policy=magnet",
    ]
    run = setup(build_config(overrides=over), tmp_path_factory.mktemp("tic_tac_toe"))
    for it in (1, 2):
        episodes, _ = collect(run, it)
        learn(run, episodes)
    return evaluate(run, 2)


def test_tic_tac_toe_evaluation_adds_exact_matches_against_the_perfect_player(tic_tac_toe_eval):
    row = tic_tac_toe_eval
    for seat in (0, 1):
        assert 0.0 <= row[f"eval/perfect/exact_loss_seat{seat}"] <= 1.0
        assert 0.0 <= row[f"eval/perfect/greedy_loss_seat{seat}"] <= 1.0
        assert row[f"eval/perfect/exact_win_seat{seat}"] == 0.0  # nobody beats perfect play
        assert f"eval/random/exact_loss_seat{seat}" not in row  # auto: optimal bots only
    # a barely trained model plays nearly uniformly: the second seat loses almost always
    assert row["eval/perfect/exact_loss_seat1"] > 0.8


def test_an_averaged_final_policy_is_matched_exactly_beside_the_learner(tic_tac_toe_eval):
    row = tic_tac_toe_eval
    for seat in (0, 1):
        mine, learner = (
            row[f"{p}perfect/exact_loss_seat{seat}"] for p in ("eval/", "eval/learner/")
        )
        assert 0.0 <= mine <= 1.0 and 0.0 <= learner <= 1.0
    # two updates apart, the average and the last iterate are different policies
    assert row["eval/perfect/exact_return_seat0"] != row["eval/learner/perfect/exact_return_seat0"]
    assert "eval/learner/random/win" not in row  # sampled matches: the final policy only


def test_exploration_marks_the_learners_training_turns_only(tmp_path):
    over = [*TINY, "rollout.explore=0.5", "rollout.tis_cap=1.0"]
    run = setup(build_config(overrides=over), tmp_path)
    episodes, _ = collect(run, 1)
    turns = [t for e in episodes for t in e.turns]
    assert turns and all(t.decision.behavior_logprobs is not None for t in turns)
    assert all(t.decision.behavior_logprobs[0] >= math.log(0.25) for t in turns)  # 0.5 / 2
    assert run.learner.policy.explore == 0.0  # evaluation samples the policy itself
    train(build_config(overrides=over), tmp_path / "run")


@pytest.mark.parametrize(
    "over,match",
    [
        (["rollout.explore=0.1"], "set rollout.tis_cap"),
        (
            ["rollout.explore=0.1", "rollout.tis_cap=1", "model.mode=text"],
            "needs model.mode=choice",
        ),
        (["rollout.explore=1.0", "rollout.tis_cap=1"], "less than 1"),
        (
            ["rollout.explore=0.1", "rollout.tis_cap=1", "rollout.explore_correction=none"],
            "leave rollout.tis_cap unset",
        ),
        (["rollout.explore=0.1", "rollout.explore_correction=maybe"], "explore_correction"),
    ],
)
def test_exploration_bad_config(over, match):
    with pytest.raises(ConfigError, match=match):
        build_config(overrides=[*TINY, *over])
