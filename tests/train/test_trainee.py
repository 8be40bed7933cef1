"""A learner's side of the loop: advantages, sample filters, update and critic."""

import gc
import math
from collections import Counter
from types import SimpleNamespace

import pytest
import torch

from coplay.train import trainee as trainee_module
from coplay.train.learner_update import update
from coplay.train.parts.term import Sample
from coplay.train.settings import build_config
from coplay.train.trainee import filter_samples, informative_seats, learner_turns
from coplay.train.trainer import setup
from coplay.types import Decision, Episode
from tests.train.runs import TINY, iterate, play


def test_grpo_moves_the_policy_toward_above_average_play(tmp_path):
    # GRPO scores each return against its group's mean. One update must climb that
    # objective: the advantage-weighted change in the log-probability of the played
    # actions is positive (to first order, which a small step keeps).
    cfg = build_config(overrides=[*TINY, "algo.estimator=grpo", "rollout.group_size=4"])
    run = setup(cfg, tmp_path)
    trainee = run.trainees[0]
    me = trainee.policy
    episodes = play(run, 1)[0].episodes
    advantages = trainee.estimator.estimate(episodes, trainee.adv_state).advantages
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
    metrics = trainee.learn(episodes, run.rng)
    after = logps()
    assert metrics["adv/singleton_group_frac"] == 0.0
    assert any(adv != 0 for _, adv in played)
    climb = sum(adv * (b - a) for (_, adv), a, b in zip(played, before, after, strict=True))
    moved = sum(abs(adv * (b - a)) for (_, adv), a, b in zip(played, before, after, strict=True))
    assert climb > 0.1 * moved > 0
    assert trainee.critic is None  # a group baseline reads no values


def test_gae_trains_a_critic_on_the_learners_turns(tmp_path):
    run = setup(build_config(overrides=[*TINY, "algo.estimator=gae", "algo.params={}"]), tmp_path)
    trainee = run.trainees[0]
    assert trainee.critic is not None
    episodes = play(run, 1)[0].episodes
    metrics = trainee.learn(episodes, run.rng)
    assert metrics["critic/steps"] > 0 and "adv/explained_variance" in metrics
    assert all(t.value is not None for e in episodes for t in e.turns)  # filled before


def test_the_critics_rate_follows_the_policys_schedule(tmp_path):
    # The value model kept critic.lr through every update while the policy's rate
    # warmed up and decayed: a warm-up's first update, which moves no policy weight,
    # moved the critic at full rate.
    over = [*TINY, "algo.estimator=gae", "algo.params={}", "train.iterations=4"]
    sched = ["optim.lr_schedule=linear", "optim.final_lr_frac=0.5", "optim.warmup_updates=1"]
    cfg = build_config(overrides=[*over, *sched, "critic.lr=0.02"])
    run = setup(cfg, tmp_path)
    trainee = run.trainees[0]
    head = trainee.critic.model.head.weight
    moved, logged = [], []
    for it in range(3):
        before = head.detach().clone()
        logged.append(trainee.learn(play(run, it)[0].episodes, run.rng))
        moved.append(not torch.equal(head, before))
    assert moved == [False, True, True]
    # Warm-up at 0, then the decay from 1 to 0.5 over the 3 updates after it.
    assert [m["critic/lr"] / 0.02 for m in logged] == pytest.approx([0.0, 1.0, 0.75])
    assert [m["loss/lr"] / cfg.optim.lr for m in logged] == pytest.approx([0.0, 1.0, 0.75])


