"""G-RA: hand values, loop reference, permutation and purity."""

import random
from functools import partial

import pytest
from builders import assert_close, assert_permutation_equivariant, random_reward_episodes
from builders import make_reward_episode as make_episode

from coplay.algos.advantages import make_estimator

random_episodes = partial(random_reward_episodes, values=[-1.0, -0.5, 0.0, 0.5, 1.0])


def reference(episodes, *, gate=1.0, gamma=1.0):
    returns = []
    for ep in episodes:
        ep_g = []
        for traj in ep.trajectories:
            n = len(traj.turns)
            o = traj.ret if traj.outcome is None else traj.outcome
            if o >= gate:
                g = [
                    sum(gamma ** (k - t) * traj.turns[k].reward for k in range(t, n))
                    for t in range(n)
                ]
            else:
                closed = o if traj.outcome is None else o + traj.shaping
                g = [gamma ** (n - 1 - t) * closed for t in range(n)]
            ep_g.append(g)
        returns.append(ep_g)
    out = []
    for ep, ep_g in zip(episodes, returns, strict=True):
        ep_out = []
        for s, seat_g in enumerate(ep_g):
            pool = [
                g
                for o, o_g in zip(episodes, returns, strict=True)
                if o.game == ep.game
                for g in o_g[s]
            ]
            b = sum(pool) / len(pool) if pool else 0.0
            ep_out.append([g - b for g in seat_g])
        out.append(ep_out)
    return out


def estimate(episodes, **params):
    est = make_estimator("gra", **params)
    return est.estimate(episodes, est.init())


def assert_batch_close(got, want):
    """Nested [episode][seat][turn] sequences equal within float tolerance."""
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        assert_close(g, w)


def test_hand_computed():
    eps = [
        make_episode([[1.0, 0.5]]),  # ret 1.5 >= 1: open, G = (1.5, 0.5)
        make_episode([[1.0, -1.0]]),  # ret 0 < 1: closed, G = (0, 0)
        make_episode([[0.5, -1.5]]),  # ret -1: closed, G = (-1, -1)
    ]
    out = estimate(eps)
    b = (1.5 + 0.5 + 0 + 0 - 1 - 1) / 6
    assert_batch_close(out.advantages, [[[1.5 - b, 0.5 - b]], [[-b, -b]], [[-1 - b, -1 - b]]])
    assert out.metrics["adv/baseline_seat0"] == pytest.approx(b)
    assert out.metrics["adv/gate_open_frac"] == pytest.approx(1 / 3)
    # gate -2 opens all three; gamma 0.5 discounts, closed ones only back from the end
    out = estimate(eps, gate=-2.0, gamma=0.5)
    g = [[1.25, 0.5], [0.5, -1.0], [-0.25, -1.5]]
    b = sum(sum(x) for x in g) / 6
    assert_batch_close(out.advantages, [[[x - b for x in seat]] for seat in g])
    out = estimate(eps, gate=5.0, gamma=0.5)
    g = [[0.75, 1.5], [0.0, 0.0], [-0.5, -1.0]]
    b = sum(sum(x) for x in g) / 6
    assert_batch_close(out.advantages, [[[x - b for x in seat]] for seat in g])


def test_an_outcome_that_reaches_the_gate_opens_it():
    # The paper accumulates when r_high >= Delta: a gate set at what success pays
    # (1) never opened, and every step reward was dropped.
    reached = with_outcome(make_episode([[0.3, 1.0]]), 1.0)
    failed = with_outcome(make_episode([[0.3, 0.0]]), 0.0)
    out = estimate([reached, failed], gate=1.0)
    assert out.metrics["adv/gate_open_frac"] == 0.5
    g = [[1.3, 1.0], [0.0, 0.0]]
    b = sum(sum(x) for x in g) / 4
    assert_batch_close(out.advantages, [[[x - b for x in seat]] for seat in g])
    assert estimate([reached, failed]).advantages == out.advantages  # the default gate


def with_outcome(episode, outcome):
    episode.trajectories[0].outcome = outcome
    return episode


