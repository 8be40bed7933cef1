"""What happens when a player names no legal action: the game's configured treatment.

Three treatments, composable: a *retry* allowance (the policy is asked again, each
rejected answer kept on the turn), then, once retries are spent, either a *penalty*
(a negative reward to the offender and a uniformly random legal action is played in
its place) or a *forfeit* (the game ends; the offender gets the game's minimum
return). Every treatment is recorded on the turn.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from coplay.types import GameKind, GameSpec


class InvalidActionConfig(BaseModel):
    """Treatment of answers that name no legal action (free-text mode)."""

    model_config = ConfigDict(extra="forbid")

    retries: int = Field(0, ge=0, le=16, description="Extra attempts before the fallback.")
    on_fail: Literal["penalty", "forfeit"] = Field(
        "forfeit", description="After retries: 'penalty' (random legal move) or 'forfeit'."
    )
    penalty: float = Field(
        -1.0, le=0.0, description="Reward added to the offender's turn when on_fail='penalty'."
    )


def forfeit_returns(spec: GameSpec, offender: int) -> list[float]:
    """Returns when ``offender`` forfeits: it gets the minimum, the others share the loss.

    Zero-sum games stay zero-sum (the others split what the offender loses);
    general-sum and cooperative games give the others 0.
    """
    n = spec.num_players
    out = [0.0] * n
    out[offender] = spec.min_return
    if spec.kind is GameKind.ZERO_SUM and n > 1:
        share = -spec.min_return / (n - 1)
        for p in range(n):
            if p != offender:
                out[p] = share
    return out
