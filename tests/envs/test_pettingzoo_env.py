"""PettingZoo -> coplay: a native PettingZoo game plays in coplay's engine."""

import importlib.util
import sys
from collections.abc import Sequence

import pytest

pettingzoo = pytest.importorskip("pettingzoo")

from coplay.envs import pettingzoo_env  # noqa: E402
from coplay.envs.pettingzoo_env import PettingZooEnv  # noqa: E402
from coplay.envs.registry import make_env  # noqa: E402
from coplay.policies.scripted import RandomPolicy  # noqa: E402
from coplay.rollout.engine import play_episodes  # noqa: E402
from coplay.types import Decision, Observation  # noqa: E402


class Moves:
    """Plays the given legal actions in order, one per observation."""

    def __init__(self, moves: Sequence[str]) -> None:
        self.moves, self.policy_id, self.version = list(moves), "moves", 0

    def act(self, observations: Sequence[Observation]) -> list[Decision]:
        return [
            Decision(text=m, action=m, policy_id=self.policy_id) for m in self._next(observations)
        ]

    def _next(self, observations):
        out, self.moves = self.moves[: len(observations)], self.moves[len(observations) :]
        return out


def test_missing_pettingzoo_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "pettingzoo", None)  # import now raises ImportError
    # the guard lives in the shared deps module: make the next import run it again
    monkeypatch.delitem(sys.modules, "coplay.envs.pettingzoo_deps")
    spec = importlib.util.spec_from_file_location("without_pettingzoo", pettingzoo_env.__file__)
    with pytest.raises(ImportError, match=r"pip install 'coplay\[pettingzoo\]'"):
        spec.loader.exec_module(importlib.util.module_from_spec(spec))


def render_tictactoe(agent: str, observation: dict) -> str:
    """PettingZoo's tic-tac-toe planes as a board; cells are numbered column by column."""
    planes = observation["observation"]  # (3, 3, 2): own marks, opponent's marks

    def cell(i: int) -> str:
        own, theirs = planes[i // 3, i % 3]
        return "x" if own else "o" if theirs else str(i)

    rows = [" ".join(cell(r + 3 * c) for c in range(3)) for r in range(3)]
    return f"Tic-tac-toe. You are {agent}; your marks are x.\n" + "\n".join(rows) + "\n"


@pytest.fixture
def tictactoe():
    pytest.importorskip("pygame", reason="PettingZoo's classic games import pygame")
    from pettingzoo.classic.tictactoe import tictactoe

    return lambda: PettingZooEnv(tictactoe.env, render_obs=render_tictactoe)


def test_native_tictactoe_scripted_win(tictactoe):
    # player_1 fills the left column (cells 0, 1, 2) while player_2 plays 3 and 4.
    seats = [Moves(["[0]", "[1]", "[2]"]), Moves(["[3]", "[4]"])]
    (episode,) = play_episodes(tictactoe, [seats], [0])
    assert episode.returns == (1.0, -1.0) and episode.num_steps == 5
    last = episode.turns[-1].observation
    assert last.text.endswith("x o 6\nx o 7\n2 5 8\n")
    assert last.legal_actions == ("[2]", "[5]", "[6]", "[7]", "[8]")


def test_native_tictactoe_random_play(tictactoe):
    seeds = list(range(40))
    seats = [[RandomPolicy(s), RandomPolicy(50 + s)] for s in seeds]
    for episode in play_episodes(tictactoe, seats, seeds):
        assert episode.returns in {(1.0, -1.0), (-1.0, 1.0), (0.0, 0.0)}
        assert 5 <= episode.num_steps <= 9 and not episode.truncated
        for turn in episode.turns:  # legal cells are exactly the empty ones shown
            empty = {
                f"[{c}]" for c in turn.observation.text.split("\n", 1)[1].split() if c.isdigit()
            }
            assert set(turn.observation.legal_actions) == empty


def test_observations_that_are_not_text_need_a_renderer(tictactoe):
    from pettingzoo.classic.tictactoe import tictactoe

    with pytest.raises(ValueError, match="pass render_obs"):
        PettingZooEnv(tictactoe.env).observe(0)
    same_name = PettingZooEnv(
        tictactoe.env, render_obs=render_tictactoe, action_name=lambda a, i: "x"
    )
    with pytest.raises(ValueError, match="action names of player_1 collide"):
        same_name.observe(0)
    with pytest.raises(ValueError, match="spec has 3 players but the environment has 2"):
        PettingZooEnv(tictactoe.env, spec=make_env("kuhn_poker", players=3).spec)
