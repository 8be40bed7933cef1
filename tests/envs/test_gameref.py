"""Games named by config: a GameRef pickles and builds the same game anywhere."""

import pickle
from pathlib import Path

import pytest

from coplay.envs.gameref import GameRef
from coplay.envs.registry import UnknownGameError

ROOT = Path(__file__).resolve().parents[2]  # where examples/ lives


def first_moves(ref: GameRef, seed: int, steps: int = 4) -> list[str]:
    """The acting player's observation text after each of the first legal moves."""
    env = ref.make()
    env.reset(seed)
    texts = []
    for _ in range(steps):
        if env.is_terminal():
            break
        acting = env.players_to_act()
        obs = {p: env.observe(p) for p in acting}
        texts += [o.text for o in obs.values()]
        env.step({p: o.legal_actions[0] for p, o in obs.items()})
    return texts


@pytest.mark.parametrize(
    ("name", "params"),
    [
        ("kuhn_poker", {"players": 3}),
        ("frozen_lake", {"size": 3}),
        ("openspiel:matrix_pd", {}),
        ("examples.bidding:make", {}),
    ],
)
def test_a_pickled_ref_builds_the_same_game(monkeypatch, name, params):
    monkeypatch.chdir(ROOT)
    ref = GameRef(name, params)
    spec = ref.spec  # resolved and cached here; only the name and parameters cross
    copy = pickle.loads(pickle.dumps(ref))
    assert copy == ref and copy.__dict__ == {"name": name, "params": params}
    assert copy.spec == spec
    for seed in (0, 1, 5):
        assert first_moves(copy, seed) == first_moves(ref, seed)
        assert first_moves(copy, seed)  # the game was played, not skipped


def test_params_are_the_refs_own_and_each_make_is_a_fresh_env():
    params = {"players": 3}
    ref = GameRef("kuhn_poker", params)
    params["players"] = 4
    assert ref.params == {"players": 3} and ref.spec.num_players == 3
    assert ref.make() is not ref.make()


def test_an_unknown_game_fails_when_first_built_in_one_line():
    ref = GameRef("no_such_game")
    with pytest.raises(UnknownGameError, match="unknown game 'no_such_game'") as err:
        ref.make()
    assert "\n" not in str(err.value)
    with pytest.raises(ValueError, match="unknown parameter 'size' for game 'negotiation'"):
        GameRef("negotiation", {"size": 3}).make()
