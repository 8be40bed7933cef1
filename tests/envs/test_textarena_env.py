"""TextArena adapter: the missing extra, legal lists read from the text, TextArena's own
invalid-move rules, rewards, which games are zero-sum, and reproducibility with many
games in flight."""

import doctest
import itertools
import random
import re
import sys
from collections.abc import Sequence
from types import SimpleNamespace

import numpy as np
import pytest

from coplay.envs import textarena_env
from coplay.envs.actions import parse_action
from coplay.envs.check import check_env
from coplay.envs.registry import make_env
from coplay.envs.textarena_env import TextArenaEnv, listed_actions
from coplay.policies.scripted import RandomPolicy
from coplay.population.metagame import check_meta_solver
from coplay.rollout.engine import play_episodes
from coplay.types import Decision, GameKind, Observation


class Say:
    """Answers with the next of ``texts``; free-text turns take the text as it is."""

    def __init__(self, texts: Sequence[str]) -> None:
        self.texts, self.policy_id, self.version, self._i = list(texts), "say", 0, 0

    def act(self, observations: Sequence[Observation]) -> list[Decision]:
        out = []
        for obs in observations:
            text = self.texts[self._i % len(self.texts)]
            self._i += 1
            legal = obs.legal_actions
            action = text if legal is None else parse_action(text, legal)
            out.append(Decision(text=text, action=action, policy_id=self.policy_id))
        return out


def test_doctests():
    result = doctest.testmod(textarena_env)
    assert result.attempted > 0 and result.failed == 0


def test_listed_actions_reads_the_last_list_line_only():
    text = "Available Moves: '[0]', '[1]'\nsomething\nValid moves: [e2e4], [g1f3] [e2e4]\n[P1] [x]"
    assert listed_actions(text) == ("[e2e4]", "[g1f3]")
    assert listed_actions("Available actions (exact tokens):\n[fold] [call]") is None
    assert listed_actions("Valid moves: '[raise <amount>]', '[fold]'") is None
    assert listed_actions("Available Moves: none") is None


def test_capital_letters_are_moves_and_placeholders_are_templates():
    # A capital letter is a placeholder only as the last word after a verb ([bet X]);
    # WildTicTacToe's marks and cards' ranks are the moves' own.
    assert listed_actions("Available Moves: [X 0], [O 0], [X 1]") == ("[X 0]", "[O 0]", "[X 1]")
    spite = listed_actions("Available Moves: [draw], [play A♦ 0], [discard Q♣ 1]")
    assert spite == ("[draw]", "[play A♦ 0]", "[discard Q♣ 1]")
    assert listed_actions("Available actions: [A], [B], [C]") == ("[A]", "[B]", "[C]")
    assert listed_actions("Available Moves: [D4 E4], [A0 B0]") == ("[D4 E4]", "[A0 B0]")
    for template in ("[bet X]", "[bet x]", "[raise amount]", "[give N]", "[say ...]"):
        assert listed_actions(f"Valid moves: [fold], {template}") is None, template


def test_a_list_of_illegal_moves_is_not_the_list():
    text = "Available moves: [0], [1]\nIllegal moves: [2]\nInvalid actions: you tried [5]"
    assert listed_actions(text) == ("[0]", "[1]")


def test_missing_textarena_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "textarena", None)  # import now raises ImportError
    with pytest.raises(ImportError, match=r"pip install 'coplay\[textarena\]'"):
        make_env("textarena:TicTacToe-v0")


def test_missing_textarena_is_one_error_line_on_the_command_line(monkeypatch, capsys):
    from coplay.cli import main

    # A bare ImportError escaped the command's user errors as a traceback.
    monkeypatch.setitem(sys.modules, "textarena", None)
    assert main(["check-env", "textarena:TicTacToe-v0", "--episodes", "1"]) == 2
    err = capsys.readouterr().err
    assert err == (
        "coplay check-env: error: TextArena games need the optional dependency "
        "textarena: pip install 'coplay[textarena]'\n"
    )


# --- which games are zero-sum (a stand-in for TextArena) ------------------------------


class TiedMarket:
    """TextArena's loop for a two-player game that pays both: each player enters once,
    they tie, and each gets +1 (MarketEntryGame's tied winners)."""

    def reset(self, num_players: int, seed: int | None = None) -> None:
        self.turn = 0

    def get_observation(self) -> tuple[int, str]:
        return self.turn, "[GAME] Round 1. Available moves: '[enter]', '[stay]'"

    def step(self, action: str) -> tuple[bool, dict]:
        self.turn += 1
        return self.turn == 2, {}

    def close(self) -> tuple[dict[int, float], dict]:
        return {0: 1.0, 1: 1.0}, {}


