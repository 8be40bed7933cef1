"""Meta-games of a population (coplay.population.metagame)."""

import pyspiel
import pytest
import torch
from open_spiel.python import policy as os_policy

from coplay.population.metagame import exact_payoffs, freeze
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
