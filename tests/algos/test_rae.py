"""RAE (SPIRAL): hand values, loop reference over several batches, state purity."""

import random

import pytest
from builders import as_lists, assert_close, make_episode, random_episodes

from coplay.algos.advantages import make_estimator


def reference(episodes, state, *, alpha, before, update):
    """Plain loops over the paper's recursion; returns (advantages, new state)."""
    state = dict(state)
    out = []
    if update == "per_trajectory":
        for ep in episodes:
            ep_out = []
            for s, traj in enumerate(ep.trajectories):
                key = (ep.game, s, ep.seats[s])
                old = state.get(key, 0.0)
                state[key] = alpha * old + (1 - alpha) * traj.ret
                b = state[key] if before else old
                ep_out.append([traj.ret - b] * len(traj.turns))
            out.append(ep_out)
        return out, state
    old_state = dict(state)
    keys = {(ep.game, s, ep.seats[s]) for ep in episodes for s in range(len(ep.trajectories))}
    for key in keys:
        rs = [
            ep.trajectories[key[1]].ret
            for ep in episodes
            if (ep.game, ep.seats[key[1]]) == (key[0], key[2])
        ]
        state[key] = alpha * old_state.get(key, 0.0) + (1 - alpha) * sum(rs) / len(rs)
    for ep in episodes:
        ep_out = []
        for s, traj in enumerate(ep.trajectories):
            b = (state if before else old_state).get((ep.game, s, ep.seats[s]), 0.0)
            ep_out.append([traj.ret - b] * len(traj.turns))
        out.append(ep_out)
    return out, state


def test_hand_computed_batch_mean():
    eps = [make_episode([1.0, -1.0]), make_episode([0.0, 0.0])]
    est = make_estimator("rae", alpha=0.5)
    out = est.estimate(eps, est.init())
    # seat 0: b = 0.5 * 0 + 0.5 * mean(1, 0) = 0.25, then A = R - 0.25
    assert as_lists(out.advantages)[0][0] == pytest.approx([0.75])
    assert as_lists(out.advantages)[1][0] == pytest.approx([-0.25])
    assert out.state == {("g", 0, "pol0"): 0.25, ("g", 1, "pol1"): -0.25}
    # second batch starts from the carried baseline
    out2 = est.estimate([make_episode([1.0, 1.0])], out.state)
    assert out2.state[("g", 0, "pol0")] == pytest.approx(0.625)
    assert out2.advantages[0][0] == pytest.approx((0.375,))
    assert out2.metrics["adv/role_baseline/g/seat0"] == pytest.approx(0.625)


def test_the_default_alpha_is_spirals():
    # alpha = 0.95 (ALGORITHMS.md): from 0 the baseline moves 5% of the way to the
    # batch mean, and the default reads it after that update.
    est = make_estimator("rae")
    out = est.estimate([make_episode([1.0, -1.0]), make_episode([0.0, 0.0])], est.init())
    assert out.state[("g", 0, "pol0")] == pytest.approx(0.025)
    assert out.advantages[0][0] == pytest.approx((0.975,))
    assert out.advantages[1][1] == pytest.approx((0.025,))


def test_hand_computed_before_and_after_update():
    eps = [make_episode([1.0, -1.0]), make_episode([0.0, 0.0])]
    after = make_estimator("rae", alpha=0.5, update_before_advantage=False)
    # A state saved with per-seat keys still gives each seat's baseline.
    out = after.estimate(eps, {("g", 0): 0.5})
    assert out.advantages[0][0] == pytest.approx((0.5,))  # 1 - old baseline 0.5
    assert out.state[("g", 0, "pol0")] == pytest.approx(0.5)  # 0.5*0.5 + 0.5*0.5
    per_traj = make_estimator("rae", alpha=0.5, update="per_trajectory")
    out = per_traj.estimate(eps, per_traj.init())
    # b: 0 -> 0.5 (after R=1) -> 0.25 (after R=0)
    assert out.advantages[0][0] == pytest.approx((0.5,))
    assert out.advantages[1][0] == pytest.approx((-0.25,))


@pytest.mark.parametrize("update", ["batch_mean", "per_trajectory"])
@pytest.mark.parametrize("before", [True, False])
def test_matches_loop_reference_over_batches(update, before):
    rng = random.Random(5)
    est = make_estimator("rae", alpha=0.8, update_before_advantage=before, update=update)
    state, ref_state = est.init(), {}
    for _ in range(4):
        eps = random_episodes(rng, 9)
        out = est.estimate(eps, state)
        want, ref_state = reference(eps, ref_state, alpha=0.8, before=before, update=update)
        for g, w in zip(as_lists(out.advantages), want, strict=True):
            for gs, ws in zip(g, w, strict=True):
                assert gs == pytest.approx(ws)
        assert out.state == pytest.approx(ref_state)
        state = out.state


def test_state_is_not_mutated():
    est = make_estimator("rae")
    state = {("g", 0): 0.3, ("g", 1): -0.3}
    snapshot = dict(state)
    out = est.estimate(random_episodes(random.Random(1), 6), state)
    assert state == snapshot
    assert out.state is not state
    assert out.state != snapshot


def test_batch_mean_is_permutation_invariant_and_per_trajectory_is_not():
    rng = random.Random(2)
    eps = random_episodes(rng, 10)
    perm = list(range(10))
    rng.shuffle(perm)
    shuffled = [eps[i] for i in perm]
    est = make_estimator("rae")
    base, permuted = est.estimate(eps, {}), est.estimate(shuffled, {})
    for j, i in enumerate(perm):
        assert_close(permuted.advantages[j], base.advantages[i])
    assert permuted.state == pytest.approx(base.state)
    # the literal recursion depends on order: this is why batch_mean is the default
    literal = make_estimator("rae", update="per_trajectory")
    a, b = literal.estimate(eps, {}), literal.estimate(shuffled, {})
    assert any(b.advantages[j] != a.advantages[i] for j, i in enumerate(perm))


@pytest.mark.parametrize("params", [{"alpha": 1.0}, {"alpha": -0.1}, {"update": "sometimes"}])
def test_bad_values_are_named(params):
    with pytest.raises(ValueError, match=next(iter(params))):
        make_estimator("rae", **params)