@pytest.fixture
def fake_ta(monkeypatch):
    """TextArena as far as the adapter reads it; every id plays ``TiedMarket``."""
    ids = ("MarketEntryGame-v0", "PublicGoodsGame-v0", "TicTacToe-v0", "KuhnPoker-v0-short")
    fake = SimpleNamespace(
        envs=SimpleNamespace(registration=SimpleNamespace(ENV_REGISTRY=dict.fromkeys(ids))),
        make=lambda env_id: TiedMarket(),
    )
    monkeypatch.setitem(sys.modules, "textarena", fake)


def test_two_players_are_zero_sum_only_for_games_known_to_pay_so():
    kind = textarena_env.default_kind
    zero, general = GameKind.ZERO_SUM, GameKind.GENERAL_SUM
    assert kind("TicTacToe-v0", 2) is zero
    assert kind("KuhnPoker-v0-short", 2) is kind("TicTacToe-v0-raw", 2) is zero  # variants
    for paid_both in ("MarketEntryGame-v0", "PublicGoodsGame-v0", "UsedCarNegotiation-v0"):
        assert kind(paid_both, 2) is general, paid_both
    assert kind("SomeNewGame-v0", 2) is general  # not known, so not assumed
    assert kind("Briscola-v0", 4) is general  # zero-sum with two players only
    assert textarena_env.game_of("SantoriniBaseFixed-v0") == "SantoriniBaseFixed"


def test_a_game_that_pays_both_players_is_general_sum(fake_ta):
    # Called zero-sum, such a game failed the checker's returns check (1 + 1 != 0), a
    # forfeit paid the other player +1, and nash took the meta-game.
    make = lambda: make_env("textarena:MarketEntryGame-v0")  # noqa: E731
    assert make().spec.kind is GameKind.GENERAL_SUM
    assert check_env(make, episodes=3).passed
    (played,) = play_episodes(make, [[RandomPolicy(0), RandomPolicy(1)]], [0])
    assert played.returns == (1.0, 1.0)
    (forfeited,) = play_episodes(make, [[Say(["no move"]), RandomPolicy(1)]], [0])
    assert forfeited.forfeited_by == 0 and forfeited.returns == (-1.0, 0.0)


def test_a_general_sum_game_is_refused_by_nash_with_the_solvers_to_use(fake_ta):
    spec = make_env("textarena:PublicGoodsGame-v0").spec
    with pytest.raises(ValueError, match="nash needs a zero-sum game.*use prd, alpharank"):
        check_meta_solver("nash", spec)
    check_meta_solver("prd", spec)
    check_meta_solver("nash", make_env("textarena:TicTacToe-v0").spec)


def test_kind_is_a_setting_and_a_bad_one_is_one_line(fake_ta):
    told = make_env("textarena:MarketEntryGame-v0", kind="zero_sum")
    assert told.spec.kind is GameKind.ZERO_SUM
    untold = make_env("textarena:TicTacToe-v0", kind="general_sum")
    assert untold.spec.kind is GameKind.GENERAL_SUM
    with pytest.raises(ValueError) as err:
        make_env("textarena:TicTacToe-v0", kind="zerosum")
    assert str(err.value) == (
        "kind must be one of zero_sum, general_sum, cooperative, got 'zerosum'"
    )


def test_a_step_after_the_end_is_one_line(fake_ta):
    env = TextArenaEnv("MarketEntryGame-v0")
    env.step({0: "[enter]"})
    env.step({1: "[stay]"})
    # Nobody is to act, so {} passed the players check and raised IndexError.
    with pytest.raises(ValueError, match=r"^textarena:MarketEntryGame-v0: the game is over"):
        env.step({})


def test_episode_seeds_past_32_bits_play(fake_ta):
    # play_match's seeds (10_000 * 1_000_003 + i for evaluation) stopped every TextArena
    # run at its first evaluation: numpy's legacy generator takes 32-bit seeds only.
    env = TextArenaEnv("TicTacToe-v0")
    states = []
    for seed in (10_000 * 1_000_003, 10_000 * 1_000_003 + 1, 5):
        env.reset(seed)
        states.append(env._np_random[1])
    assert (states[0] != states[1]).any()
    assert (states[2] == np.random.RandomState(5).get_state()[1]).all()  # as before


# --- with TextArena installed ---------------------------------------------------------


@pytest.fixture(scope="module")
def ta():
    return pytest.importorskip("textarena")


def board_cells(text: str) -> set[str]:
    """Empty cells of the last TextArena tic-tac-toe board in ``text``."""
    board = text.rsplit("Current Board:", 1)[1].split("Available Moves")[0]
    return {f"[{c}]" for c in board.split() if c.isdigit()}


