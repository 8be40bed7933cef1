"""Dilemma: an iterated prisoner's dilemma with a message before every round.

In the spirit of Trust-and-Split style social dilemmas with cheap talk. The numbers:

* ``rounds`` rounds (default 5). In each, with ``talk=True``, both players first
  send a message at the same time (a message turn, see ``coplay.envs.talk``; free
  text by default, or ``message="symbols"``: ``[Say I will cooperate]``,
  ``[Say I will defect]``), then both choose ``[Cooperate]`` or ``[Defect]`` at the
  same time. With ``talk=False`` a round is the choice alone.
* Payoffs per round (row player's): both cooperate ``reward`` R = 3 each; both
  defect ``punishment`` P = 1 each; a defector against a cooperator gets
  ``temptation`` T = 5 and the cooperator ``sucker`` S = 0. They must satisfy
  T > R > P > S (defecting dominates within a round) and 2R > T + S (mutual
  cooperation beats taking turns exploiting each other).
* Each round's payoffs are rewarded when the round ends; the return is their sum
  (0 to 25 with the defaults). The game is general-sum.

Both players see the whole history (messages and choices); the only hidden thing is
the other's message or choice of the current step, made at the same time.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from coplay.envs import actions
from coplay.envs.chance import check_seed
from coplay.envs.talk import Talk
from coplay.types import Episode, GameKind, GameSpec, Observation, Turn

COOPERATE, DEFECT = "[Cooperate]", "[Defect]"
CHOICES = (COOPERATE, DEFECT)
SYMBOLS = ("I will cooperate", "I will defect")
"""Messages of the ``symbols`` form: a promise and a threat."""


def check_payoffs(t: float, r: float, p: float, s: float) -> None:
    """Reject payoffs that do not make a prisoner's dilemma (T > R > P > S, 2R > T + S)."""
    named = {"temptation": t, "reward": r, "punishment": p, "sucker": s}
    for name, payoff in named.items():
        # An infinite payoff passes both inequalities (-inf < 0) but makes every
        # return, and the spec's bounds, infinite.
        if not math.isfinite(payoff):
            raise ValueError(f"payoff {name} must be a finite number, got {payoff}")
    if not t > r > p > s:
        raise ValueError(f"payoffs must satisfy T > R > P > S, got T={t} R={r} P={p} S={s}")
    if not 2 * r > t + s:
        raise ValueError(f"payoffs must satisfy 2R > T + S, got 2R={2 * r} T+S={t + s}")


