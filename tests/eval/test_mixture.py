"""Mixture policies: reach-weighted aggregation, exact exploitability, per-episode draws,
and the CCE and CE gaps of a joint distribution over profiles."""

import numpy as np
import pyspiel
import pytest
from open_spiel.python import policy as os_policy
from open_spiel.python.algorithms import expected_game_score
from open_spiel.python.algorithms import exploitability as os_exploitability
from open_spiel.python.algorithms.policy_aggregator import PolicyAggregator

from coplay.eval.exact import to_openspiel_policy
from coplay.eval.meta_openspiel import _openspiel_alpharank
from coplay.eval.mixture import (
    MixturePolicy,
    aggregate_tables,
    joint_cce_gap,
    joint_ce_gap,
    mixture_exploitability,
    seat_weights,
    seatings,
    tables_exploitability,
)
from coplay.policies.scripted import NashPolicy, RandomPolicy

PASS, BET = 0, 1


@pytest.fixture(scope="module")
def kuhn():
    return pyspiel.load_game("kuhn_poker")


def random_table(game, seed):
    tab = os_policy.TabularPolicy(game)
    rng = np.random.default_rng(seed)
    tab.action_probability_array[:] = rng.dirichlet([1.0, 1.0], size=len(tab.states))
    return tab


def opener(game, first: int, after_bet: int):
    """Player 0 opens with ``first`` and, after pass-bet, answers ``after_bet``."""
    tab = os_policy.TabularPolicy(game)
    for card in "012":
        tab.policy_for_key(card)[:] = np.eye(2)[first]
        tab.policy_for_key(card + "pb")[:] = np.eye(2)[after_bet]
    return tab


def test_hand_built_kuhn_reach_weighting_differs_from_naive_average(kuhn):
    # A always bets first, so never reaches "0pb"; B always passes and folds there.
    # Naive average at "0pb": call 0.5. Reach-weighted: only B gets there -> call 0.
    a, b = opener(kuhn, BET, BET), opener(kuhn, PASS, PASS)
    mix = aggregate_tables(kuhn, [a, b], [0.5, 0.5])
    assert mix.policy_for_key("0pb")[BET] == pytest.approx(0.0)
    naive = 0.5 * a.policy_for_key("0pb") + 0.5 * b.policy_for_key("0pb")
    assert naive[BET] == pytest.approx(0.5)
    # At the root both members get there, so the mixture is the plain average.
    np.testing.assert_allclose(mix.policy_for_key("1"), [0.5, 0.5])


def test_matches_openspiel_policy_aggregator(kuhn):
    tables = [random_table(kuhn, s) for s in range(3)]
    weights = [[0.2, 0.5, 0.3], [0.6, 0.1, 0.3]]
    ours = aggregate_tables(kuhn, tables, weights)
    theirs = PolicyAggregator(kuhn).aggregate([0, 1], [tables, tables], weights)
    for state in ours.states:
        p = state.current_player()
        want = theirs.policy[p][state.information_state_string(p)]
        np.testing.assert_allclose(
            ours.policy_for_key(state.information_state_string(p)),
            [want[a] for a in (PASS, BET)],
            atol=1e-9,
        )


def test_mixture_of_a_policy_with_itself_is_the_policy(kuhn):
    t = random_table(kuhn, 7)
    mix = aggregate_tables(kuhn, [t, t], [0.3, 0.7])
    np.testing.assert_allclose(mix.action_probability_array, t.action_probability_array)


def test_zero_weighted_members_leave_nash_unchanged(kuhn):
    nash = to_openspiel_policy(NashPolicy("kuhn_poker"), "kuhn_poker")
    other = opener(kuhn, BET, PASS)
    mix = aggregate_tables(kuhn, [nash, other], [1.0, 0.0])
    np.testing.assert_allclose(mix.action_probability_array, nash.action_probability_array)
    assert tables_exploitability(kuhn, [nash, other], [1.0, 0.0]).exploitability < 1e-3


