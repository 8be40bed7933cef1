"""Meta-games of a population (coplay.population.metagame)."""

from contextlib import contextmanager

import numpy as np
import pyspiel
import pytest
import torch
from open_spiel.python import policy as os_policy

from coplay.envs.gameref import GameRef
from coplay.eval.crossplay import cross_play
from coplay.eval.exact import to_openspiel_policy
from coplay.eval.meta_solution import MetaSolution
from coplay.eval.metasolvers import solve_meta_game
from coplay.policies.scripted import NashPolicy, RandomPolicy, TablePolicy
from coplay.population import metagame
from coplay.population.metagame import (
    RECOMMENDATIONS,
    exact_best_response,
    exact_payoffs,
    freeze,
    meta_opponent,
    opponent_distributions,
    sampled_payoffs,
    solve,
    value_against,
)
from coplay.rollout.source import LocalSource
from coplay.train.settings import build_config, validate
from coplay.types import Observation

KUHN = GameRef("kuhn_poker")


def test_exact_payoffs_refuse_a_game_that_is_not_two_player():
    # A 3-player game raised an IndexError deep in OpenSpiel (two policies, three seats).
    game = pyspiel.load_game("kuhn_poker", {"players": 3})
    tables = [os_policy.UniformRandomPolicy(game)] * 2
    with pytest.raises(ValueError, match="2-player meta-games; 'kuhn_poker' has 3 players"):
        exact_payoffs(game, tables)


def test_a_frozen_copy_plays_in_the_learners_dtype(tiny_policy, tmp_path):
    # A bf16 learner's snapshot came back in float32 and played other probabilities.
    tiny_policy.model.to(torch.bfloat16)
    frozen = freeze(tiny_policy, tmp_path / "snap", "snap:1")
    assert frozen.model.dtype == torch.bfloat16
    obs = Observation("kuhn_poker", 0, "Your card: K.\n", ("[Pass]", "[Bet]"))
    assert frozen.action_probs([obs]) == tiny_policy.action_probs([obs])


def test_nash_falls_back_on_a_sampled_meta_game_that_strays_from_constant_sum():
    # Cross-play of a zero-sum game where both seats forfeited some rounds (both paid
    # the minimum): the sums range over [-0.31, -0.07], which nash's LP refuses.
    row = np.array([[-0.155, -0.38], [0.23, -0.035]])
    with pytest.warns(RuntimeWarning, match="meta-solver 'nash' failed, playing 'mwce'.*zero-sum"):
        meta = solve("nash", (row, row.T))
    assert meta.level == 1 and meta.failures[0].startswith("nash: nash needs a zero-sum")
    assert "use prd" not in meta.failures[0]  # the fallback already plays another solver
    assert meta.solution.joint.sum() == pytest.approx(1.0)


def test_sampled_payoffs_play_the_truncated_game_the_responses_train_on():
    # tic-tac-toe cut at two moves: no game is won, so every payoff is 0.
    cfg = validate({"game": {"name": "tic_tac_toe", "max_turns": 2}})
    members = [RandomPolicy(seed=1, policy_id="a"), RandomPolicy(seed=2, policy_id="b")]
    row, col = sampled_payoffs(members, cfg, episodes=40, seed=0)
    np.testing.assert_array_equal(row, np.zeros((2, 2)))
    np.testing.assert_array_equal(col, np.zeros((2, 2)))


def test_frozen_copy_ignores_later_training(tmp_path, tiny_policy):
    frozen = freeze(tiny_policy, tmp_path / "m", "psro:07")
    before = {k: v.clone() for k, v in frozen.model.state_dict().items()}
    with torch.no_grad():
        for p in tiny_policy.model.parameters():
            p.add_(1.0)
    assert frozen.policy_id == "psro:07"
    assert not any(p.requires_grad for p in frozen.model.parameters())
    for k, v in frozen.model.state_dict().items():
        torch.testing.assert_close(v, before[k])


