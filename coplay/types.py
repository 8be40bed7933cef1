"""Core records and protocols: read this module first.

Everything that moves through the loop is one of these records:

    Env --observe--> Observation --Policy.act--> Decision --(engine)--> Turn
    Turn* --> Trajectory (one player, one episode) --> Episode (all players)

Records are frozen where the loop never needs to mutate them. Token ids and
log-probs are kept exactly as sampled: the learner never re-tokenises text.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import KW_ONLY, MISSING, dataclass, field, fields
from enum import StrEnum
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

if TYPE_CHECKING:
    from coplay.rollout.streams import SeatStream


class GameKind(StrEnum):
    """Payoff structure of a game, which decides how evaluation reads returns."""

    ZERO_SUM = "zero_sum"
    GENERAL_SUM = "general_sum"
    COOPERATIVE = "cooperative"


MAX_SEED = 2**31 - 1
"""Largest seed a run or a command takes: episode seeds are derived from it by
multiplying, and must stay within the generators' integers."""


@dataclass(frozen=True)
class GameSpec:
    """Static facts about a game that the engine and evaluation rely on."""

    name: str
    num_players: int
    kind: GameKind
    max_turns: int
    """Hard limit on decisions per episode; the engine truncates past it."""
    perfect_information: bool
    _: KW_ONLY
    min_return: float
    """Lowest return a player can get; a forfeit gives the offender this. No default:
    a guessed bound (it was +-1) let a forfeit beat a loss that pays less."""
    max_return: float
    simultaneous: bool = False
    openspiel_name: str | None = None
    """Set when exact evaluation through OpenSpiel is possible."""

    def holds(self, returns: Sequence[float]) -> bool:
        """Whether every return lies within ``[min_return, max_return]``, up to rounding
        of 1e-6 of the bounds' size (float32 rewards, numpy's in many environments, are
        off by up to 6e-8 of themselves each)."""
        slack = 1e-6 * max(1.0, abs(self.min_return), abs(self.max_return))
        return all(self.min_return - slack <= r <= self.max_return + slack for r in returns)


@dataclass(frozen=True)
class Observation:
    """What one player may see when asked to act; never another player's secrets."""

    game: str
    player: int
    text: str
    legal_actions: tuple[str, ...] | None = None
    """Bracketed action strings such as ``"[Bet]"``; None when the game has no list."""
    info_key: str | None = None
    """Exact information-state key (OpenSpiel's string) when the game has one."""
    messages: tuple[tuple[str, str], ...] | None = None
    """Optional chat form as (role, content) pairs; ``text`` is always present."""
    counterfactuals: tuple[str, ...] = ()
    """``text`` as it would read after each message the player could have received
    (every one, the actual included), for the positive-listening bonus; empty where the
    game has no finite set of messages or nothing was said."""
    history: tuple[tuple[Observation, Decision], ...] = ()
    """The player's own earlier decisions in this episode with what it saw at each
    (rejected answers included), oldest first: filled by the engine only for a policy
    that reads its conversation (``wants_history``, chat context), else empty."""

    @classmethod
    def fast(cls, **values: Any) -> Observation:
        """``Observation(**values)`` without the frozen dataclass's per-field
        ``object.__setattr__`` (``Decision.fast``): an env shows one per move."""
        return _built(cls, _OBSERVATION_DEFAULTS, values)