@pytest.mark.parametrize("saved_schedule", ["linear", "constant"])
def test_a_resumed_learner_trains_as_its_new_config_says(tmp_path, saved_schedule):
    # torch restores the saved lr, weight decay and base lrs: a run resumed with
    # optim.lr=0.1 went on at the old lr while its config.yaml said 0.1, and a longer
    # run took one step at the old schedule's last lr.
    over = [
        *TINY,
        "train.iterations=3",
        f"optim.lr_schedule={saved_schedule}",
        "algo.estimator=gae",
        "algo.params={}",
    ]
    run = setup(build_config(overrides=over), tmp_path / "saved")
    iterate(run, 1)
    saved = run.trainees[0].state()
    new = [
        *over,
        "optim.lr=0.1",
        "optim.weight_decay=0.5",
        "optim.lr_schedule=linear",
        "optim.final_lr_frac=0.1",
        "train.iterations=6",
        "critic.lr=0.02",
    ]
    trainee = setup(build_config(overrides=new), tmp_path / "resumed").trainees[0]
    trainee.load(saved, tmp_path)
    (group,) = trainee.learner.optimizer.param_groups
    # The linear decay over 6 updates, one done: 1 - 0.9 / 5 of the lr.
    assert group["lr"] == pytest.approx(0.1 * 0.82) and group["weight_decay"] == 0.5
    assert trainee.learner.scheduler.base_lrs == [0.1] and group["initial_lr"] == 0.1
    assert trainee.critic.optimizer.param_groups[0]["lr"] == 0.02
    moments = trainee.learner.optimizer.state_dict()["state"][0]["exp_avg"]
    assert torch.equal(moments, saved["optimizer"]["state"][0]["exp_avg"])  # still restored
    # Back to a constant lr: the saved schedule's base and step no longer apply.
    constant = build_config(overrides=[*over, "optim.lr_schedule=constant", "optim.lr=0.2"])
    trainee = setup(constant, tmp_path / "constant").trainees[0]
    trainee.load(saved, tmp_path)
    (group,) = trainee.learner.optimizer.param_groups
    assert group["lr"] == 0.2 and "initial_lr" not in group


def flat_share(episodes) -> float:
    """Share of (episode, seat) pairs whose group (game, group id, seat) has equal returns."""
    groups: dict = {}
    for e in episodes:
        for seat, ret in enumerate(e.returns):
            groups.setdefault((e.game, e.group_id, seat), []).append(ret)
    pairs = [(e.game, e.group_id, s) for e in episodes for s in range(len(e.returns))]
    return sum(min(groups[k]) == max(groups[k]) for k in pairs) / len(pairs)


def test_the_filters_drop_and_report_what_carries_no_signal(tmp_path):
    over = [
        *TINY,
        "algo.estimator=grpo",
        "rollout.group_size=2",
        "rollout.games_per_iter=16",
        "algo.filter_flat_groups=true",
        "algo.filter_zero_advantage=true",
    ]
    run = setup(build_config(overrides=over), tmp_path)
    episodes = play(run, 1)[0].episodes
    metrics = run.trainees[0].learn(episodes, run.rng)
    assert metrics["adv/flat_group_dropped_frac"] == pytest.approx(flat_share(episodes))
    assert 0.0 < flat_share(episodes) < 1.0  # some pairs of Kuhn games split, some not
    # in a group of two unequal returns neither is the mean: no advantage left is 0
    assert metrics["adv/zero_adv_dropped_frac"] == 0.0


def episode(group: int, returns: tuple[float, ...]) -> Episode:
    seats = tuple(f"p{s}" for s in range(len(returns)))
    return Episode("g", seed=group, group_id=group, seats=seats, trajectories=(), returns=returns)


def test_informative_seats_are_those_whose_group_returns_differ():
    episodes = [
        episode(0, (1.0, -1.0)),
        episode(0, (1.0, 1.0)),  # seat 0 of group 0 is flat, seat 1 is not
        episode(1, (2.0, 0.0)),  # a group of one: nothing to compare with
        episode(2, (0.0, 0.0)),
        episode(2, (1.0, 0.0)),
    ]
    assert informative_seats(episodes) == {(0, 1), (1, 1), (3, 0), (4, 0)}


def sample(advantage: float) -> Sample:
    dec = Decision(text="a", action="a", policy_id="me", prompt_ids=(1,), logprobs=(0.0,))
    return Sample(dec, advantage, 0)


def test_filter_samples_drops_zero_advantages_and_reports_both_filters():
    episodes = [episode(0, (1.0, -1.0)), episode(0, (1.0, 1.0))]
    samples = [sample(a) for a in (0.0, 1.0, 0.0, -2.0)]
    algo = SimpleNamespace(filter_zero_advantage=True)
    kept, metrics = filter_samples(algo, samples, {(0, 1), (1, 0)}, episodes, "p1")
    assert [s.advantage for s in kept] == [1.0, -2.0]
    assert metrics["adv/zero_adv_dropped_frac"] == 0.5
    assert metrics["adv/flat_group_dropped_frac"] == 0.5  # 1 of p1's 2 (episode, seat) pairs
    algo = SimpleNamespace(filter_zero_advantage=False)
    assert filter_samples(algo, samples, None, episodes, "p1") == (samples, {})


