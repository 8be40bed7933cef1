"""Cross-play's matches on an episode source: by policy id, any chunking, matching settings."""

import numpy as np
import pytest

from coplay.envs.gameref import GameRef
from coplay.eval.crossplay import cross_play
from coplay.policies.scripted import NashPolicy, RandomPolicy
from coplay.rollout.invalid import InvalidActionConfig
from coplay.rollout.source import LocalSource
from tests.eval.test_crossplay import Always

KUHN = GameRef("kuhn_poker")


def test_a_source_plays_the_matches_by_id_and_any_chunking_plays_the_same(monkeypatch):
    policies = {"random": RandomPolicy(1), "nash": NashPolicy("kuhn_poker", 2)}
    whole = cross_play("kuhn_poker", policies, episodes=60, seed=3, source=LocalSource(KUHN))
    monkeypatch.setattr("coplay.eval.crossplay_play.MAX_GAMES_PER_CALL", 7)
    told = []
    chunked = cross_play(
        "kuhn_poker",
        policies,
        episodes=60,
        seed=3,
        source=LocalSource(KUHN),
        on_progress=lambda done, total: told.append((done, total)),
    )
    # Each game draws from its own stream: plans of 7 games play the same games.
    np.testing.assert_array_equal(whole.payoff, chunked.payoff)
    np.testing.assert_array_equal(whole.wins, chunked.wins)
    assert told[:2] == [(7, 180), (14, 180)] and told[-1] == (180, 180)
    np.testing.assert_allclose(whole.payoff + whole.payoff.T, 0.0, atol=1e-12)
    assert whole.wins[0, 1] + whole.wins[1, 0] + whole.draws[0, 1] == 60


def test_distinct_policies_sharing_an_id_are_played_apart_by_a_source():
    bet, check = Always("[Bet]"), Always("[Pass]")
    bet.policy_id = check.policy_id = "learner"  # two checkpoints saved under one id
    res = cross_play(
        "kuhn_poker", {"bet": bet, "pass": check}, episodes=20, source=LocalSource(KUHN)
    )
    assert res.payoff[0, 1] == 1.0 and res.wins[0, 1] == 20  # as when their ids differ
    assert bet.policy_id == check.policy_id == "learner"  # played by renamed copies


def test_a_name_that_is_another_players_id_is_one_clear_error():
    a, b, c = RandomPolicy(0), RandomPolicy(1), NashPolicy("kuhn_poker")
    a.policy_id = b.policy_id = "learner"
    # a would play under its name, nash:kuhn_poker, which c plays under.
    policies = {"nash:kuhn_poker": a, "b": b, "c": c}
    with pytest.raises(ValueError, match="'nash:kuhn_poker' and 'c' would both play as"):
        cross_play("kuhn_poker", policies, episodes=2, source=LocalSource(KUHN))


@pytest.mark.parametrize(
    ("source", "message"),
    [
        (LocalSource(GameRef("leduc_poker")), "given a source that plays 'leduc_poker'"),
        (
            LocalSource(KUHN, invalid=InvalidActionConfig(retries=2)),
            "differs from its episode source's",
        ),
        (LocalSource(KUHN, max_turns=1), "max_turns=None, its episode source at 1"),
    ],
)
def test_a_source_of_another_game_or_treatment_is_refused(source, message):
    policies = {"a": RandomPolicy(), "b": NashPolicy("kuhn_poker")}
    with pytest.raises(ValueError, match=message):
        cross_play("kuhn_poker", policies, episodes=2, source=source)
