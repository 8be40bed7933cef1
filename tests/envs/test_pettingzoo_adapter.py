"""PettingZoo adapters: every coplay game passes PettingZoo's API and seed tests, and
coplay -> PettingZoo -> coplay plays the same episodes as coplay alone."""

import importlib.util
import sys
from collections.abc import Sequence
from dataclasses import replace

import numpy as np
import pytest

pettingzoo = pytest.importorskip("pettingzoo")

from gymnasium.spaces import Box, Discrete  # noqa: E402
from pettingzoo.test import api_test, seed_test  # noqa: E402

from coplay.envs import pettingzoo_adapter  # noqa: E402
from coplay.envs.actions import parse_action  # noqa: E402
from coplay.envs.pettingzoo_adapter import (  # noqa: E402
    PettingZooEnv,
    TextSpace,
    to_pettingzoo,
)
from coplay.envs.registry import list_games, make_env  # noqa: E402
from coplay.policies.scripted import RandomPolicy  # noqa: E402
from coplay.rollout.engine import play_episodes  # noqa: E402
from coplay.rollout.invalid import forfeit_returns  # noqa: E402
from coplay.types import Decision, GameKind, GameSpec, Observation  # noqa: E402

# api_test warns about everything that is not a numpy observation; text is the point here.
pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")

EXTRA_GAMES = [
    ("openspiel:goofspiel", {}),  # simultaneous moves
    ("openspiel:coop_box_pushing", {"horizon": 10}),  # simultaneous, rewards every step
    ("kuhn_poker", {"players": 3}),
]


class Echo:
    """Two players, free text: player 0 says a word, player 1 wins by repeating it."""

    spec = GameSpec("echo", 2, GameKind.ZERO_SUM, 2, False, min_return=-1, max_return=1)

    def reset(self, seed: int) -> None:
        self.said: list[str] = []

    def players_to_act(self) -> list[int]:
        return [] if self.is_terminal() else [len(self.said)]

    def observe(self, player: int) -> Observation:
        heard = f" You heard: {self.said[0]}." if self.said else ""
        return Observation("echo", player, f"Player {player}.{heard}")

    def parse_action(self, player: int, text: str) -> str | None:
        word = text.strip()
        return word if word.isalpha() else None

    def step(self, actions: dict[int, str]) -> dict[int, float]:
        self.said.append(actions[len(self.said)])
        return {0: 0.0, 1: 0.0}

    def is_terminal(self) -> bool:
        return len(self.said) == 2

    def returns(self) -> list[float]:
        won = self.is_terminal() and self.said[0] == self.said[1]
        return [-1.0, 1.0] if won else [1.0, -1.0]


class Listed(Echo):
    """Echo restricted to a fixed list of words, declared in ``all_actions``."""

    all_actions = ("[red]", "[green]", "[blue]")

    def observe(self, player: int) -> Observation:
        legal = self.all_actions[1:] if player == 0 else self.all_actions
        return replace(super().observe(player), legal_actions=legal)

    def parse_action(self, player: int, text: str) -> str | None:
        return parse_action(text, self.observe(player).legal_actions)


class Say:
    """Answers every observation with the next of ``texts``, parsed like a model's."""

    def __init__(self, texts: Sequence[str]) -> None:
        self.texts, self.policy_id, self.version, self._i = list(texts), "say", 0, 0

    def act(self, observations: Sequence[Observation]) -> list[Decision]:
        out = []
        for obs in observations:
            text = self.texts[self._i % len(self.texts)]
            self._i += 1
            legal = obs.legal_actions
            action = text.strip() if legal is None else parse_action(text, legal)
            out.append(Decision(text=text, action=action, policy_id=self.policy_id))
        return out


def play_masked(env, seed: int, rng: np.random.Generator) -> dict[str, float]:
    """Play one AEC episode with uniform legal actions; return each agent's reward sum."""
    env.reset(seed=seed)
    total = dict.fromkeys(env.possible_agents, 0.0)
    for _ in env.agent_iter():
        obs, _, done, cut, _ = env.last()
        action = None
        if not (done or cut):
            action = int(rng.choice(np.flatnonzero(obs["action_mask"])))
        env.step(action)
        for a, r in env.rewards.items():
            total[a] += r
    return total


# --- coplay -> PettingZoo -------------------------------------------------------------


def test_missing_pettingzoo_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "pettingzoo", None)  # import now raises ImportError
    # the guard lives in the shared deps module: make the next import run it again
    monkeypatch.delitem(sys.modules, "coplay.envs.pettingzoo_deps")
    spec = importlib.util.spec_from_file_location("without_pettingzoo", pettingzoo_adapter.__file__)
    with pytest.raises(ImportError, match=r"pip install 'coplay\[pettingzoo\]'"):
        spec.loader.exec_module(importlib.util.module_from_spec(spec))


