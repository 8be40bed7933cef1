"""Signalling: a cooperative referential game, the sender talks and the receiver picks.

After Lewis signalling games as used in emergent communication (Lazaridou et al.,
2017, arXiv 1612.07182). The numbers:

* Items: a colour (red, green, blue, yellow) and a shape (circle, square, triangle,
  star), 16 items. ``reset(seed)`` draws ``candidates`` distinct items (default 4,
  2 to 16) and one of them as the target.
* Sender (player 0) sees the target only, as in Lewis's game (listing the
  distractors too made the prompt longer and kept the tiny model from learning a
  code within a few minutes), and sends one message.
  By default (``message="symbols"``) the message is one of ``symbols`` abstract
  symbols (default 16, 2 to 26), offered as the legal actions ``[Say A]``,
  ``[Say B]``, ...: 16 symbols can name every item, and a choice among a handful of
  single tokens is what a tiny model learns to use within minutes. ``message="free"``
  lets it write up to ``max_message_chars`` characters instead (default 20).
* Receiver (player 1) sees the candidates in its own order, shuffled independently
  of the draw (so the position says nothing about the target), and the message, and
  names one: ``[Pick red circle]``. Naming rather than numbering the candidate makes
  decoding a message one association (symbol to item) instead of a search for the
  item's position, which a tiny model learns much sooner.
* Both players get 1 when the receiver picks the target, else 0 (cooperative); the
  same is the game's outcome (``outcomes``), which invalid-action penalties leave alone.
  With ``talk=False`` the sender never acts and the receiver guesses: success 1/K.
"""

from __future__ import annotations

import string
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from coplay.envs import actions
from coplay.envs.chance import check_seed
from coplay.envs.talk import Talk
from coplay.types import Episode, GameKind, GameSpec, Observation

COLOURS = ("red", "green", "blue", "yellow")
SHAPES = ("circle", "square", "triangle", "star")
NUM_ITEMS = len(COLOURS) * len(SHAPES)
SENDER, RECEIVER = 0, 1


def item_name(item: int) -> str:
    """Item ``i`` is colour ``i // 4`` and shape ``i % 4``.

    >>> item_name(0), item_name(7)
    ('red circle', 'green star')
    """
    return f"{COLOURS[item // len(SHAPES)]} {SHAPES[item % len(SHAPES)]}"


def pick(item: int) -> str:
    """The receiver's action that picks ``item``.

    >>> pick(7)
    '[Pick green star]'
    """
    return actions.bracket(f"Pick {item_name(item)}")


@dataclass(frozen=True)
class Scene:
    """The private draw of one game."""

    target: int
    others: tuple[int, ...]
    """The other candidates (ascending)."""
    receiver_view: tuple[int, ...]
    """All candidates in the order the receiver sees them."""


def draw_scene(seed: int, candidates: int = 4) -> Scene:
    """Target, distractors and the receiver's order of game ``seed``."""
    rng = np.random.default_rng(seed)
    chosen = [int(i) for i in rng.choice(NUM_ITEMS, size=candidates, replace=False)]
    view = tuple(int(i) for i in rng.permutation(chosen))
    return Scene(target=chosen[0], others=tuple(sorted(chosen[1:])), receiver_view=view)


