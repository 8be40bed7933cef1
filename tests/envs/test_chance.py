"""Seeded chance draws: numpy's draws exactly, a clear error for a bad seed, and no
generator for a game that never meets a chance node."""

import numpy as np
import pytest

from coplay.envs import chance, make_env


@pytest.mark.parametrize("seed", [0, 7, 2**40 + 3])
def test_the_draws_are_those_of_a_fresh_generator_of_the_seed(seed):
    probs = [(0.5, 0.3, 0.2), (1 / 3,) * 3, (0.1, 0.9)]
    draws, rng = chance.ChanceDraws(seed), np.random.default_rng(seed)
    got = [draws.choose(probs[i % 3]) for i in range(30)]
    want = [int(rng.choice(len(probs[i % 3]), p=probs[i % 3])) for i in range(30)]
    assert got == want


@pytest.mark.parametrize("probs", [(1.5, -0.5), (float("nan"), 1.0), (0.0, 0.0)])
def test_what_numpy_would_not_draw_from_is_refused(probs):
    # The cumulative sum took (-1, 2) as a certain second outcome.
    with pytest.raises(ValueError, match=r"^chance probabilities \[.*\] are no distribution$"):
        chance.ChanceDraws(0).choose(probs)


@pytest.mark.parametrize("seed", [-1, 1.5, True, "3"])
def test_a_bad_seed_is_one_clear_error_at_reset(seed):
    with pytest.raises(ValueError, match="a seed must be a non-negative integer"):
        make_env("kuhn_poker").reset(seed)


@pytest.mark.parametrize("make", ["frozen_lake", "sokoban"])
def test_every_env_refuses_a_bad_seed_with_the_same_line(make):
    with pytest.raises(ValueError, match=f"^{make}: a seed must be a non-negative integer"):
        make_env(make).reset(True)


def test_a_numpy_integer_seed_is_a_plain_int():
    assert chance.check_seed(np.int64(5)) == 5 and type(chance.check_seed(np.int64(5))) is int


def test_a_game_without_chance_builds_no_generator():
    seed = 987_654_321
    env = make_env("tic_tac_toe")
    env.reset(seed)
    while not env.is_terminal():
        (p,) = env.players_to_act()
        env.step({p: env.observe(p).legal_actions[0]})
    assert seed not in chance._STREAMS
    make_env("kuhn_poker").reset(seed)  # a deal draws from it
    assert seed in chance._STREAMS


def test_the_kept_seeds_and_distributions_stay_bounded(monkeypatch):
    monkeypatch.setattr(chance, "_KEPT", 4)
    monkeypatch.setattr(chance, "_STREAMS", {})
    monkeypatch.setattr(chance, "_CDFS", {})
    for seed in range(10):
        chance.ChanceDraws(seed).choose((0.5, 0.5 - seed / 100, seed / 100))
        assert len(chance._STREAMS) <= 4 and len(chance._CDFS) <= 4
    # a forgotten seed is rebuilt: the same draws as a fresh generator's
    assert chance.ChanceDraws(0).choose((0.2, 0.8)) == np.random.default_rng(0).choice(
        2, p=(0.2, 0.8)
    )
