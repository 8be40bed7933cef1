"""Any TextArena game as a coplay ``Env`` (needs the ``textarena`` extra).

TextArena (github.com/LeonGuertler/TextArena) plays text games through
``ta.make(env_id)``, ``env.reset(num_players, seed)``, ``env.get_observation() ->
(player_id, observation)``, ``env.step(action) -> (done, info)`` and ``env.close() ->
(rewards, game_info)``. This adapter maps that loop onto the ``Env`` protocol:

- the player to act is TextArena's current player; its observation is read once per
  state (TextArena hands out each message once) and written as text;
- legal actions are read from the last "Available moves: '[0]', '[4]'" style line
  among the messages that reached the player since the last move (``listed_actions``;
  an older list may belong to another player or position). A turn without such a
  line, or with templates such as ``[bet X]``, is a free-text turn: the text goes to
  TextArena as written;
- TextArena judges moves itself: an invalid move gets its own error allowance and
  then loses; rewards (usually +1/-1/0) arrive when the game ends;
- a game is zero-sum only when TextArena is known to pay its two players so
  (``ZERO_SUM_GAMES``); any other is general-sum unless ``kind`` says otherwise;
- TextArena seeds Python's global ``random`` (and some games use numpy's global
  generator), so each env keeps its own copy of both and swaps it in around every
  call: many games in flight at once stay reproducible and leave the caller's
  generators untouched.
"""

from __future__ import annotations

import random
import re
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import numpy as np

from coplay.envs import actions as action_text
from coplay.envs.actions import check_acting
from coplay.envs.openspiel_games import UnknownGameError
from coplay.types import GameKind, GameSpec, Observation

INSTALL_HINT = "pip install 'coplay[textarena]'"

MAX_TURNS = 500
"""Default turn limit; TextArena games end themselves well before (invalid moves count)."""

_LIST_HEADER = re.compile(r"\b(?:available|valid|legal)\s+(?:moves|actions)[^:\n]*:", re.IGNORECASE)
"""A list's header; ``\\b`` so that "Illegal moves:" or "Invalid actions:" is none."""
_BRACKETED = re.compile(r"\[([^\[\]\n]+)\]")
_TEMPLATE = re.compile(r"<|>|\.\.\.|\s(?:[XYN]|[xyn]|amount|number|quantity|value)$")
"""Placeholders (``[bet X]``, ``[raise amount]``, ``[<amount>]``) mark a template, not
a list of moves. A placeholder letter is the last word after a verb: a capital letter
elsewhere is a move's own (``[X 0]`` in WildTicTacToe, ``[play K♦ 0]``, ``[A]``)."""


class MissingExtraError(ImportError, ValueError):
    """An optional dependency a game needs is not installed: an ImportError, and also
    a ValueError, which the command line prints as one line (a configuration asking
    for a ``textarena:`` game without the extra is a user's error, not a crash)."""


def _import_textarena() -> Any:
    try:
        import textarena
    except ImportError as err:
        raise MissingExtraError(
            f"TextArena games need the optional dependency textarena: {INSTALL_HINT}"
        ) from err
    return textarena


def listed_actions(text: str) -> tuple[str, ...] | None:
    """Bracketed moves on the last "available/valid/legal moves/actions:" line, if any.

    >>> listed_actions("Board...\\nAvailable Moves: '[0]', '[4]', '[8]'")
    ('[0]', '[4]', '[8]')
    >>> listed_actions("[GAME] Your available actions are: '[check]', '[bet]'")
    ('[check]', '[bet]')
    >>> listed_actions("Valid moves: '[check]' | '[bet X]'") is None
    True
    >>> listed_actions("Say anything.") is None
    True
    >>> listed_actions("Available Moves: [X 0], [O 4]\\nIllegal moves: [bet X]")
    ('[X 0]', '[O 4]')
    """
    headers = list(_LIST_HEADER.finditer(text))
    if not headers:
        return None
    line = text[headers[-1].end() :].split("\n", 1)[0]
    names = list(dict.fromkeys(_BRACKETED.findall(line)))
    if not names or any(_TEMPLATE.search(n) for n in names):
        return None
    return tuple(action_text.bracket(n) for n in names)


def messages_text(messages: Sequence[tuple]) -> str:
    """Raw TextArena messages ``(sender, text, type)`` as lines ``[sender] text``."""
    return "".join(
        f"\n[{'GAME' if sender == -1 else f'Player {sender}'}] {msg}"
        for sender, msg, *_ in messages
    )