def test_uniform_mixture_of_random_players_has_known_exploitability():
    members = [RandomPolicy(seed=0), RandomPolicy(seed=1)]
    res = mixture_exploitability(members, [0.5, 0.5], "kuhn_poker")
    assert res.exploitability == pytest.approx(11 / 24)
    assert res.nash_conv == pytest.approx(11 / 12)


@pytest.mark.parametrize(
    "weights,match",
    [
        ([1.0], "2 entries"),
        ([[1.0, 0.0]] * 3, "shape"),
        ([-1.0, 2.0], "non-negative"),
        ([0.0, 0.0], "positive weight"),
        ([1.0, float("nan")], "finite"),
        ([[1.0], [1.0, 2.0]], "ragged"),
    ],
)
def test_bad_weights_are_one_line_errors(weights, match):
    with pytest.raises(ValueError, match=match):
        seat_weights(weights, 2, 2)


def test_empty_mixture_is_refused(kuhn):
    with pytest.raises(ValueError, match="at least one member"):
        aggregate_tables(kuhn, [], [])


def test_mixture_policy_draws_one_member_per_episode_by_weight():
    a, b = RandomPolicy(policy_id="a"), RandomPolicy(policy_id="b")
    mix = MixturePolicy((a, b), (3.0, 1.0))
    draws = mix.draw(np.random.default_rng(0), 20_000)
    assert sum(d is a for d in draws) / 20_000 == pytest.approx(0.75, abs=0.015)
    seats = seatings([mix, MixturePolicy((b,), (1.0,))], 5, np.random.default_rng(0))
    assert len(seats) == 5 and all(s[1] is b and s[0] in (a, b) for s in seats)
    with pytest.raises(ValueError, match="non-negative"):
        MixturePolicy((a, b), (1.0, -1.0))


# --- the CCE gap of a joint -----------------------------------------------------------


def matrix_game(name, row, col):
    """A 2-player matrix game on OpenSpiel's turn-based transform (the second mover does
    not see the first move), with one pure-strategy table per action."""
    actions = [str(a) for a in range(len(row))]
    game = pyspiel.convert_to_turn_based(
        pyspiel.create_matrix_game(name, name, actions, actions, row, col)
    )
    pure = []
    for a in range(len(row)):
        tab = os_policy.TabularPolicy(game)
        tab.action_probability_array[:] = np.eye(len(row))[a]
        pure.append(tab)
    return game, pure


CHICKEN = matrix_game("chicken", [[0, 4], [1, 3]], [[0, 1], [4, 3]])
"""OpenSpiel's ``matrix_cd``: 0 dares, 1 chickens out."""
TRAFFIC_LIGHT = matrix_game("traffic_light", [[0, 0], [1, -10]], [[0, 1], [0, -10]])
"""0 stops, 1 goes: going pays 1 against a stop and -10 against a go."""


@pytest.mark.parametrize(
    "game,joint,value,marginals_nash_conv",
    [
        # The classic CE: 1/3 on each profile but mutual daring. Each player gets 8/3,
        # which always daring against the other's marginal (1/3 dare) only matches. The
        # product of the marginals (1/3, 2/3) gets 22/9, daring against it 8/3: 2/9 each.
        (CHICKEN, [[0, 1 / 3], [1 / 3, 1 / 3]], 8 / 3, 4 / 9),
        # The light: one goes, the other stops. Its marginals' product crashes 1/4 of
        # the time (value 1/4 - 10/4 = -9/4), where always stopping gets 0: 9/4 each.
        (TRAFFIC_LIGHT, [[0, 1 / 2], [1 / 2, 0]], 1 / 2, 9 / 2),
    ],
)
def test_a_correlated_equilibrium_has_no_gap_where_its_marginals_are_exploitable(
    game, joint, value, marginals_nash_conv
):
    game, pure = game
    gap = joint_cce_gap(game, pure, joint)
    assert gap.gap == pytest.approx(0.0, abs=1e-12)
    assert gap.per_player == pytest.approx((0.0, 0.0), abs=1e-12)
    assert gap.on_policy_values == pytest.approx((value, value))
    joint = np.asarray(joint)
    product = tables_exploitability(game, pure, [joint.sum(axis=1), joint.sum(axis=0)])
    assert product.nash_conv == pytest.approx(marginals_nash_conv)
    assert product.exploitability == pytest.approx(marginals_nash_conv / 2)