def test_exact_payoffs_reuse_previous_entries_and_match_known_values():
    game = pyspiel.load_game("kuhn_poker")
    tables = [
        to_openspiel_policy(p, "kuhn_poker") for p in (RandomPolicy(), NashPolicy("kuhn_poker"))
    ]
    full = exact_payoffs(game, tables)
    grown = exact_payoffs(game, tables, exact_payoffs(game, tables[:1]))
    np.testing.assert_allclose(full, grown)
    # Nash in seat 0 against itself earns the game value -1/18.
    assert full[0][1, 1] == pytest.approx(-1 / 18, abs=2e-3)
    assert full[0][0, 0] == pytest.approx(1 / 8)  # uniform Kuhn favours seat 0 by 1/8
    # The Nash mixture over {random, nash} puts all weight on Nash for both seats.
    sol = solve_meta_game("nash", list(full))
    assert sol.marginals[0][1] == pytest.approx(1.0, abs=1e-6)


def test_sampled_payoffs_form_a_two_population_meta_game():
    cfg = build_config(preset="tictactoe-selfplay")
    members = [RandomPolicy(seed=0, policy_id="a"), RandomPolicy(seed=1, policy_id="b")]
    row, col = sampled_payoffs(members, cfg, episodes=20, seed=0)
    assert row.shape == (2, 2)
    np.testing.assert_allclose(col, row.T)


def test_sampled_payoffs_play_on_the_rollout_workers_of_the_run_config(monkeypatch):
    asked = []

    @contextmanager
    def workers(game, *, workers, ray, invalid, max_turns):  # stands in for Ray workers
        asked.append((game, workers, invalid, max_turns))
        yield LocalSource(game, invalid=invalid, max_turns=max_turns)

    monkeypatch.setattr(metagame, "evaluation_source", workers)
    cfg = build_config()
    cfg = cfg.model_copy(update={"rollout": cfg.rollout.model_copy(update={"workers": 2})})
    members = [RandomPolicy(seed=0, policy_id="a"), NashPolicy("kuhn_poker")]
    row, col = sampled_payoffs(members, cfg, episodes=30, seed=4)
    # The workers play the game the responses train on: its treatment and truncation.
    assert asked == [(GameRef("kuhn_poker"), 2, cfg.game.invalid, cfg.game.max_turns)]
    by_id = {m.policy_id: m for m in members}
    local = cross_play("kuhn_poker", by_id, episodes=30, seed=4, source=LocalSource(KUHN))
    np.testing.assert_array_equal(row, local.meta_game[0])
    np.testing.assert_array_equal(col, local.meta_game[1])


def test_opponents_face_the_other_players_marginal_or_conditional():
    joint = np.array([[0.5, 0.1], [0.0, 0.4]])
    sol = MetaSolution(marginals=(joint.sum(1), joint.sum(0)), joint=joint, correlated=True)
    seat0, seat1 = opponent_distributions(sol, conditional=False)
    np.testing.assert_allclose(seat0, [0.5, 0.5])  # player 1's marginal
    np.testing.assert_allclose(seat1, [0.6, 0.4])  # player 0's marginal
    # CE: player 0's most recommended strategy is 0 (0.6): row 0 renormalised.
    seat0, seat1 = opponent_distributions(sol, conditional=True)
    np.testing.assert_allclose(seat0, [5 / 6, 1 / 6])
    # player 1's most recommended is 0 or 1 (0.5 each); argmax takes 0: column 0.
    np.testing.assert_allclose(seat1, [1.0, 0.0])


def test_exact_best_response_beats_always_bet_by_one_third():
    game = pyspiel.load_game("kuhn_poker")
    bet = RandomPolicy()
    tab = to_openspiel_policy(bet, "kuhn_poker")
    tab.action_probability_array[:] = [0.0, 1.0]  # always bet / call
    table, value = exact_best_response(game, tab)
    assert value == pytest.approx(1 / 3)
    assert table["0b"] == {"[Pass]": 1.0, "[Bet]": 0.0}  # jack folds to a bet
    assert table["2b"] == {"[Pass]": 0.0, "[Bet]": 1.0}  # king calls
    player = TablePolicy(table, policy_id="br")
    assert to_openspiel_policy(player, "kuhn_poker").action_probability_array.sum() == 12