class DilemmaEnv:
    """Iterated prisoner's dilemma, simultaneous moves, optional cheap talk."""

    def __init__(
        self,
        *,
        talk: bool = True,
        message: str = "free",
        rounds: int = 5,
        temptation: float = 5.0,
        reward: float = 3.0,
        punishment: float = 1.0,
        sucker: float = 0.0,
        max_message_chars: int = 60,
    ) -> None:
        if not 1 <= rounds <= 50:
            raise ValueError(f"rounds must be in 1..50, got {rounds}")
        check_payoffs(temptation, reward, punishment, sucker)
        self.talk = Talk(message, SYMBOLS, max_message_chars) if talk else None
        self.rounds = rounds
        # payoff[(mine, theirs)] for the player who chose ``mine``.
        self.payoff = {
            (COOPERATE, COOPERATE): float(reward),
            (COOPERATE, DEFECT): float(sucker),
            (DEFECT, COOPERATE): float(temptation),
            (DEFECT, DEFECT): float(punishment),
        }
        self.spec = GameSpec(
            name="dilemma",
            num_players=2,
            kind=GameKind.GENERAL_SUM,
            max_turns=rounds * (2 if talk else 1),
            perfect_information=False,
            simultaneous=True,
            min_return=float(sucker) * rounds,
            max_return=float(temptation) * rounds,
        )
        self.reset(0)

    def reset(self, seed: int) -> None:
        """Start a new game; the game has no chance, so ``seed`` changes nothing (it is
        still checked, as every env checks it)."""
        check_seed(seed, owner=self.spec.name)
        self.said: list[tuple[str, str]] = []
        """Messages per round, (player 0's, player 1's)."""
        self.chose: list[tuple[str, str]] = []
        """Choices per finished round."""
        self.totals = [0.0, 0.0]

    # ------------------------------------------------------------------ protocol
    def _speaking(self) -> bool:
        return self.talk is not None and len(self.said) == len(self.chose)

    def players_to_act(self) -> list[int]:
        return [] if self.is_terminal() else [0, 1]

    def legal_actions(self) -> tuple[str, ...] | None:
        """Both players' legal actions now (None on a free-text message turn)."""
        if self.is_terminal():
            return ()
        return self.talk.legal_actions() if self._speaking() else CHOICES

    def parse_action(self, player: int, text: str) -> str | None:
        if self.is_terminal() or player not in (0, 1):
            return None
        if self._speaking():
            return self.talk.parse(text)
        return actions.parse_action(text, CHOICES)

    def step(self, actions_by_player: dict[int, str]) -> dict[int, float]:
        actions.check_acting(self.spec.name, actions_by_player, self.players_to_act())
        parsed = [self.parse_action(p, actions_by_player[p]) for p in (0, 1)]
        for p, a in enumerate(parsed):
            if a is None:
                raise ValueError(f"player {p}: {actions_by_player[p]!r} is not legal now")
        if self._speaking():
            self.said.append((self.talk.content(parsed[0]), self.talk.content(parsed[1])))
            return {0: 0.0, 1: 0.0}
        first, second = parsed
        gained = (self.payoff[first, second], self.payoff[second, first])
        self.chose.append((first, second))
        self.totals = [t + g for t, g in zip(self.totals, gained, strict=True)]
        return {0: gained[0], 1: gained[1]}

    def is_terminal(self) -> bool:
        return len(self.chose) >= self.rounds

    def returns(self) -> list[float]:
        return list(self.totals)

    # --------------------------------------------------------------- rendering
    def observe(self, player: int) -> Observation:
        return Observation(
            game=self.spec.name,
            player=player,
            text=self._text(player),
            legal_actions=self.legal_actions(),
        )

    def _text(self, player: int) -> str:
        pay = self.payoff
        lines = [
            f"Repeated dilemma, {self.rounds} rounds. Each round both players choose "
            "[Cooperate] or [Defect] at once.",
            f"Both cooperate: {pay[COOPERATE, COOPERATE]:g} each. "
            f"Both defect: {pay[DEFECT, DEFECT]:g} each. One defects: the defector "
            f"{pay[DEFECT, COOPERATE]:g}, the other {pay[COOPERATE, DEFECT]:g}.",
        ]
        other = 1 - player
        for i in range(len(self.said) if self.talk else len(self.chose)):
            line = f"Round {i + 1}:"
            if self.talk:
                line += f' you said "{self.said[i][player]}", other said "{self.said[i][other]}".'
            if i < len(self.chose):
                mine, theirs = self.chose[i][player], self.chose[i][other]
                line += f" You {mine}, other {theirs}: you got {self.payoff[(mine, theirs)]:g}."
            lines.append(line)
        lines.append(self._prompt(player))
        return "\n".join(lines)

    def _prompt(self, player: int) -> str:
        if self.is_terminal():
            return f"Game over. Your total: {self.totals[player]:g}."
        now = f"Round {len(self.chose) + 1} of {self.rounds}, your total so far {self.totals[player]:g}."
        if self._speaking():
            return f"{now} Send the other player a message."
        return f"{now} Choose [Cooperate] or [Defect]."


def episode_metrics(episodes: Sequence[Episode]) -> dict[str, float]:
    """Cooperation rate (choices), mutual cooperation rate (rounds), mean return.

    Rounds are the steps in which both players chose; message steps are skipped, and
    so is a round a forfeit ended (a player's move there was never made). A turn is a
    choice when its observation listed the choices: a free-text message turn lists no
    legal actions, and its played action is the text, which may read "[Defect]".
    """
    if not episodes:
        raise ValueError("episode_metrics needs at least one episode")
    steps = [
        [t.played_action for t in e.turns if t.step == step and _chose(t)]
        for e in episodes
        for step in sorted({t.step for t in e.turns})
    ]
    rounds = [r for r in steps if len(r) == 2 and all(a in CHOICES for a in r)]
    choices = [a for r in rounds for a in r]
    return {
        "cooperation_rate": float(np.mean([a == COOPERATE for a in choices])) if choices else 0.0,
        "mutual_cooperation_rate": (
            float(np.mean([r == [COOPERATE, COOPERATE] for r in rounds])) if rounds else 0.0
        ),
        "mean_return": float(np.mean([r for e in episodes for r in e.game_returns])),
    }


def _chose(turn: Turn) -> bool:
    """Whether ``turn`` was a choice of a round rather than a message."""
    return turn.observation.legal_actions == CHOICES
