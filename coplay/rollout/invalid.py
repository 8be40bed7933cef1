"""What happens when a player names no legal action: the game's configured treatment.

Three treatments, composable: a *retry* allowance (the policy is asked again, each
rejected answer kept on the turn), then, once retries are spent, either a *penalty*
(a negative reward to the offender and a uniformly random legal action is played in
its place) or a *forfeit* (the game ends; the offender gets the game's minimum
return, and so does each of several players who forfeit in one round of simultaneous
moves). Every treatment is recorded on the turn.
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
    # Finite: -inf passes ``le`` and would make the offender's return, and through it
    # every advantage of its group, NaN; the engine checks only the game's own returns.
    penalty: float = Field(
        -1.0,
        le=0.0,
        allow_inf_nan=False,
        description="Reward added to the offender's turn when on_fail='penalty'.",
    )


def forfeit_returns(spec: GameSpec, *offenders: int) -> list[float]:
    """Returns when ``offenders`` forfeit: each gets the minimum, the others share the loss.

    Zero-sum games stay zero-sum while someone is left to pay (the others split what
    the offenders lose); general-sum and cooperative games give the others 0, or the
    game's bound nearest it where 0 is no return the game pays (a dilemma whose worst
    outcome still pays: the others would get less than any game gives). Several
    offenders are players who all forfeit in one round of simultaneous moves: each is
    charged as a lone offender would be, so none of them is paid for the other's
    forfeit, and where every player forfeits, every player gets the minimum.

    The sum wins over the bounds: where several offenders of an n-player zero-sum game
    lose more than the others can be paid within ``max_return``, the others are paid
    above it. A zero-sum meta-game's ``nash`` solver refuses payoffs that do not sum
    to a constant, and no bound is read downstream; the offenders still get the least.
    """
    if not offenders:
        raise ValueError("forfeit_returns needs at least one offender")
    charged = set(offenders)
    neutral = min(max(0.0, spec.min_return), spec.max_return)
    out = [spec.min_return if p in charged else neutral for p in range(spec.num_players)]
    others = [p for p in range(spec.num_players) if p not in charged]
    if spec.kind is GameKind.ZERO_SUM and others:
        share = -spec.min_return * len(charged) / len(others)
        for p in others:
            out[p] = share
    return out
