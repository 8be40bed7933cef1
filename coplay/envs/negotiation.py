"""Negotiation: two players split a pool of items they value differently.

After "Deal or No Deal" (Lewis et al., 2017, arXiv 1706.05125). The numbers:

* Items: three types (book, hat, ball) with 1 to 3 of each. ``reset(seed)`` draws
  the counts uniformly among the count vectors that admit valuations (below).
* Valuations: each player's value per item is a non-negative integer, private, and
  the whole pool is worth ``total_value`` (default 10) to each player. The pair is
  drawn uniformly among pairs in which every item type is worth something to at
  least one player and at least one item type is worth something to both (so the
  players compete for it), as in the paper.
* Turns: player 0 moves first and the players alternate. With ``talk=True`` a turn
  is a message turn (see ``coplay.envs.talk``; free text by default, or
  ``message="symbols"``: ``[Say I want books]``, ``[Say I want hats]``,
  ``[Say I want balls]``) followed by one action:
  ``[Propose b h l]`` (the proposer keeps b books, h hats, l balls; the other gets
  the rest), ``[Accept]`` (the last proposal, only when there is one) or ``[Walk]``.
  With ``talk=False`` there are no message turns.
* End: an accepted proposal is a deal and each player gets its value of its share
  (0 to ``total_value``); a walk, or ``max_actions`` actions (default 8, both
  players together) without a deal, gives each player ``disagreement`` (default 0).
  The game is general-sum.

Observations show a player its own values, the counts and the public history
(messages and actions), never the other player's values.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache
from itertools import product

import numpy as np

from coplay.envs import actions
from coplay.envs.chance import check_seed
from coplay.envs.talk import Talk
from coplay.types import Episode, GameKind, GameSpec, Observation, Turn

ITEMS = ("book", "hat", "ball")
MAX_COUNT = 3
MAX_TOTAL_VALUE = 20
"""Valuation pairs are enumerated; beyond this there are too many to list quickly."""
ACCEPT, WALK = "[Accept]", "[Walk]"
SYMBOLS = ("I want books", "I want hats", "I want balls")
"""Messages of the ``symbols`` form: each names the item a player says it values most."""

Bundle = tuple[int, int, int]
"""A number of each item type (book, hat, ball)."""


def propose(keep: Bundle) -> str:
    """The action string of a proposal.

    >>> propose((1, 0, 2))
    '[Propose 1 0 2]'
    """
    return actions.bracket("Propose " + " ".join(map(str, keep)))


def value(values: Bundle, share: Bundle) -> int:
    """A player's value of a share: sum over item types of value x count.

    >>> value((2, 4, 0), (1, 1, 3))
    6
    """
    return sum(v * n for v, n in zip(values, share, strict=True))


@dataclass(frozen=True)
class Deal:
    """The private draw of one game: item counts and both players' values per item."""

    counts: Bundle
    values: tuple[Bundle, Bundle]