def test_tictactoe_random_play_lists_exactly_the_empty_cells(ta):
    seeds = list(range(6))
    seats = [[RandomPolicy(s), RandomPolicy(10 + s)] for s in seeds]
    episodes = play_episodes(lambda: make_env("textarena:TicTacToe-v0"), seats, seeds)
    for episode in episodes:
        assert episode.game == "textarena:TicTacToe-v0"
        assert episode.returns in {(1.0, -1.0), (-1.0, 1.0), (0.0, 0.0)}
        assert 5 <= episode.num_steps <= 9 and episode.forfeited_by is None
        for turn in episode.turns:
            assert set(turn.observation.legal_actions) == board_cells(turn.observation.text)
            assert (
                sum(t.reward for t in episode.trajectories[turn.player].turns)
                == (episode.returns[turn.player])
            )


def test_tictactoe_scripted_win_gives_textarenas_rewards(ta):
    seats = [Say(["[0]", "[1]", "[2]"]), Say(["[3]", "[4]"])]  # player 0 takes the top row
    (episode,) = play_episodes(lambda: make_env("textarena:TicTacToe-v0"), [seats], [0])
    assert episode.returns == (1.0, -1.0) and episode.num_steps == 5
    assert [t.played_action for t in episode.turns] == ["[0]", "[3]", "[1]", "[4]", "[2]"]


def test_kuhn_lists_follow_the_betting(ta):
    env = TextArenaEnv("KuhnPoker-v0")
    env.reset(3)
    first = env.players_to_act()[0]
    assert env.observe(first).legal_actions == ("[check]", "[bet]")
    env.step({first: "I will [bet]"})
    second = env.players_to_act()[0]
    assert second != first
    assert env.observe(second).legal_actions == ("[fold]", "[call]")
    assert env.parse_action(second, "[check]") is None  # not legal facing a bet


def test_free_text_turns_and_textarenas_invalid_move_rule(ta):
    env = TextArenaEnv("Nim-v0")
    env.reset(0)
    obs = env.observe(0)
    assert obs.legal_actions is None  # Nim explains its '[pile quantity]' format in prose
    assert env.parse_action(0, "  [0 1] ") == "[0 1]" and env.parse_action(0, "  ") is None
    env.step({0: "no move here"})
    assert env.players_to_act() == [0]  # TextArena allows one invalid move, then asks again
    assert "invalid move" in env.observe(0).text
    rewards = env.step({0: "still no move"})
    assert env.is_terminal() and env.returns() == [-1.0, 1.0] == [rewards[0], rewards[1]]
    assert env.game_info[0]["invalid_move"]


def test_same_seed_same_game_with_games_interleaved_and_caller_random_untouched(ta):
    seeds = [0, 4, 6, 7]  # Python's shuffle under these seeds deals K, Q, J, J to player 1

    def run(batch):
        seats = [[RandomPolicy(s), RandomPolicy(10 + s)] for s in batch]
        eps = play_episodes(lambda: make_env("textarena:KuhnPoker-v0"), seats, batch)
        return [[t.observation.text for t in e.turns] + [e.returns] for e in eps]

    random.seed(123)
    np.random.seed(123)
    outer = random.getstate(), np.random.get_state()[1].copy()
    together = run(seeds)
    assert random.getstate() == outer[0]
    assert (np.random.get_state()[1] == outer[1]).all()
    random.seed(999)  # the caller's generators must not matter either
    np.random.seed(999)
    alone = [run([s])[0] for s in seeds]
    assert together == alone
    deals = [e[0].split("Your card is: ")[1][:3] for e in together]
    assert deals == ["'K'", "'Q'", "'J'", "'J'"]


def test_bad_ids_and_player_counts_are_one_line_errors(ta):
    with pytest.raises(ValueError, match="unknown TextArena game 'Nope-v0'; known games include"):
        make_env("textarena:Nope-v0")
    with pytest.raises(ValueError, match="refused num_players=3"):
        make_env("textarena:TicTacToe-v0", num_players=3)
    with pytest.raises(ValueError, match="num_players must be a positive integer"):
        TextArenaEnv("TicTacToe-v0", num_players=0)
    env = TextArenaEnv("TicTacToe-v0")
    with pytest.raises(ValueError, match="no player 2 in a 2-player game"):
        env.observe(2)
    with pytest.raises(ValueError, match="expected actions for players \\[0\\]"):
        env.step({1: "[4]"})