def test_the_flat_group_share_is_of_the_learners_own_trajectories():
    # The opponent's seat 0 is flat in both groups, the learner's seat 1 in neither:
    # the learner loses none of its samples (once this said 0.5, counting the opponent).
    episodes = [episode(0, (1.0, -1.0)), episode(0, (1.0, 1.0))]
    episodes += [episode(1, (0.0, 2.0)), episode(1, (0.0, 0.0))]
    keep = informative_seats(episodes)
    algo = SimpleNamespace(filter_zero_advantage=False)
    assert filter_samples(algo, [], keep, episodes, "p1")[1] == {"adv/flat_group_dropped_frac": 0.0}
    assert filter_samples(algo, [], keep, episodes, "p0")[1] == {"adv/flat_group_dropped_frac": 1.0}


def test_the_advantage_summary_is_of_the_learners_own_turns(tmp_path):
    # Against a random bot the estimate covers both seats; adv/* are logged as the
    # learner's, so they count its turns alone (once: 18 turns to its 9 decisions).
    run = setup(build_config(overrides=[*TINY, "train.opponent=random"]), tmp_path)
    me = run.learner_ids[0]
    episodes = play(run, 1)[0].episodes
    est = run.trainees[0].estimator.estimate(episodes, run.trainees[0].adv_state)
    mine = [
        a
        for ep, per_seat in zip(episodes, est.advantages, strict=True)
        for traj, advs in zip(ep.trajectories, per_seat, strict=True)
        if traj.policy_id == me
        for a in advs
    ]
    metrics = run.trainees[0].learn(episodes, run.rng)
    assert 0 < len(mine) < est.metrics["adv/num_turns"]  # the bot's turns are estimated too
    assert metrics["adv/num_turns"] == len(mine)
    assert metrics["adv/mean"] == pytest.approx(sum(mine) / len(mine))
    spread = math.sqrt(sum((a - metrics["adv/mean"]) ** 2 for a in mine) / len(mine))
    assert metrics["adv/std"] == pytest.approx(spread)


def test_the_zero_advantage_filter_keeps_samples_with_a_target():
    # A policy-iteration target pulls whatever the advantage; the memory replays no
    # position that has a fresh target, so dropping it would lose the pull.
    samples = [sample(0.0), sample(1.0), sample(0.0)]
    samples[0] = Sample(samples[0].decision, 0.0, 0, (1.0,))
    algo = SimpleNamespace(filter_zero_advantage=True)
    kept, metrics = filter_samples(algo, samples, None, [episode(0, (1.0, -1.0))], "p0")
    assert kept == samples[:2]
    assert metrics["adv/zero_adv_dropped_frac"] == pytest.approx(1 / 3)


def test_learner_turns_pair_the_learners_turns_with_their_targets(tmp_path):
    run = setup(build_config(overrides=[*TINY, "train.opponent=random"]), tmp_path)
    me = run.learner_ids[0]
    episodes = play(run, 1)[0].episodes
    # a target per turn that says where it came from: episode * 100 + seat * 10 + turn
    targets = [
        [
            [e * 100 + s * 10 + k for k in range(len(tr.turns))]
            for s, tr in enumerate(ep.trajectories)
        ]
        for e, ep in enumerate(episodes)
    ]
    turns, values = learner_turns(episodes, targets, me)
    expected = [
        (turn, e * 100 + s * 10 + k)
        for e, ep in enumerate(episodes)
        for s, tr in enumerate(ep.trajectories)
        if tr.policy_id == me
        for k, turn in enumerate(tr.turns)
    ]
    assert turns == [t for t, _ in expected] and values == [v for _, v in expected]
    assert 0 < len(turns) < sum(len(e.turns) for e in episodes)  # the random bot's are not