@cache
def _valuations(counts: Bundle, total: int) -> tuple[Bundle, ...]:
    """Every non-negative integer value vector worth ``total`` for the whole pool."""
    ranges = [range(total // n + 1) for n in counts]
    return tuple(v for v in product(*ranges) if value(v, counts) == total)


def _fair_pair(a: Bundle, b: Bundle) -> bool:
    every_item_wanted = all(x or y for x, y in zip(a, b, strict=True))
    contested = any(x and y for x, y in zip(a, b, strict=True))
    return every_item_wanted and contested


@cache
def _pairs(counts: Bundle, total: int) -> tuple[tuple[Bundle, Bundle], ...]:
    vals = _valuations(counts, total)
    return tuple((a, b) for a in vals for b in vals if _fair_pair(a, b))


@cache
def _count_options(total: int) -> tuple[Bundle, ...]:
    """Count vectors with at least one fair valuation pair."""
    counts = product(range(1, MAX_COUNT + 1), repeat=len(ITEMS))
    return tuple(
        c
        for c in counts
        if any(_fair_pair(a, b) for a in _valuations(c, total) for b in _valuations(c, total))
    )


def draw_deal(seed: int, total_value: int = 10) -> Deal:
    """Counts and valuations of game ``seed`` (uniform as the module docstring says)."""
    rng = np.random.default_rng(seed)
    options = _count_options(total_value)
    counts = options[int(rng.integers(len(options)))]
    pairs = _pairs(counts, total_value)
    return Deal(counts=counts, values=pairs[int(rng.integers(len(pairs)))])


def _numbers(bundle: Bundle) -> str:
    return " ".join(map(str, bundle))


def _rest(counts: Bundle, keep: Bundle) -> Bundle:
    """What the other player gets when one keeps ``keep``."""
    return tuple(c - k for c, k in zip(counts, keep, strict=True))


class NegotiationEnv:
    """Two-player item split with private values, optional talk, alternating turns."""

    def __init__(
        self,
        *,
        talk: bool = True,
        message: str = "free",
        max_actions: int = 8,
        total_value: int = 10,
        disagreement: float = 0.0,
        max_message_chars: int = 60,
    ) -> None:
        if max_actions < 2:
            raise ValueError(
                f"max_actions must be >= 2 (a proposal and a reply), got {max_actions}"
            )
        if not 2 <= total_value <= MAX_TOTAL_VALUE:
            raise ValueError(f"total_value must be in 2..{MAX_TOTAL_VALUE}, got {total_value}")
        if not 0 <= disagreement <= total_value:
            raise ValueError(f"disagreement must be in 0..total_value, got {disagreement}")
        self.talk = Talk(message, SYMBOLS, max_message_chars) if talk else None
        self.max_actions = max_actions
        self.total_value = total_value
        self.disagreement = float(disagreement)
        self.spec = GameSpec(
            name="negotiation",
            num_players=2,
            kind=GameKind.GENERAL_SUM,
            max_turns=max_actions * (2 if talk else 1),
            perfect_information=False,
            min_return=0.0,
            max_return=float(total_value),
        )
        self.reset(0)

    def reset(self, seed: int) -> None:
        self.deal = draw_deal(check_seed(seed, owner=self.spec.name), self.total_value)
        self.player = 0
        self.speaking = self.talk is not None
        self.events: list[tuple[int, str, str]] = []
        """Public history: (actor, "says" or "does", message or canonical action)."""
        self.table: tuple[int, Bundle] | None = None
        """The last proposal: (proposer, what the proposer keeps)."""
        self.outcome: str | None = None
        self.actions_taken = 0

    # ------------------------------------------------------------------ protocol
    def players_to_act(self) -> list[int]:
        return [] if self.outcome else [self.player]

    def legal_actions(self) -> tuple[str, ...] | None:
        """The current turn's legal actions (None on a free-text message turn)."""
        if self.speaking:
            return self.talk.legal_actions()
        ranges = [range(n + 1) for n in self.deal.counts]
        proposals = tuple(propose(k) for k in product(*ranges))
        return proposals + ((ACCEPT,) if self.table else ()) + (WALK,)

    def parse_action(self, player: int, text: str) -> str | None:
        if self.outcome or player != self.player:
            return None
        if self.speaking:
            return self.talk.parse(text)
        return actions.parse_action(text, self.legal_actions())

    def step(self, actions_by_player: dict[int, str]) -> dict[int, float]:
        actions.check_acting(self.spec.name, actions_by_player, self.players_to_act())
        text = actions_by_player[self.player]
        action = self.parse_action(self.player, text)
        if action is None:
            raise ValueError(f"player {self.player}: {text!r} is not a legal action now")
        if self.speaking:
            self.events.append((self.player, "says", self.talk.content(action)))
            self.speaking = False
            return {0: 0.0, 1: 0.0}
        self._act(action)
        return {0: 0.0, 1: 0.0}

    def _act(self, action: str) -> None:
        self.events.append((self.player, "does", action))
        self.actions_taken += 1
        if action == ACCEPT:
            self.outcome = "deal"
        elif action == WALK:
            self.outcome = "walk"
        else:
            keep = tuple(int(x) for x in action.strip("[]").split()[1:])
            self.table = (self.player, keep)
            if self.actions_taken >= self.max_actions:
                self.outcome = "no deal"
        self.player = 1 - self.player
        self.speaking = self.talk is not None

    def is_terminal(self) -> bool:
        return self.outcome is not None

    def returns(self) -> list[float]:
        if self.outcome != "deal":
            return [self.disagreement] * 2 if self.outcome else [0.0, 0.0]
        proposer, keep = self.table
        shares = {proposer: keep, 1 - proposer: _rest(self.deal.counts, keep)}
        return [float(value(self.deal.values[p], shares[p])) for p in (0, 1)]

    # --------------------------------------------------------------- rendering
    def observe(self, player: int) -> Observation:
        return Observation(
            game=self.spec.name,
            player=player,
            text=self._text(player),
            # Nobody moves once the game is over: no moves to list.
            legal_actions=self.legal_actions() if player in self.players_to_act() else (),
        )

    def _text(self, player: int) -> str:
        # Bundles are written as three numbers (books hats balls) to keep prompts short.
        lines = [
            f"Negotiation, you are player {player}. Items (book hat ball): "
            f"{_numbers(self.deal.counts)}. Your values per item: "
            f"{_numbers(self.deal.values[player])} (all worth {self.total_value}; the other "
            "player's values are private).",
            f"A deal pays each the value of its share, no deal {self.disagreement:g}. "
            "[Propose b h l]: you keep b books, h hats, l balls.",
        ]
        lines += [self._event(player, *e) for e in self.events]
        lines.append(self._prompt(player))
        return "\n".join(lines)

    def _event(self, viewer: int, actor: int, kind: str, what: str) -> str:
        if kind == "says":
            return f'{"You" if actor == viewer else "Other"} said: "{what}"'
        if actor == viewer:
            return f"You: {what}"
        if what in (ACCEPT, WALK):
            return f"Other: {what}"
        keep = tuple(int(x) for x in what.strip("[]").split()[1:])
        return f"Other: {what}, you get {_numbers(_rest(self.deal.counts, keep))}"

    def _prompt(self, player: int) -> str:
        if self.outcome:
            return f"Game over: {self.outcome}."
        if player != self.player:
            return "Waiting for the other player."
        left = self.max_actions - self.actions_taken
        if self.speaking:
            return f"Your turn ({left} actions left). Send the other player a message."
        accept = " [Accept] their proposal," if self.table else ""
        return f"Your turn ({left} actions left). Propose,{accept} or [Walk]."


def episode_metrics(episodes: Sequence[Episode]) -> dict[str, float]:
    """Deal and walk-away rates and welfare (mean sum of both returns) of episodes.

    An episode is a deal when its last turn played a real ``[Accept]`` (the game ends
    there), a walk when it played ``[Walk]``. A turn is a move when its observation
    listed legal moves: a free-text message turn lists none and plays its text, which
    may read "[Accept]" right before the rollout's turn limit cuts the game off.
    """
    if not episodes:
        raise ValueError("episode_metrics needs at least one episode")
    last = [_move(e.turns[-1]) if e.turns else None for e in episodes]
    return {
        "deal_rate": float(np.mean([a == ACCEPT for a in last])),
        "walk_rate": float(np.mean([a == WALK for a in last])),
        "welfare": float(np.mean([sum(e.game_returns) for e in episodes])),
    }


def _move(turn: Turn) -> str | None:
    """The move ``turn`` played, None for a message (or a forfeit)."""
    return turn.played_action if turn.observation.legal_actions is not None else None