@pytest.mark.parametrize("name", [g.name for g in list_games()])
def test_every_registered_game_passes_api_and_seed_tests(name):
    api_test(to_pettingzoo(name), num_cycles=100)
    seed_test(lambda: to_pettingzoo(name), num_cycles=100)


@pytest.mark.parametrize(("name", "params"), EXTRA_GAMES)
def test_simultaneous_rewarding_and_n_player_games_pass(name, params):
    api_test(to_pettingzoo(name, **params), num_cycles=100)
    seed_test(lambda: to_pettingzoo(name, **params), num_cycles=100)


def test_openspiel_actions_are_discrete_over_action_ids():
    env = to_pettingzoo("leduc_poker")
    env.reset(seed=1)
    assert env.action_space("player_0") == Discrete(3)  # fold, call, raise
    assert env.observation_space("player_1")["action_mask"] == Box(0, 1, (3,), np.int8)
    obs = env.observe("player_0")
    game = make_env("leduc_poker")
    game.reset(1)
    assert obs["text"] == game.observe(0).text
    assert list(np.flatnonzero(obs["action_mask"])) == game.state.legal_actions(0)
    assert env.infos["player_0"] == {"legal_actions": {"[Call]": 1, "[Raise]": 2}}
    assert not env.observe("player_1")["action_mask"].any()  # not its turn


@pytest.mark.parametrize(("name", "params"), [EXTRA_GAMES[1], ("kuhn_poker", {})])
def test_rewards_sum_to_the_games_returns(name, params):
    env, rng = to_pettingzoo(name, **params), np.random.default_rng(0)
    for seed in range(5):
        total = play_masked(env, seed, rng)
        assert list(total.values()) == pytest.approx(env.game.returns())
    assert env.game.returns() != [0.0, 0.0]  # box pushing rewards every step


def test_reset_seed_plays_that_coplay_seed_and_reset_continues_a_stream():
    env, game = to_pettingzoo("kuhn_poker"), make_env("kuhn_poker")
    for seed in (0, 5, 11):
        env.reset(seed=seed)
        game.reset(seed)
        assert env.observe("player_0")["text"] == game.observe(0).text
    other = to_pettingzoo("kuhn_poker")
    env.reset(seed=3)
    other.reset(seed=3)
    drawn = []
    for _ in range(3):
        env.reset()
        other.reset()
        drawn.append(env.episode_seed)
        assert other.episode_seed == env.episode_seed
    assert len(set(drawn)) == 3 and 3 not in drawn


def test_simultaneous_choice_waits_for_everyone_and_stays_hidden():
    env = to_pettingzoo("openspiel:goofspiel")
    env.reset(seed=0)
    assert env.agent_selection == "player_0"
    before = env.observe("player_1")["text"]
    env.step(int(np.flatnonzero(env.observe("player_0")["action_mask"])[-1]))
    assert env.agent_selection == "player_1"
    assert env.num_steps == 0  # the joint action waits for player_1
    assert env.observe("player_1")["text"] == before
    assert not env.observe("player_0")["action_mask"].any()
    env.step(int(np.flatnonzero(env.observe("player_1")["action_mask"])[0]))
    assert env.num_steps == 1 and env.agent_selection == "player_0"


def test_truncation_after_the_games_turn_limit():
    def short_game():
        game = make_env("tic_tac_toe")
        game.spec = replace(game.spec, max_turns=2)
        return game

    env = to_pettingzoo(short_game)
    total = play_masked(env, 0, np.random.default_rng(0))
    assert env.num_steps == 2 and total == {"player_0": 0.0, "player_1": 0.0}
    env.reset(seed=0)
    env.step(0)
    env.step(1)
    assert all(env.truncations.values()) and not any(env.terminations.values())


def test_a_truncated_game_comes_back_truncated():
    def short_game():
        game = make_env("tic_tac_toe")
        game.spec = replace(game.spec, max_turns=2)
        return game

    seats = [[RandomPolicy(0), RandomPolicy(1)]]
    (direct,) = play_episodes(short_game, seats, [0])
    (back,) = play_episodes(lambda: PettingZooEnv(lambda: to_pettingzoo(short_game)), seats, [0])
    assert direct.truncated and back.truncated and back.num_steps == direct.num_steps == 2


def test_free_text_games_take_text_actions_and_forfeit_on_nonsense():
    env = to_pettingzoo(Echo)
    assert isinstance(env.action_space("player_0"), TextSpace)
    assert set(env.observation_space("player_0").spaces) == {"text"}
    env.reset(seed=0)
    assert env.infos["player_0"] == {}  # nothing listed on a free-text turn
    env.step("kiwi")
    assert env.observe("player_1") == {"text": "Player 1. You heard: kiwi."}
    env.step(" kiwi ")
    assert env.rewards == {"player_0": -1.0, "player_1": 1.0}
    env.reset(seed=0)
    env.step("no such word!")
    assert env.forfeited_by == 0 and all(env.terminations.values())
    assert list(env.rewards.values()) == forfeit_returns(Echo.spec, 0) == [-1.0, 1.0]