@pytest.mark.parametrize(
    "overrides",
    [
        [],
        ["algo.estimator=gae", "algo.params={}"],  # the critic's regression too
        ["model.mode=text", "model.max_new_tokens=4"],
    ],
    ids=["choice", "critic", "text"],
)
def test_an_update_pauses_the_collector_and_leaves_no_cycles(tmp_path, monkeypatch, overrides):
    # The collector is off while a learner updates; that frees nothing later than
    # before only because an update makes no reference cycles: a cycle holding
    # activations would stay alive until the update ended.
    run = setup(build_config(overrides=[*TINY, *overrides]), tmp_path)
    trainee = run.trainees[0]
    episodes = play(run, 1)[0].episodes
    seen = []

    def watched(*args, **kwargs):
        seen.append(gc.isenabled())
        return update(*args, **kwargs)

    monkeypatch.setattr(trainee_module, "update", watched)
    gc.collect()
    gc.set_debug(gc.DEBUG_SAVEALL)  # what a pass finds unreachable is kept to be named
    try:
        trainee.learn(episodes, run.rng)
        enabled_after = gc.isenabled()
        found = gc.collect()
        kinds = Counter(type(o).__name__ for o in gc.garbage)
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
    assert seen == [False] and enabled_after
    assert found == 0, kinds.most_common(5)


def test_a_learners_logged_baselines_are_its_own_seats_not_the_opponents(tmp_path):
    # Against a bot the learner sits in either seat. GRPO's baseline of a seat in a
    # group is that seat's mean return there: the learner logs the mean over its own
    # trajectories of that, per seat, and never the bot's.
    overrides = [*TINY, "train.opponent=random", "algo.estimator=grpo", "rollout.group_size=4"]
    run = setup(build_config(overrides=overrides), tmp_path)
    trainee = run.trainees[0]
    episodes = play(run, 1)[0].episodes
    groups: dict[tuple, list[float]] = {}
    for ep in episodes:
        for seat, traj in enumerate(ep.trajectories):
            groups.setdefault((ep.group_id, seat), []).append(traj.ret)
    own: dict[int, list[float]] = {}
    for ep in episodes:
        for seat, traj in enumerate(ep.trajectories):
            if traj.policy_id == trainee.name:
                rs = groups[(ep.group_id, seat)]
                own.setdefault(seat, []).append(sum(rs) / len(rs))
    assert sorted(own) == [0, 1]  # it sat in both
    metrics = trainee.learn(episodes, run.rng)
    logged = {k: v for k, v in metrics.items() if k.startswith("adv/baseline_seat")}
    expected = {f"adv/baseline_seat{s}": sum(bs) / len(bs) for s, bs in own.items()}
    assert logged == pytest.approx(expected)


def test_a_resume_with_an_estimator_of_another_state_starts_that_state_afresh(tmp_path):
    # A grpo run resumed as rae handed rae grpo's empty state, and the first update
    # failed with a traceback (EmptyState has no baselines to read).
    over = [*TINY, "rollout.group_size=2", "algo.estimator=grpo"]
    run = setup(build_config(overrides=over), tmp_path / "saved")
    iterate(run, 1)
    saved = run.trainees[0].state()
    resumed = setup(build_config(overrides=[*over, "algo.estimator=rae"]), tmp_path / "rae")
    trainee = resumed.trainees[0]
    with pytest.warns(UserWarning, match="algo.estimator 'rae' keeps \\(dict\\).*afresh"):
        trainee.load(saved, tmp_path)
    assert trainee.adv_state == {}
    iterate(resumed, 2)
    assert trainee.adv_state  # its baselines, from the first batch it trained on
    again = setup(build_config(overrides=[*over, "algo.estimator=rae"]), tmp_path / "again")
    again.trainees[0].load(trainee.state(), tmp_path)  # the same kind: kept, no warning
    assert again.trainees[0].adv_state == trainee.adv_state


def test_a_resume_that_adds_or_drops_the_value_model_says_so(tmp_path):
    # Switching algo.estimator to or from gae on resume built a fresh critic, or left
    # the saved one unused, without a word.
    grpo = [*TINY, "rollout.group_size=2", "algo.estimator=grpo"]
    gae = [*TINY, "rollout.group_size=2", "algo.estimator=gae"]
    without = setup(build_config(overrides=grpo), tmp_path / "grpo")
    iterate(without, 1)
    with_critic = setup(build_config(overrides=gae), tmp_path / "gae")
    iterate(with_critic, 1)
    fresh = setup(build_config(overrides=gae), tmp_path / "a").trainees[0]
    with pytest.warns(UserWarning, match="value model starts afresh: algo.estimator 'gae'"):
        fresh.load(without.trainees[0].state(), tmp_path)
    dropped = setup(build_config(overrides=grpo), tmp_path / "b").trainees[0]
    with pytest.warns(UserWarning, match="value model is not used: algo.estimator 'grpo'"):
        dropped.load(with_critic.trainees[0].state(), tmp_path)