def test_meta_opponent_plays_each_seats_distribution():
    game = pyspiel.load_game("kuhn_poker")
    a = to_openspiel_policy(RandomPolicy(), "kuhn_poker")
    b = to_openspiel_policy(RandomPolicy(), "kuhn_poker")
    a.action_probability_array[:] = [1.0, 0.0]
    b.action_probability_array[:] = [0.0, 1.0]
    mix = meta_opponent(game, [a, b], (np.array([1.0, 0.0]), np.array([0.0, 1.0])))
    seat1 = game.new_initial_state().child(0).child(1).child(0)  # player 1 after a pass
    seat0 = game.new_initial_state().child(0).child(1)
    assert mix.action_probabilities(seat1) == {0: 1.0, 1: 0.0}  # learner in seat 0 faces a
    assert mix.action_probabilities(seat0) == {0: 0.0, 1: 1.0}  # learner in seat 1 faces b


def _correlated(joint):
    joint = np.asarray(joint, dtype=float)
    return MetaSolution(marginals=(joint.sum(1), joint.sum(0)), joint=joint, correlated=True)


def test_each_recommended_member_faces_the_joint_given_it_in_the_seats_that_recommend_it():
    # Member 0 is recommended in both seats, 1 in seat 0 only, 2 in seat 1 only, 3 in
    # neither but for a solver's rounding (1e-12), which recommends nothing.
    joint = np.array(
        [
            [0.2, 0.0, 0.1, 0.0],
            [0.1, 0.0, 0.3, 0.0],
            [0.0, 0.0, 0.0, 1e-12],
            [0.3, 0.0, 0.0, 0.0],
        ]
    )
    sol = _correlated(joint / joint.sum())
    recs = RECOMMENDATIONS["each"].pick(sol)
    assert [r.seats for r in recs] == [(0, 1), (0,), (1,), (0,)]
    # Told 0 in seat 0, the opponent in seat 1 plays row 0; in seat 1, column 0.
    np.testing.assert_allclose(recs[0].by_seat[0], [2 / 3, 0, 1 / 3, 0])
    np.testing.assert_allclose(recs[0].by_seat[1], [1 / 3, 1 / 6, 0, 1 / 2])
    np.testing.assert_allclose(recs[1].by_seat[0], [1 / 4, 0, 3 / 4, 0])
    np.testing.assert_allclose(recs[2].by_seat[1], [1 / 4, 3 / 4, 0, 0])
    np.testing.assert_allclose(recs[3].by_seat[0], [1, 0, 0, 0])
    # A seat that never recommends the member holds the opponent's marginal.
    np.testing.assert_array_equal(recs[1].by_seat[1], sol.marginals[0])
    np.testing.assert_array_equal(recs[2].by_seat[0], sol.marginals[1])


def test_a_product_joint_has_one_recommendation_its_marginals():
    # Every member's conditional is the other seat's marginal: one response answers all.
    m = np.array([0.25, 0.75])
    product = MetaSolution(marginals=(m, m), joint=np.outer(m, m), correlated=False)
    (rec,) = RECOMMENDATIONS["each"].pick(product)
    assert rec.seats == (0, 1)
    np.testing.assert_array_equal(rec.by_seat, (m, m))


def test_likeliest_is_the_conditional_given_each_seats_most_likely_member():
    sol = _correlated([[0.5, 0.1], [0.0, 0.4]])
    (rec,) = RECOMMENDATIONS["likeliest"].pick(sol)
    assert rec.seats == (0, 1)
    for got, want in zip(rec.by_seat, opponent_distributions(sol, conditional=True), strict=True):
        np.testing.assert_array_equal(got, want)


def test_values_are_means_over_the_seats_a_recommendation_names():
    # Against uniform random Kuhn a best response earns 1/2 in seat 0 and 5/12 in
    # seat 1 (their mean, 11/24, is its exploitability).
    game = pyspiel.load_game("kuhn_poker")
    uniform = to_openspiel_policy(RandomPolicy(), "kuhn_poker")
    table, value = exact_best_response(game, uniform, seats=(1,))
    assert value == pytest.approx(5 / 12)
    assert exact_best_response(game, uniform, seats=(0,))[1] == pytest.approx(1 / 2)
    assert exact_best_response(game, uniform)[1] == pytest.approx(11 / 24)
    # The table answers both seats whichever it is valued in.
    player = to_openspiel_policy(TablePolicy(table, policy_id="br"), "kuhn_poker")
    assert value_against(game, player, uniform, seats=(0,)) == pytest.approx(1 / 2)
    assert value_against(game, player, uniform, seats=(1,)) == pytest.approx(5 / 12)
    assert value_against(game, player, uniform) == pytest.approx(11 / 24)