@dataclass(frozen=True)
class Decision:
    """A policy's answer to one observation, token-exact.

    ``logprobs`` has one entry per *unit* of the sampling distribution:
    one per generated token in free-text mode, exactly one in choice mode (the
    log-probability of the chosen action under the distribution renormalised
    over the legal actions). Scripted policies leave the token fields empty.
    """

    text: str
    action: str | None
    """The canonical legal action this text parsed to, or None if invalid."""
    policy_id: str
    policy_version: int = 0
    prompt_ids: tuple[int, ...] = ()
    response_ids: tuple[int, ...] = ()
    logprobs: tuple[float, ...] = ()
    choice_ids: tuple[tuple[int, ...], ...] = ()
    """Choice mode: the token ids of every legal action, in observation order."""
    choice_index: int = -1
    """Choice mode: index of the sampled action in ``choice_ids``."""
    counterfactual_prompt_ids: tuple[tuple[int, ...], ...] = ()
    """Choice mode: the prompt of each of the observation's ``counterfactuals``."""
    behavior_logprobs: tuple[float, ...] | None = None
    """Log-probs under the distribution the action was actually drawn from, where that
    differs from the policy's (``logprobs``): exploration mixes in uniform choices.
    None means the policy's own."""
    well_formed: bool | None = None
    """Free text with an answer format: written exactly in the format, and not refused
    by the game's reading of a message (the format reward reads it). None where no
    format applies (choices, scripted policies)."""

    @classmethod
    def fast(cls, **values: Any) -> Decision:
        """``Decision(**values)``, built without the frozen dataclass's ``__init__``,
        which sets each of its twelve fields through ``object.__setattr__`` (about 3 us
        a record; a rollout builds one per move). Fields not given take their
        defaults; ``text``, ``action`` and ``policy_id`` must be given."""
        return _built(cls, _DECISION_DEFAULTS, values)

    @property
    def valid(self) -> bool:
        return self.action is not None

    @property
    def trainable(self) -> bool:
        """True when the decision carries tokens a learner can score."""
        return bool(self.logprobs)


def _defaults(cls: type) -> dict[str, Any]:
    return {f.name: f.default for f in fields(cls) if f.default is not MISSING}


def _built(cls: type, defaults: dict[str, Any], values: dict[str, Any]) -> Any:
    """A frozen record of ``cls`` holding ``defaults`` updated by ``values``, set in its
    ``__dict__`` directly: equal, hashed and pickled like one from ``__init__``."""
    record = object.__new__(cls)
    record.__dict__.update(defaults)
    record.__dict__.update(values)
    return record


_OBSERVATION_DEFAULTS = _defaults(Observation)
_DECISION_DEFAULTS = _defaults(Decision)


@dataclass
class Turn:
    """One decision in an episode plus what the environment made of it."""

    player: int
    observation: Observation
    decision: Decision
    step: int
    """Index of the environment step this turn belongs to (shared by simultaneous moves)."""
    played_action: str | None = None
    """The action the environment applied (differs from the decision after a penalty)."""
    reward: float = 0.0
    """Immediate reward credited to this turn (dense rewards and invalid-action penalties)."""
    invalid_attempts: tuple[Decision, ...] = ()
    """Rejected decisions before this one (retry allowance)."""
    treatment: str | None = None
    """How an invalid action was handled: None, "retry", "penalty" or "forfeit"."""
    advantage: float = 0.0
    """Filled by an advantage estimator."""
    value: float | None = None
    """The critic's estimate of this player's return-to-go before the turn; filled by
    the trainer when the estimator needs values (GAE), else None."""


@dataclass
class Trajectory:
    """One player's turns in one episode."""

    player: int
    policy_id: str
    turns: list[Turn] = field(default_factory=list)
    ret: float = 0.0
    """The player's episode return including any penalties."""
    shaping: float = 0.0
    """The part of ``ret`` the game did not pay: invalid-answer penalties and format
    rewards, training signals that are not part of the game's value."""
    outcome: float | None = None
    """The part of ``ret`` that pays what the episode achieved (a solved puzzle, a
    reached goal), where the game tells it apart from dense step rewards
    (``HasOutcomes``); None where it does not, or when a forfeit ended the game."""


JointAction = tuple[tuple[int, str], ...]
"""One step's actions as (player, action text) pairs, sorted by player."""


@dataclass(frozen=True)
class Opening:
    """A first move assigned rather than sampled: where a game starts (a restart),
    ``player`` plays its legal action number ``index`` (modulo how many it has)."""

    player: int
    index: int