# Read in textarena 0.7.4's sources: with two players these pay only through its
# two-player state, (+1, -1) for a win, (-1, +1) to the last invalid move and (0, 0)
# for a draw, so every return pair sums to 0. Left out, and so general-sum:
# MarketEntryGame and PublicGoodsGame (tied winners both get +1), Poker, LiarsDice,
# Snake, Surround and SantoriniBaseFixed (the multi-player state, which pays by rank
# or group, even with two), UsedCarNegotiation (both paid by the price), Checkers (a
# set_winners call the two-player state does not take), and every game not read.
ZERO_SUM_GAMES = frozenset(
    {
        "Alquerque", "Battleship", "Breakthrough", "Briscola", "Chess", "Chopsticks",
        "ColonelBlotto", "ConnectFour", "Crusade", "Debate", "DontSayIt",
        "GameOfPureStrategy", "GermanWhist", "Golf", "HighSociety", "IndianPoker",
        "IteratedMatchingPennies", "IteratedPrisonersDilemma", "IteratedRockPaperScissors",
        "IteratedStagHunt", "IteratedTwoThirdsAverage", "IteratedUltimatumGame",
        "KuhnPoker", "LetterAuction", "LinesOfAction", "MemoryGame", "NewRecruit", "Nim",
        "Othello", "PigDice", "QuantumTicTacToe", "ReverseTicTacToe", "ScenarioPlanning",
        "SimpleBlindAuction", "SimpleNegotiation", "SimpleTak", "SpellingBee",
        "SpiteAndMalice", "Stratego", "Tak", "TicTacToe", "TruthAndDeception", "TwoDollar",
        "UltimateTicTacToe", "WildTicTacToe", "WordChains",
    }
)  # fmt: skip
"""TextArena games (``game_of`` their id) known to be zero-sum with two players."""

_VERSION = re.compile(r"-v\d")


def game_of(env_id: str) -> str:
    """The game an id plays, without its version and variant.

    >>> game_of("KuhnPoker-v0-short"), game_of("TicTacToe-v0-raw"), game_of("Nim")
    ('KuhnPoker', 'TicTacToe', 'Nim')
    """
    return _VERSION.split(env_id, maxsplit=1)[0]


RETURN_BOUNDS = {"Klondike": (-1.0, 52.0), "Set": (0.0, 20.0)}
"""TextArena games (``game_of`` their id) that pay outside [-1, 1], with their return
bounds (read in textarena 0.7.4's sources): Klondike pays the cards on foundations (an
invalid move -1), Set a point a set in 20 turns (an invalid move 0)."""


def return_bounds(env_id: str) -> tuple[float, float]:
    """``(min_return, max_return)`` of a TextArena game.

    TextArena pays +1 / -1 / 0, by rank in [-1, 1] for more players, and a share of a
    puzzle solved in [0, 1]; a few games pay points (``RETURN_BOUNDS``). ScorableGames
    (points) and UsedCarNegotiation (a price, without bound) do too, but do not load
    offline.

    >>> return_bounds("TicTacToe-v0"), return_bounds("Set-v0-train")
    ((-1.0, 1.0), (0.0, 20.0))
    """
    return RETURN_BOUNDS.get(game_of(env_id), (-1.0, 1.0))


def default_kind(env_id: str, num_players: int) -> GameKind:
    """A TextArena game's kind unless told: zero-sum for two players of a game known to
    pay them so (``ZERO_SUM_GAMES``), else general-sum (more than two are paid by rank,
    ``(-1, -1, +1)``, which sums to no constant). A wrong "zero-sum" is silent
    (a forfeit pays the other player, zero-sum solvers take the game); a wrong
    "general-sum" only withholds them, and ``kind`` restores them.

    >>> default_kind("TicTacToe-v0", 2).value, default_kind("MarketEntryGame-v0", 2).value
    ('zero_sum', 'general_sum')
    """
    known = num_players == 2 and game_of(env_id) in ZERO_SUM_GAMES
    return GameKind.ZERO_SUM if known else GameKind.GENERAL_SUM


def numpy_seed(seed: int) -> int:
    """``seed`` as numpy's legacy generator takes it: below 2**32 as it is; larger
    episode seeds (``play_match`` multiplies its seed by 1_000_003) hashed into range.

    >>> numpy_seed(7), numpy_seed(2**32) == numpy_seed(2**32 + 1)
    (7, False)
    """
    return seed if seed < 2**32 else int(np.random.SeedSequence(seed).generate_state(1)[0])


def _told_kind(kind: object) -> GameKind:
    try:
        return GameKind(kind)
    except ValueError:
        kinds = ", ".join(k.value for k in GameKind)
        raise ValueError(f"kind must be one of {kinds}, got {kind!r}") from None


