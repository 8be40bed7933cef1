"""PettingZoo -> coplay: a native PettingZoo game plays in coplay's engine, with return
bounds that are given, never guessed (a reward_range bounds one step)."""

import importlib.util
import sys
from collections.abc import Callable, Sequence
from functools import partial

import numpy as np
import pytest

pettingzoo = pytest.importorskip("pettingzoo")

from coplay.envs import pettingzoo_env, registry  # noqa: E402
from coplay.envs.pettingzoo_adapter import to_pettingzoo  # noqa: E402
from coplay.envs.pettingzoo_env import PettingZooEnv  # noqa: E402
from coplay.envs.registry import make_env  # noqa: E402
from coplay.policies.scripted import RandomPolicy  # noqa: E402
from coplay.rollout.engine import play_episodes  # noqa: E402
from coplay.types import Decision, Observation  # noqa: E402


class Moves:
    """Plays the given legal actions in order, one per observation; None names no
    legal action (the engine's forfeit)."""

    def __init__(self, moves: Sequence[str | None]) -> None:
        self.moves, self.policy_id, self.version = list(moves), "moves", 0

    def act(self, observations: Sequence[Observation]) -> list[Decision]:
        return [
            Decision(text=m or "no move", action=m, policy_id=self.policy_id)
            for m in self._next(observations)
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

    return lambda: PettingZooEnv(
        tictactoe.env, render_obs=render_tictactoe, min_return=-1, max_return=1
    )


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
        PettingZooEnv(tictactoe.env, min_return=-1, max_return=1).observe(0)
    same_name = PettingZooEnv(
        tictactoe.env,
        render_obs=render_tictactoe,
        action_name=lambda a, i: "x",
        min_return=-1,
        max_return=1,
    )
    with pytest.raises(ValueError, match="action names of player_1 collide"):
        same_name.observe(0)
    with pytest.raises(ValueError, match="spec has 3 players but the environment has 2"):
        PettingZooEnv(tictactoe.env, spec=make_env("kuhn_poker", players=3).spec)


# --- return bounds ---------------------------------------------------------------------


class HighStakes(pettingzoo.AECEnv):
    """Foreign to coplay: player_0 names the winner ([0] or [1]), who takes 3 from the
    other. Text observations; ``reward_range`` only when given."""

    metadata = {"name": "high_stakes"}

    def __init__(self, reward_range: object = None) -> None:
        super().__init__()
        self.possible_agents = ["player_0", "player_1"]
        if reward_range is not None:
            self.reward_range = reward_range

    def observation_space(self, agent):
        return pettingzoo_env.gymnasium.spaces.Text(64)

    def action_space(self, agent):
        return pettingzoo_env.Discrete(2)

    def observe(self, agent):
        return f"{agent}: player_0 names the winner."

    def reset(self, seed=None, options=None):
        self.agents = list(self.possible_agents)
        self.rewards = dict.fromkeys(self.agents, 0.0)
        self._cumulative_rewards = dict.fromkeys(self.agents, 0.0)
        self.terminations = dict.fromkeys(self.agents, False)
        self.truncations = dict.fromkeys(self.agents, False)
        self.infos = {a: {} for a in self.agents}
        self.agent_selection = "player_0"

    def step(self, action):
        if self.terminations[self.agent_selection]:
            self._was_dead_step(action)
            return
        winner = self.possible_agents[int(action)]
        self.rewards = {a: 3.0 if a == winner else -3.0 for a in self.agents}
        self.terminations = dict.fromkeys(self.agents, True)
        self._accumulate_rewards()


def test_a_foreign_game_without_bounds_is_refused_in_one_line():
    # The spec said [-1, 1]: a forfeit paid -1 where losing pays -3, so giving up won.
    with pytest.raises(ValueError) as err:
        PettingZooEnv(HighStakes)
    message = str(err.value)
    assert "\n" not in message and "pettingzoo:high_stakes has no known return bounds" in message
    assert "pass min_return=... and max_return=... to PettingZooEnv" in message
    with pytest.raises(ValueError, match="has no known return bounds"):
        PettingZooEnv(lambda: HighStakes(reward_range=(-float("inf"), float("inf"))))


def test_a_forfeit_pays_the_bounds_given_and_never_beats_losing():
    make = partial(PettingZooEnv, HighStakes, min_return=-3, max_return=3)
    assert (make().spec.min_return, make().spec.max_return) == (-3.0, 3.0)
    (lost,) = play_episodes(make, [[Moves(["[1]"]), Moves([])]], [0])
    (forfeited,) = play_episodes(make, [[Moves([None]), Moves([])]], [0])
    assert lost.returns == (-3.0, 3.0)
    assert forfeited.forfeited_by == 0 and forfeited.returns == (-3.0, 0.0)  # general-sum


def test_a_step_after_the_end_is_one_line():
    env = PettingZooEnv(lambda: to_pettingzoo("dilemma", talk=False, rounds=1))
    env.step({0: "[Defect]"})
    env.step({1: "[Defect]"})
    # Nobody is to act, so {} passed the players check and failed to unpack no player.
    with pytest.raises(ValueError, match=r"^dilemma: the game is over; call reset\(seed\)"):
        env.step({})


def test_the_bounds_are_game_parameters_of_a_registered_game(monkeypatch):
    # How a run's game.params reach a foreign game: make_env(name, **params).
    monkeypatch.setattr(registry, "_GAMES", dict(registry._GAMES))
    registry.register_game("high_stakes", partial(PettingZooEnv, HighStakes), "a foreign game")
    env = make_env("high_stakes", min_return=-3, max_return=3)
    assert (env.spec.min_return, env.spec.max_return) == (-3.0, 3.0)
    with pytest.raises(ValueError, match="pass min_return=... and max_return=..."):
        make_env("high_stakes")


class Tally(HighStakes):
    """Three rounds; each move pays its mover +``step`` ([1]) or -``step`` ([0]) in that
    step, as ``reward`` makes a number. ``reward_range`` as Gym means it: one step's."""

    metadata = {"name": "tally"}

    def __init__(self, step: float = 1.0, reward: Callable[[float], object] = float) -> None:
        super().__init__(reward_range=(-step, step))
        self.step_size, self.reward = step, reward

    def reset(self, seed=None, options=None):
        super().reset(seed, options)
        self.moves = 0

    def step(self, action):
        if self.terminations[self.agent_selection]:
            self._was_dead_step(action)
            return
        paid = self.step_size if int(action) else -self.step_size
        self.rewards = {
            a: self.reward(paid if a == self.agent_selection else 0.0) for a in self.agents
        }
        self.moves += 1
        self.terminations = dict.fromkeys(self.agents, self.moves == 6)
        self.agent_selection = self.possible_agents[self.moves % 2]
        self._accumulate_rewards()


def test_a_per_step_reward_range_is_not_read_as_return_bounds():
    # Read as bounds, Tally's (-1, 1) was taken, and play stopped at the end of the
    # first game a player won twice in: its return of 2 or 3 is no step's reward.
    with pytest.raises(ValueError, match="no known return bounds.*bounds one step's reward"):
        PettingZooEnv(Tally)
    make = partial(PettingZooEnv, Tally, min_return=-3, max_return=3)
    (won,) = play_episodes(make, [[Moves(["[1]"] * 3), Moves(["[0]"] * 3)]], [0])
    assert won.returns == (3.0, -3.0)


def test_float32_rewards_end_on_their_bounds():
    # Three float32 thirds make 1.0000000298: past max_return 1 by more than 1e-9, it
    # was called an end outside the bounds.
    thirds = partial(Tally, 1 / 3, np.float32)
    env = PettingZooEnv(thirds, min_return=-1, max_return=1)
    for _ in range(6):
        env.step({env.players_to_act()[0]: "[1]"})
    assert env.returns() == pytest.approx([1.0, 1.0])


def test_bounds_may_be_numpy_numbers():
    # Bounds worked out with numpy were refused as "not a finite number".
    env = PettingZooEnv(HighStakes, min_return=np.int64(-3), max_return=np.float32(3))
    assert (env.spec.min_return, env.spec.max_return) == (-3.0, 3.0)
    assert type(env.spec.min_return) is type(env.spec.max_return) is float


def test_an_end_outside_the_bounds_is_an_error():
    env = PettingZooEnv(HighStakes, min_return=-1, max_return=1)
    with pytest.raises(
        ValueError,
        match=r"ended with returns \[3.0, -3.0\], outside its return bounds \[-1.0, 1.0\]",
    ):
        env.step({0: "[0]"})


def test_a_coplay_game_keeps_its_own_bounds():
    own = make_env("dilemma").spec
    back = PettingZooEnv(lambda: to_pettingzoo("dilemma")).spec
    assert (back.min_return, back.max_return) == (own.min_return, own.max_return) != (-1.0, 1.0)
    with pytest.raises(ValueError, match="comes with its return bounds .*; drop min_return"):
        PettingZooEnv(lambda: to_pettingzoo("dilemma"), min_return=-1, max_return=1)


@pytest.mark.parametrize(
    ("bounds", "message"),
    [
        ({"min_return": -3}, "pass both min_return and max_return, or neither"),
        ({"min_return": "low", "max_return": 3}, "min_return must be a finite number, got 'low'"),
        ({"min_return": -3, "max_return": True}, "max_return must be a finite number, got True"),
        ({"min_return": -3, "max_return": float("inf")}, "max_return must be a finite number"),
        ({"min_return": 3, "max_return": -3}, "min_return 3 is above max_return -3"),
        (
            {"min_return": -3, "max_return": 3, "spec": make_env("kuhn_poker").spec},
            "pass the return bounds in spec or as min_return/max_return, not both",
        ),
    ],
)
def test_bad_bounds_are_one_line_errors(bounds, message):
    with pytest.raises(ValueError) as err:
        PettingZooEnv(HighStakes, **bounds)
    assert message in str(err.value) and "\n" not in str(err.value)