@dataclass
class Episode:
    """A finished game: every player's trajectory, returns and provenance."""

    game: str
    seed: int
    group_id: int
    seats: tuple[str, ...]
    """Policy id per seat."""
    trajectories: tuple[Trajectory, ...]
    returns: tuple[float, ...]
    truncated: bool = False
    forfeited_by: int | None = None
    """The seat whose forfeit ended the game; where several forfeited in one round of
    simultaneous moves, the lowest (each one's last turn has the ``forfeit`` treatment,
    and each got the minimum return)."""
    num_steps: int = 0
    prefix: tuple[JointAction, ...] = ()
    """Joint actions replayed after ``reset(seed)`` before play began (a restart);
    the episode's turns start at step ``len(prefix)`` and its returns count only
    what was earned after the restart."""
    opening: Opening | None = None
    """The first move after the prefix that was assigned rather than sampled."""

    @property
    def game_returns(self) -> tuple[float, ...]:
        """What the game paid each seat: ``returns`` less the training's shaping (its
        penalties and format rewards). Evaluation reads these, as the exact values do."""
        shaping = [t.shaping for t in self.trajectories] or [0.0] * len(self.returns)
        return tuple(r - s for r, s in zip(self.returns, shaping, strict=True))

    @property
    def start_step(self) -> int:
        """The first step played rather than replayed."""
        return len(self.prefix)

    @property
    def turns(self) -> list[Turn]:
        """All turns in play order."""
        return sorted(
            (t for traj in self.trajectories for t in traj.turns),
            key=lambda t: (t.step, t.player),
        )


@runtime_checkable
class Env(Protocol):
    """A multi-player, multi-turn text game.

    ``step`` takes the action text of every player in ``players_to_act()`` (one
    for turn-based games, several for simultaneous moves). Actions must already
    be valid (see ``parse_action``); the engine applies the invalid-action
    treatment before calling ``step``.
    """

    spec: GameSpec

    def reset(self, seed: int) -> None: ...

    def players_to_act(self) -> list[int]: ...

    def observe(self, player: int) -> Observation: ...

    def parse_action(self, player: int, text: str) -> str | None:
        """Canonical legal action named in ``text``, or None when there is none."""
        ...

    def step(self, actions: dict[int, str]) -> dict[int, float]:
        """Apply one action per acting player; return immediate rewards per player."""
        ...

    def is_terminal(self) -> bool: ...

    def returns(self) -> list[float]:
        """Final return per player (valid once terminal)."""
        ...


@runtime_checkable
class HasOutcomes(Protocol):
    """An ``Env`` whose return adds dense step rewards to an outcome reward it can give
    apart: what the episode achieved, whatever it was paid on the way (G-RA gates the
    step rewards on it, ``coplay.algos.advantages.gra``)."""

    def outcomes(self) -> list[float]:
        """The outcome reward per player so far (read when the episode ends or is
        truncated)."""
        ...


@runtime_checkable
class Truncates(Protocol):
    """An ``Env`` that may end an episode by a limit of its own rather than by the
    game's rules (a wrapped PettingZoo environment's truncation): ``is_terminal()``
    then holds and ``truncated`` says which (the episode is recorded as truncated)."""

    truncated: bool


@runtime_checkable
class Policy(Protocol):
    """Anything that can act: a language model, a scripted bot, a remote endpoint."""

    policy_id: str
    version: int

    def act(self, observations: Sequence[Observation]) -> list[Decision]: ...


@runtime_checkable
class Streamed(Protocol):
    """A policy that can draw each observation's sample from a generator of its own:
    the stream of the seat it plays in that game (``coplay.rollout.engine``), so a
    game's draws do not depend on which other games share the batch."""

    def act_streamed(
        self, observations: Sequence[Observation], streams: Sequence[SeatStream]
    ) -> list[Decision]: ...


@runtime_checkable
class Submits(Protocol):
    """A policy whose ``act`` can be split in two: its model's pass queued now, its
    decisions read when the returned function is called (the same decisions, drawn from
    ``streams`` where given, as ``Streamed``). Meanwhile the engine steps other games
    (``play_episodes(waves=)``), so a GPU's pass and the host's game steps overlap."""

    def submit(
        self, observations: Sequence[Observation], streams: Sequence[SeatStream] | None = None
    ) -> Callable[[], list[Decision]]: ...


@runtime_checkable
class Steerable(Protocol):
    """A policy that can answer with a move it is told to make, scored as its own: the
    decision carries the policy's log-prob of that move, as if it had sampled it."""

    def act_forced(
        self, observations: Sequence[Observation], indices: Sequence[int]
    ) -> list[Decision]: ...


@runtime_checkable
class TabularQueryable(Protocol):
    """A policy that can report its full distribution over the legal actions.

    Exact evaluation (exploitability) queries this once per information state.
    """

    def action_probs(self, observations: Sequence[Observation]) -> list[dict[str, float]]: ...