class TextArenaEnv:
    """A TextArena game behind the ``Env`` protocol (see the module docstring)."""

    def __init__(
        self,
        env_id: str,
        *,
        num_players: int = 2,
        kind: GameKind | None = None,
        max_turns: int = MAX_TURNS,
        legal_actions: Callable[[str], tuple[str, ...] | None] = listed_actions,
    ) -> None:
        self._ta = _import_textarena()
        registry = self._ta.envs.registration.ENV_REGISTRY
        if env_id not in registry:
            examples = ", ".join(i for i in ("TicTacToe-v0", "KuhnPoker-v0") if i in registry)
            raise UnknownGameError(
                f"unknown TextArena game {env_id!r}; known games include {examples} "
                f"({len(registry)} in textarena.envs.registration.ENV_REGISTRY)"
            )
        for key, value in (("num_players", num_players), ("max_turns", max_turns)):
            # A bool is an int to Python, and "abc" or -5 from the command line would
            # fail inside the engine (or the checker) as the game's own defect.
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"{key} must be a positive integer, got {value!r}")
        self.env_id = env_id
        self.legal_actions = legal_actions
        low, high = return_bounds(env_id)
        self.spec = GameSpec(
            name=f"textarena:{env_id}",
            num_players=num_players,
            kind=_told_kind(kind) if kind is not None else default_kind(env_id, num_players),
            max_turns=max_turns,
            perfect_information=False,
            min_return=low,
            max_return=high,
        )
        self.reset(0)

    def reset(self, seed: int) -> None:
        """A fresh TextArena env (its wrappers keep history across resets) seeded by ``seed``."""
        self._random = random.Random(seed).getstate()
        self._np_random = np.random.RandomState(numpy_seed(seed)).get_state()
        with self._own_randomness():
            self.ta_env = self._ta.make(self.env_id)
            try:
                self.ta_env.reset(num_players=self.spec.num_players, seed=seed)
            except AssertionError as err:
                raise ValueError(
                    f"TextArena game {self.env_id!r} refused num_players="
                    f"{self.spec.num_players}: {err}"
                ) from err
        self._returns: list[float] | None = None
        self.game_info: dict = {}
        self._history: dict[int, str] = {}
        self._seen: dict[int, str] = {}
        self._read_observation()

    @contextmanager
    def _own_randomness(self) -> Iterator[None]:
        """Run TextArena code on this env's generators, restoring the caller's after."""
        outer = random.getstate(), np.random.get_state()
        random.setstate(self._random)
        np.random.set_state(self._np_random)
        try:
            yield
        finally:
            self._random, self._np_random = random.getstate(), np.random.get_state()
            random.setstate(outer[0])
            np.random.set_state(outer[1])

    def _read_observation(self) -> None:
        """Take the current player's observation from TextArena (it is handed out once)."""
        fresh = self._messages_since_last_move()
        with self._own_randomness():
            player, observation = self.ta_env.get_observation()
        if isinstance(observation, str):
            text = observation
        else:  # unwrapped ("-raw") ids give new messages only: keep the history here
            self._history[player] = self._history.get(player, "") + messages_text(observation)
            text = self._history[player]
        self._player, self._text = int(player), text.strip("\n")
        self._seen[self._player] = self._text
        self._legal = self.legal_actions(text if fresh is None else fresh)

    def _messages_since_last_move(self) -> str | None:
        """Text of the messages queued for the player to act, after the last move in
        them; None when the game keeps no such queue (then the whole text is read)."""
        state = getattr(self.ta_env, "state", None)
        queued = getattr(state, "observations", {}).get(getattr(state, "current_player_id", None))
        if queued is None:
            return None
        moves = [i for i, m in enumerate(queued) if m[2] == self._ta.ObservationType.PLAYER_ACTION]
        return messages_text(queued[moves[-1] + 1 if moves else 0 :])

    def players_to_act(self) -> list[int]:
        return [] if self.is_terminal() else [self._player]

    def observe(self, player: int) -> Observation:
        """The acting player's observation; a waiting player's (or, once the game is
        over, anyone's) is the last text TextArena showed it, with no moves: TextArena
        hands out observations to the player to act only, and a PettingZoo loop or a
        play table's showdown observes every player."""
        if not 0 <= player < self.spec.num_players:
            raise ValueError(f"no player {player} in a {self.spec.num_players}-player game")
        if player != self._player or self.is_terminal():
            text = self._seen.get(player, "")
            return Observation(game=self.spec.name, player=player, text=text, legal_actions=())
        return Observation(
            game=self.spec.name,
            player=player,
            text=self._text,
            legal_actions=self._legal,
        )

    def parse_action(self, player: int, text: str) -> str | None:
        """The legal action named in ``text``; on a free-text turn, the stripped text."""
        if self._legal is None:
            return text.strip() or None
        return action_text.parse_action(text, self._legal)

    def step(self, actions: dict[int, str]) -> dict[int, float]:
        """Send the acting player's text to TextArena; the rewards arrive at the end."""
        acting = self.players_to_act()
        check_acting(self.spec.name, actions, acting)
        with self._own_randomness():
            done, _ = self.ta_env.step(actions[acting[0]])
        if not done:
            self._read_observation()
            return dict.fromkeys(range(self.spec.num_players), 0.0)
        with self._own_randomness():
            closed = self.ta_env.close()
        rewards, self.game_info = closed if isinstance(closed, tuple) else (closed, {})
        self._returns = [float((rewards or {}).get(p, 0.0)) for p in range(self.spec.num_players)]
        return dict(enumerate(self._returns))

    def is_terminal(self) -> bool:
        return self._returns is not None

    def returns(self) -> list[float]:
        return list(self._returns) if self._returns else [0.0] * self.spec.num_players


def textarena_factory(env_id: str) -> Callable[..., TextArenaEnv]:
    """The registry's ``textarena:<id>`` family: ``make_env("textarena:TicTacToe-v0")``."""

    def make(**params: Any) -> TextArenaEnv:
        return TextArenaEnv(env_id, **params)

    return make
