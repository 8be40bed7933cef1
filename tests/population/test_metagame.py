"""Meta-games of a population (coplay.population.metagame)."""

import numpy as np
import pyspiel
import pytest
import torch
from open_spiel.python import policy as os_policy

from coplay.policies.scripted import RandomPolicy
from coplay.population.metagame import exact_payoffs, freeze, sampled_payoffs, solve
from coplay.train.settings import validate
from coplay.types import Observation


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