@pytest.mark.parametrize("gap_of", [joint_cce_gap, joint_ce_gap])
def test_a_joint_is_normalised_before_it_is_measured(gap_of):
    # The light with weight 1 on every profile is uniform play, worth -9/4 to each player.
    # CCE: always stopping gets 0. CE: told to go (half the time), stopping gains 9/2.
    game, pure = TRAFFIC_LIGHT
    gap = gap_of(game, pure, [[1.0, 1.0], [1.0, 1.0]])
    assert gap.per_player == pytest.approx((9 / 4, 9 / 4))


def test_a_joint_on_one_profile_has_that_profiles_nash_conv_as_its_gap(kuhn):
    # Seat 0 plays a, seat 1 plays b: the joint is the product of its marginals, and the
    # gap sums the players' gains as NashConv does: twice OpenSpiel's exploitability.
    a, b = random_table(kuhn, 1), random_table(kuhn, 2)
    gap = joint_cce_gap(kuhn, [a, b], [[0.0, 1.0], [0.0, 0.0]])
    profile = os_policy.merge_tabular_policies([a, b], kuhn)
    want = os_exploitability.nash_conv(kuhn, profile, return_only_nash_conv=False)
    assert gap.gap == pytest.approx(want.nash_conv)
    assert gap.per_player == pytest.approx(want.player_improvements)
    assert gap.gap / 2 == pytest.approx(os_exploitability.exploitability(kuhn, profile))
    # Uniform random Kuhn in both seats: NashConv 11/12 (exploitability 11/24).
    assert joint_cce_gap(kuhn, [os_policy.TabularPolicy(kuhn)], [[1.0]]).gap == pytest.approx(
        11 / 12
    )


def test_a_product_joint_has_its_marginals_nash_conv_as_its_gap(kuhn):
    tables = [random_table(kuhn, s) for s in range(3)]
    m0, m1 = np.array([0.2, 0.5, 0.3]), np.array([0.6, 0.1, 0.3])
    gap = joint_cce_gap(kuhn, tables, np.outer(m0, m1))
    assert gap.gap == pytest.approx(tables_exploitability(kuhn, tables, [m0, m1]).nash_conv)


def test_the_gap_is_openspiels_cce_distance_of_the_whole_joint(kuhn):
    # Reference: OpenSpiel's cce_dist over every profile at once (the deviator's own
    # recommendation included), against the per-player devices joint_cce_gap builds.
    tables = [random_table(kuhn, s) for s in range(3)]
    joint = np.random.default_rng(0).dirichlet(np.ones(9)).reshape(3, 3)
    device = [
        (joint[i, j], _pyspiel_profile(kuhn, tables[i], tables[j]))
        for i in range(3)
        for j in range(3)
    ]
    want = pyspiel.cce_dist(kuhn, device, prob_cut_threshold=0.0)
    gap = joint_cce_gap(kuhn, tables, joint)
    assert gap.gap == pytest.approx(want.dist_value)
    assert gap.per_player == pytest.approx(list(want.deviation_incentives))
    assert gap.on_policy_values == pytest.approx(list(want.on_policy_values))
    # The meta-game's payoffs, where a caller has them, give the same joint value.
    root = kuhn.new_initial_state()
    values = np.array(
        [[expected_game_score.policy_value(root, [a, b]) for b in tables] for a in tables]
    )  # (seat 0 member, seat 1 member, player)
    given = joint_cce_gap(kuhn, tables, joint, payoffs=list(np.moveaxis(values, -1, 0)))
    assert given.on_policy_values == pytest.approx(gap.on_policy_values)
    assert given.per_player == pytest.approx(gap.per_player)