def test_every_player_can_be_observed_waiting_and_at_the_end(ta):
    # TextArena shows its text to the player to act only; a waiting or finished player
    # sees its last text, with no moves: PettingZoo's loop and the play table ask.
    env = TextArenaEnv("TicTacToe-v0")
    env.reset(0)
    assert env.observe(1).text == "" and env.observe(1).legal_actions == ()
    env.step({0: "[4]"})
    shown = env.observe(1).text
    assert env.observe(0).legal_actions == () and "Available Moves" in env.observe(0).text
    for player, move in ((1, "[0]"), (0, "[1]"), (1, "[8]"), (0, "[7]")):  # 0 wins: 1-4-7
        env.step({player: move})
    assert env.is_terminal()
    assert shown and env.observe(1).text != shown  # its latest text, not its first
    assert all(env.observe(p).legal_actions == () for p in (0, 1))


def test_a_textarena_game_plays_to_the_end_through_pettingzoo_and_at_a_play_table(ta):
    pytest.importorskip("pettingzoo")
    from functools import partial

    from coplay.envs.pettingzoo_adapter import to_pettingzoo
    from coplay.play.session import Session

    aec = to_pettingzoo("textarena:TicTacToe-v0")
    aec.reset(seed=0)
    rng = random.Random(0)
    for _ in aec.agent_iter():
        obs, _, term, trunc, _ = aec.last()
        legal = np.flatnonzero(obs["action_mask"]) if "action_mask" in obs else None
        aec.step(None if term or trunc else int(rng.choice(legal)) if legal is not None else "[4]")
    assert not aec.agents
    players = {"a": RandomPolicy(0), "b": RandomPolicy(1)}
    table = Session(partial(make_env, "textarena:TicTacToe-v0"), players, ["a", "b"])
    table.new_game()
    table.advance()
    assert table.outcome is not None and len(table.outcome.views) == 2


def test_games_of_more_than_two_players_are_general_sum_unless_told(ta):
    # TextArena pays three players by rank, (-1, -1, +1): labelled zero-sum, a forfeit
    # paid the others +0.5 each and the zero-sum meta-solvers took the game.
    three = make_env("textarena:ThreePlayerTicTacToe-v0", num_players=3)
    assert three.spec.kind is GameKind.GENERAL_SUM
    assert make_env("textarena:TicTacToe-v0").spec.kind is GameKind.ZERO_SUM
    told = make_env("textarena:ThreePlayerTicTacToe-v0", num_players=3, kind="zero_sum")
    assert told.spec.kind is GameKind.ZERO_SUM


def test_the_zero_sum_table_names_textarena_games(ta):
    games = {textarena_env.game_of(i) for i in ta.envs.registration.ENV_REGISTRY}
    assert games >= textarena_env.ZERO_SUM_GAMES, sorted(textarena_env.ZERO_SUM_GAMES - games)
    assert make_env("textarena:MarketEntryGame-v0").spec.kind is GameKind.GENERAL_SUM


def a_set(text: str) -> str:
    """Three cards of the last Set board in ``text`` that make a Set: in each of count,
    colour, shading and shape, all alike or all different."""
    board = text.rsplit("=== BOARD ===", 1)[1]
    cards = {int(i): card.split() for i, card in re.findall(r"^(\d+): (.+)$", board, re.M)}
    for trio in itertools.combinations(sorted(cards), 3):
        if all(len({cards[i][k] for i in trio}) != 2 for k in range(4)):
            return "[" + ", ".join(map(str, trio)) + "]"
    return "[1, 2, 3]"  # none on the board: TextArena deals more after a miss


def test_a_game_that_pays_points_has_bounds_that_hold_them(ta):
    # Set pays a point a set found: 20 sets made a return of 20 against a max_return
    # of 1, so restarts took a game of one point for a win and the checker blamed the game.
    env = make_env("textarena:Set-v0", num_players=1)
    while not env.is_terminal():
        env.step({0: a_set(env.observe(0).text)})
    assert env.returns() == [20.0]
    assert (env.spec.min_return, env.spec.max_return) == (0.0, 20.0)
    assert make_env("textarena:TicTacToe-v0").spec.max_return == 1.0
    games = {textarena_env.game_of(i) for i in ta.envs.registration.ENV_REGISTRY}
    assert games >= set(textarena_env.RETURN_BOUNDS)


@pytest.mark.parametrize("max_turns", ["abc", -5, 0, True, 2.5, None])
def test_max_turns_must_be_a_positive_integer(ta, max_turns):
    # "abc" failed inside the checker with a TypeError, -5 was taken as it was.
    with pytest.raises(ValueError) as err:
        make_env("textarena:TicTacToe-v0", max_turns=max_turns)
    assert str(err.value) == f"max_turns must be a positive integer, got {max_turns!r}"