def test_the_gate_reads_the_games_outcome_not_the_return():
    # A FrozenLake with dense rewards: progress pays on the way, the goal pays 1.
    failed = with_outcome(make_episode([[0.3, 0.3]]), 0.0)  # fell in a hole: ret 0.6
    reached = with_outcome(make_episode([[0.3, 1.3]]), 1.0)
    out = estimate([failed, reached])
    # Gated on the return, the failure's progress opened the gate: G = (0.6, 0.3).
    g = [[0.0, 0.0], [1.6, 1.3]]
    b = sum(sum(x) for x in g) / 4
    assert_batch_close(out.advantages, [[[x - b for x in seat]] for seat in g])
    assert out.metrics["adv/gate_open_frac"] == 0.5
    # Closed, only the outcome counts (not the return 0.6); a game without outcomes
    # counts its return.
    partial_goal = with_outcome(make_episode([[0.3, 0.3]]), 0.5)
    out = estimate([partial_goal, make_episode([[0.0, -1.0]])], gate=1.0)
    b = (0.5 + 0.5 - 1.0 - 1.0) / 4
    assert_batch_close(out.advantages, [[[0.5 - b, 0.5 - b]], [[-1.0 - b, -1.0 - b]]])


def test_a_failed_episodes_invalid_answers_are_still_punished():
    # A room not solved (outcome 0) whose second answer was invalid (a penalty of -0.5
    # among its turn rewards): the closed gate drops the step rewards, not the penalty.
    failed = with_outcome(make_episode([[0.0, -0.5]]), 0.0)
    failed.trajectories[0].shaping = -0.5
    clean = with_outcome(make_episode([[0.0, 0.0]]), 0.0)
    out = estimate([failed, clean], gamma=0.5)
    g = [[-0.25, -0.5], [0.0, 0.0]]
    b = sum(sum(x) for x in g) / 4
    assert_batch_close(out.advantages, [[[x - b for x in seat]] for seat in g])
    assert out.advantages[0][0][1] < out.advantages[1][0][1]


def test_without_an_outcome_the_closed_gate_counts_the_shaping_once():
    # The return already holds the penalty: a game without outcomes adds no shaping to
    # it (added, the -0.5 counted twice).
    penalised = make_episode([[0.0, -0.5]])
    penalised.trajectories[0].shaping = -0.5
    out = estimate([penalised, make_episode([[0.0, 0.0]])])
    assert_batch_close(out.advantages, [[[-0.25, -0.25]], [[0.25, 0.25]]])


def test_the_gate_open_share_counts_only_seats_that_acted():
    # Seat 1 never moved: it has no turn to credit, and no gate.
    out = estimate([make_episode([[1.0], []])])
    assert out.metrics["adv/gate_open_frac"] == 1.0


@pytest.mark.parametrize("params", [{}, {"gate": 0.5, "gamma": 0.9}, {"gate": -1.0}])
@pytest.mark.parametrize("seed", range(3))
def test_matches_loop_reference(seed, params):
    rng = random.Random(seed)
    eps = random_episodes(rng, 14, num_seats=3)
    for ep in eps[::2]:  # half the games give outcomes apart from their step rewards
        for traj in ep.trajectories:
            traj.outcome = rng.choice([0.0, 1.0])
            traj.shaping = rng.choice([0.0, -0.5])  # a penalty among the turn rewards
    got = estimate(eps, **params).advantages
    for g, w in zip(got, reference(eps, **params), strict=True):
        assert_close(g, w)


def test_permuting_episodes_permutes_advantages_and_leaves_inputs_alone():
    rng = random.Random(3)
    eps = random_episodes(rng, 12)
    assert_permutation_equivariant(lambda e: estimate(e, gamma=0.9), eps, rng)


def test_bad_gamma_is_named():
    with pytest.raises(ValueError, match="gamma"):
        make_estimator("gra", gamma=2.0)


def test_a_role_with_equal_returns_gets_exactly_zero():
    # Every game gives G = (0.1, 0.1): the mean of the six rounds to 0.09999999999999999
    # and left each turn an advantage of 1e-17, which the zero-advantage filter kept.
    out = estimate([make_episode([[0.0, 0.1]]) for _ in range(3)])
    assert out.advantages == (((0.0, 0.0),),) * 3
    assert out.metrics["adv/baseline_seat0"] == pytest.approx(0.1)