def _pyspiel_profile(game, seat0, seat1):
    merged = os_policy.merge_tabular_policies([seat0, seat1], game)
    return os_policy.python_policy_to_pyspiel_policy(merged)


# --- the CE gap of a joint ------------------------------------------------------------

ROCK_PAPER_SCISSORS = matrix_game(
    "rock_paper_scissors",
    [[0, -1, 1], [1, 0, -1], [-1, 1, 0]],
    [[0, 1, -1], [-1, 0, 1], [1, -1, 0]],
)


@pytest.mark.parametrize(
    "game,joint",
    [(CHICKEN, [[0, 1 / 3], [1 / 3, 1 / 3]]), (TRAFFIC_LIGHT, [[0, 1 / 2], [1 / 2, 0]])],
)
def test_a_correlated_equilibrium_has_no_ce_gap(game, joint):
    # Chicken, told to dare: the other chickens out, daring gets 4 and chickening out 3.
    # Told to chicken out: the other dares or chickens alike, 2 either way. The light:
    # told to go, the other stops (1 against 0); told to stop, the other goes (0 vs -10).
    game, pure = game
    gap = joint_ce_gap(game, pure, joint)
    assert gap.gap == pytest.approx(0.0, abs=1e-12)
    np.testing.assert_allclose(gap.per_recommendation, np.zeros((2, 2)), atol=1e-12)


def test_a_coarse_correlated_equilibrium_need_not_be_a_correlated_one():
    # Both players told the same move, each move 1/3. Each marginal is uniform, against
    # which every fixed move gets 0, the joint's value (all ties): CCE gap 0. Told rock,
    # a player knows the other plays rock and paper wins 1: 1/3 per recommendation, 1 per
    # player, 2 in all.
    game, pure = ROCK_PAPER_SCISSORS
    joint = np.eye(3) / 3
    assert joint_cce_gap(game, pure, joint).per_player == pytest.approx((0.0, 0.0), abs=1e-12)
    gap = joint_ce_gap(game, pure, joint)
    assert gap.gap == pytest.approx(2.0)
    assert gap.per_player == pytest.approx((1.0, 1.0))
    np.testing.assert_allclose(gap.per_recommendation, np.full((2, 3), 1 / 3))


def test_a_member_never_recommended_has_no_ce_term():
    # The light on (stop, go) for sure: seat 0 is never told to go, seat 1 never to stop,
    # and neither gains by leaving what it is told (0 against -10, 1 against 0).
    game, pure = TRAFFIC_LIGHT
    gap = joint_ce_gap(game, pure, [[0.0, 1.0], [0.0, 0.0]])
    np.testing.assert_allclose(gap.per_recommendation, np.zeros((2, 2)), atol=1e-12)
    assert gap.gap == pytest.approx(0.0, abs=1e-12)


@pytest.mark.parametrize("players,seed", [(2, 0), (2, 1), (2, 2), (3, 3)])
def test_a_joints_ce_gap_is_at_least_its_cce_gap_per_player(players, seed):
    # A deviation that knows its recommendation can still play the best fixed one.
    game = pyspiel.load_game("kuhn_poker", {"players": players})
    tables = [random_table(game, seed + s) for s in range(3 if players == 2 else 2)]
    k = len(tables)
    joint = np.random.default_rng(seed).dirichlet(np.ones(k**players)).reshape((k,) * players)
    ce, cce = joint_ce_gap(game, tables, joint), joint_cce_gap(game, tables, joint)
    # Equal where one deviation is best against every recommendation's conditional.
    assert all(c >= cc - 1e-12 for c, cc in zip(ce.per_player, cce.per_player, strict=True))