class SignallingEnv:
    """Sender describes a target with one message; receiver picks it among candidates."""

    def __init__(
        self,
        *,
        talk: bool = True,
        message: str = "symbols",
        candidates: int = 4,
        symbols: int = 16,
        max_message_chars: int = 20,
    ) -> None:
        if not 2 <= candidates <= NUM_ITEMS:
            raise ValueError(f"candidates must be in 2..{NUM_ITEMS}, got {candidates}")
        if not 2 <= symbols <= 26:
            raise ValueError(f"symbols must be in 2..26, got {symbols}")
        alphabet = tuple(string.ascii_uppercase[:symbols])
        self.talk = Talk(message, alphabet, max_message_chars) if talk else None
        self.candidates = candidates
        self.spec = GameSpec(
            name="signalling",
            num_players=2,
            kind=GameKind.COOPERATIVE,
            max_turns=2 if talk else 1,
            perfect_information=False,
            min_return=0.0,
            max_return=1.0,
        )
        self.reset(0)

    def reset(self, seed: int) -> None:
        self.scene = draw_scene(check_seed(seed, owner=self.spec.name), self.candidates)
        self.message: str | None = None
        self.picked: int | None = None
        """The item the receiver picked."""

    def _sender_to_act(self) -> bool:
        return self.talk is not None and self.message is None

    def players_to_act(self) -> list[int]:
        if self.picked is not None:
            return []
        return [SENDER] if self._sender_to_act() else [RECEIVER]

    def legal_actions(self, player: int) -> tuple[str, ...] | None:
        """Legal actions of ``player`` now: None on a free-text message turn."""
        if player not in self.players_to_act():
            return ()
        if player == SENDER:
            return self.talk.legal_actions()
        return tuple(pick(c) for c in self.scene.receiver_view)

    def parse_action(self, player: int, text: str) -> str | None:
        legal = self.legal_actions(player)
        if legal is None:
            return self.talk.parse(text)
        return actions.parse_action(text, legal)

    def step(self, actions_by_player: dict[int, str]) -> dict[int, float]:
        acting = self.players_to_act()
        actions.check_acting(self.spec.name, actions_by_player, acting)
        player = acting[0]
        action = self.parse_action(player, actions_by_player[player])
        if action is None:
            raise ValueError(f"player {player}: {actions_by_player[player]!r} is not legal now")
        if player == SENDER:
            self.message = self.talk.content(action)
        else:
            self.picked = self.scene.receiver_view[self.legal_actions(player).index(action)]
        return {SENDER: 0.0, RECEIVER: 0.0}

    def is_terminal(self) -> bool:
        return self.picked is not None

    def returns(self) -> list[float]:
        hit = self.picked == self.scene.target
        return [float(hit)] * 2

    def outcomes(self) -> list[float]:
        """1 for both when the receiver picked the target, else 0 (``HasOutcomes``): the
        return itself, kept apart from the invalid-action penalties the engine adds."""
        return self.returns()

    def observe(self, player: int) -> Observation:
        if player == SENDER:
            text, counterfactuals = self._sender_text(), ()
        else:
            text, counterfactuals = self._receiver_text(self.message), self._counterfactuals()
        return Observation(
            game=self.spec.name,
            player=player,
            text=text,
            legal_actions=self.legal_actions(player),
            counterfactuals=counterfactuals,
        )

    def _counterfactuals(self) -> tuple[str, ...]:
        """The receiver's text after every symbol the sender could have sent (positive
        listening); none for free text, which has no finite set, or before a message."""
        if self.talk is None or self.message is None or self.talk.form != "symbols":
            return ()
        return tuple(self._receiver_text(symbol) for symbol in self.talk.symbols)

    def _sender_text(self) -> str:
        # The target comes last, next to the decision, where a small model finds it soonest.
        return (
            "Signalling game. You are the sender.\n"
            "Send a message so that the receiver picks the target.\n"
            f"Target: {item_name(self.scene.target)}."
        )

    def _receiver_text(self, message: str | None) -> str:
        view = ", ".join(item_name(c) for c in self.scene.receiver_view)
        said = "nothing" if message is None else f'"{message}"'
        return (
            "Signalling game. You are the receiver.\n"
            f"Candidates: {view}.\n"
            f"The sender says: {said}\n"
            "Pick the target."
        )


def episode_metrics(episodes: Sequence[Episode]) -> dict[str, float]:
    """Success rate: the share of episodes in which the receiver picked the target,
    read from the outcome (None after a forfeit), not from the return, which holds the
    invalid-action penalties."""
    if not episodes:
        raise ValueError("episode_metrics needs at least one episode")
    hits = [e.trajectories[RECEIVER].outcome == 1.0 for e in episodes]
    return {"success_rate": float(np.mean(hits))}
