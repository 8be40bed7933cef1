"""Bidding: a two-player auction with private values, a complete coplay game.

Each player values the prize privately at 1 to 4 (drawn from the seed). Player 0 bids
0 to 3; player 1 sees that bid (not the value behind it) and bids 0 to 3. The higher
bid wins, player 0 on a tie, and pays its bid: the winner's return is its value minus
its bid, the loser's 0. Check it with ``coplay check-env examples.bidding:make``;
docs/envs.md shows how to register and train it.
"""

from __future__ import annotations

import numpy as np

from coplay.envs import parse_action
from coplay.types import GameKind, GameSpec, Observation

BIDS = tuple(f"[Bid {b}]" for b in range(4))


class Bidding:
    """The auction as an ``Env``: turn-based, two players, general-sum."""

    spec = GameSpec(
        name="bidding",
        num_players=2,
        kind=GameKind.GENERAL_SUM,
        max_turns=2,
        perfect_information=False,
        min_return=-2.0,  # value 1, won with a bid of 3
        max_return=4.0,  # value 4, won with a bid of 0
    )

    def reset(self, seed: int) -> None:
        rng = np.random.default_rng(seed)  # all randomness comes from the seed
        self.values = [int(v) for v in rng.integers(1, 5, size=2)]
        self.bids: list[int] = []

    def players_to_act(self) -> list[int]:
        return [] if self.is_terminal() else [len(self.bids)]

    def observe(self, player: int) -> Observation:
        seen = f"Player 0 bid {self.bids[0]}.\n" if player == 1 and self.bids else ""
        legal = BIDS if player in self.players_to_act() else ()
        text = (
            "Auction: the higher bid wins the prize and pays its bid (player 0 wins ties).\n"
            f"You are player {player}. You value the prize at {self.values[player]}.\n"
            f"{seen}Your legal actions: {' '.join(legal)}\n"
        )
        # Everything this player knows, exactly: its value and player 0's bid, if made.
        key = f"p{player} v{self.values[player]} bids{self.bids[:1]}"
        return Observation("bidding", player, text, legal, info_key=key)

    def private_facts(self, player: int) -> list[str]:
        """Strings only ``player`` may see (the checker looks for them elsewhere)."""
        return [f"the prize at {self.values[player]}."]

    def parse_action(self, player: int, text: str) -> str | None:
        if player not in self.players_to_act():
            return None
        return parse_action(text, BIDS)

    def step(self, actions: dict[int, str]) -> dict[int, float]:
        player = len(self.bids)
        text = actions.get(player, "") if list(actions) == [player] else ""
        action = self.parse_action(player, text)
        if action is None:
            raise ValueError(f"player {player}: {text!r} is not one of {' '.join(BIDS)}")
        self.bids.append(BIDS.index(action))
        return {0: 0.0, 1: 0.0}  # the outcome is paid in returns()

    def is_terminal(self) -> bool:
        return len(self.bids) == 2

    def returns(self) -> list[float]:
        if not self.is_terminal():
            return [0.0, 0.0]
        winner = 0 if self.bids[0] >= self.bids[1] else 1
        out = [0.0, 0.0]
        out[winner] = float(self.values[winner] - self.bids[winner])
        return out


def make() -> Bidding:
    """The factory ``coplay check-env examples.bidding:make`` calls."""
    env = Bidding()
    env.reset(0)
    return env