def test_a_product_joints_ce_gap_is_its_best_responses_gain(kuhn):
    # Under m0 x m1 every recommendation r of seat 0 faces seat 1's marginal m1, whose
    # best response gets B0: r's term is m0[r] * (B0 - u0(r, m1)), and the terms add up
    # to B0 - u0(m0, m1), the mixture's gain in NashConv and the joint's CCE gap.
    tables = [random_table(kuhn, s) for s in range(3)]
    m0, m1 = np.array([0.2, 0.5, 0.3]), np.array([0.6, 0.1, 0.3])
    gap = joint_ce_gap(kuhn, tables, np.outer(m0, m1))
    values = seat_values(kuhn, tables)  # (player, seat 0 member, seat 1 member)
    mixture = tables_exploitability(kuhn, tables, [m0, m1])
    b0, b1 = mixture.best_response_values
    np.testing.assert_allclose(gap.per_recommendation[0], m0 * (b0 - values[0] @ m1))
    np.testing.assert_allclose(gap.per_recommendation[1], m1 * (b1 - m0 @ values[1]))
    gains = np.subtract(mixture.best_response_values, mixture.on_policy_values)
    assert gap.per_player == pytest.approx(tuple(gains))
    assert gap.per_player == pytest.approx(joint_cce_gap(kuhn, tables, np.outer(m0, m1)).per_player)
    assert gap.gap == pytest.approx(mixture.nash_conv)


def test_the_ce_gap_is_openspiels_jpsro_deviation_incentives(kuhn):
    # Reference: jpsro.find_best_response, target "ce", over every profile's joint policy.
    _openspiel_alpharank()  # jpsro imports α-rank, whose plotting module may be missing
    from open_spiel.python.algorithms import jpsro

    tables = [random_table(kuhn, s) for s in range(3)]
    joint = np.random.default_rng(1).dirichlet(np.ones(9)).reshape(3, 3)
    profiles = {
        (i, j): _pyspiel_profile(kuhn, tables[i], tables[j]) for i in range(3) for j in range(3)
    }
    values = seat_values(kuhn, tables)
    _, want = jpsro.find_best_response(kuhn, joint, values, 0, profiles, "ce", "all", -1.0)
    gap = joint_ce_gap(kuhn, tables, joint)
    np.testing.assert_allclose(gap.per_recommendation, want)
    assert gap.per_player == pytest.approx(np.sum(want, axis=1))
    # The meta-game's payoffs, where a caller has them, give the same gains.
    given = joint_ce_gap(kuhn, tables, joint, payoffs=list(values))
    np.testing.assert_allclose(given.per_recommendation, gap.per_recommendation)


def seat_values(game, tables):
    """Each player's exact return with member i in seat 0 and j in seat 1: ``[p, i, j]``."""
    root = game.new_initial_state()
    values = [[expected_game_score.policy_value(root, [a, b]) for b in tables] for a in tables]
    return np.moveaxis(np.array(values), -1, 0)


@pytest.mark.parametrize("gap_of", [joint_cce_gap, joint_ce_gap])
@pytest.mark.parametrize(
    "joint,payoffs,match",
    [
        ([0.5, 0.5], None, r"shape \(2, 2\), got \(2,\)"),
        ([[1.0, -0.5], [0.5, 0.0]], None, "non-negative"),
        ([[1.0, float("nan")], [0.0, 0.0]], None, "finite"),
        ([[0.0, 0.0], [0.0, 0.0]], None, "positive probability"),
        ([[1.0], [1.0, 0.0]], None, "ragged"),
        ([[1.0, 0.0], [0.0, 0.0]], [np.zeros((2, 2))], "one tensor of shape"),
    ],
)
def test_bad_joints_are_one_line_errors(kuhn, gap_of, joint, payoffs, match):
    tables = [random_table(kuhn, 0), random_table(kuhn, 1)]
    with pytest.raises(ValueError, match=match):
        gap_of(kuhn, tables, joint, payoffs=payoffs)