def test_all_actions_gives_a_discrete_space_over_that_list():
    env = to_pettingzoo(Listed)
    assert env.action_space("player_0") == Discrete(3)
    env.reset(seed=0)
    assert list(env.observe("player_0")["action_mask"]) == [0, 1, 1]
    assert env.infos["player_0"] == {"legal_actions": {"[green]": 1, "[blue]": 2}}
    env.step(2)
    env.step(2)
    assert env.rewards == {"player_0": -1.0, "player_1": 1.0}
    api_test(to_pettingzoo(Listed), num_cycles=10)


def test_bad_input_gives_one_line_errors():
    env = to_pettingzoo("kuhn_poker")
    with pytest.raises(RuntimeError, match="call reset"):
        env.step(0)
    env.reset(seed=0)
    with pytest.raises(ValueError, match=r"action 7 is not legal now; legal: \[0, 1\]"):
        env.step(7)
    with pytest.raises(ValueError, match="not legal"):
        env.step("[Bet]")
    with pytest.raises(ValueError, match="non-negative integer"):
        env.reset(seed=-1)
    with pytest.raises(ValueError, match="render_mode 'rgb'"):
        to_pettingzoo("kuhn_poker", render_mode="rgb")
    with pytest.raises(ValueError, match="game name or an env factory, got int"):
        to_pettingzoo(3)
    with pytest.raises(ValueError, match="unknown parameter"):
        to_pettingzoo("kuhn_poker", cards=4)
    with pytest.raises(ValueError, match="max_text_length=10"):
        short = to_pettingzoo("kuhn_poker", max_text_length=10)
        short.reset(seed=0)
        short.observe("player_0")
    with pytest.raises(ValueError, match="all_actions"):
        to_pettingzoo(type("Bad", (Echo,), {"all_actions": ("[a]", "[a]")}))


def test_render_ansi_shows_the_acting_players_view():
    env = to_pettingzoo("tic_tac_toe", render_mode="ansi")
    env.reset(seed=0)
    assert env.render() == env.observe("player_0")["text"]
    assert "Your legal actions: [0] [1]" in env.render()


# --- coplay -> PettingZoo -> coplay ---------------------------------------------------


def turns_of(episode):
    return [
        (t.player, t.observation.text, t.observation.legal_actions, t.played_action)
        for t in episode.turns
    ]


@pytest.mark.parametrize(
    ("name", "params"), [("kuhn_poker", {}), ("leduc_poker", {}), *EXTRA_GAMES]
)
def test_round_trip_plays_the_same_episodes(name, params):
    seeds = list(range(8))

    def seatings():
        n = make_env(name, **params).spec.num_players
        return [[RandomPolicy(100 * p + s) for p in range(n)] for s in seeds]

    def via_pettingzoo():
        return PettingZooEnv(lambda: to_pettingzoo(name, **params))

    direct = play_episodes(lambda: make_env(name, **params), seatings(), seeds)
    round_trip = play_episodes(via_pettingzoo, seatings(), seeds)
    for a, b in zip(direct, round_trip, strict=True):
        assert turns_of(a) == turns_of(b)
        assert b.returns == pytest.approx(a.returns) and b.truncated == a.truncated
        for ta, tb in zip(a.trajectories, b.trajectories, strict=True):
            assert [t.reward for t in tb.turns] == pytest.approx([t.reward for t in ta.turns])


def test_round_trip_of_a_free_text_game():
    for words, want in ((["kiwi", "kiwi"], (-1.0, 1.0)), (["kiwi", "fig"], (1.0, -1.0))):
        seats = [Say(words[:1]), Say(words[1:])]
        direct = play_episodes(Echo, [seats], [0])[0]
        seats = [Say(words[:1]), Say(words[1:])]
        env = PettingZooEnv(lambda: to_pettingzoo(Echo))
        round_trip = play_episodes(lambda env=env: env, [seats], [0])[0]
        assert direct.returns == round_trip.returns == want
        assert turns_of(direct) == turns_of(round_trip)


@pytest.mark.parametrize("name", ["negotiation", "dilemma"])
def test_round_trip_reads_a_message_as_the_game_does(name):
    # Silence is a message in the talk games, and brackets in a message are not moves.
    direct, round_trip = make_env(name), PettingZooEnv(lambda: to_pettingzoo(name))
    direct.reset(0)
    round_trip.reset(0)
    player = direct.players_to_act()[0]  # both write at once in the dilemma
    assert direct.observe(player).legal_actions is None  # a message turn
    for text in ("", "   ", "hi [Cooperate]", "[Cooperate]"):
        assert round_trip.parse_action(player, text) == direct.parse_action(player, text)
