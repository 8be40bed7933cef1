"""Games between people and policies, one at a time, independent of any screen or page.

A ``Session`` seats a policy or a person in every seat of a game and plays game after
game (seed ``seed + g`` for game ``g``), keeping a running score by player name. The
terminal and the web page deal a game, ask it who must answer, show that seat its own
observation, hand it the person's answer and let it ``advance``: every policy move up
to the next person's turn or the end of the game. What a person sees during a game is
their seat's observation, the game's own view of what that seat may know; every
seat's final view (the showdown) is part of the outcome, and so are a forfeiting
policy's view and refused answers.
"""

from __future__ import annotations

import reprlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace

from coplay.rollout.invalid import forfeit_returns
from coplay.types import Decision, Env, Observation, Policy, TabularQueryable, Truncates

PERSON = None
"""The seat value of a person (a policy seat holds its ``Policy``)."""
AGENT_RETRIES = 2
"""Extra answers a policy may give after one that names no legal move; then it forfeits."""


class PlayerFailed(ConnectionError):
    """A policy could not answer (a remote endpoint down): its seat forfeited the game,
    which is over, so the table goes on with the next deal."""


class IllegalMove(ValueError):
    """A person's answer that names no legal move; the message lists the legal ones."""


@dataclass(frozen=True)
class Move:
    """One seat's move, as the log and the showdown show it."""

    step: int
    seat: int
    player: str
    """The name of whoever sat there (``you``, a policy spec)."""
    action: str
    text: str
    """What the seat answered: the move for a person, a text policy's whole answer."""
    view: str
    """The seat's observation when it moved: private to that seat until the game ends."""
    probs: Mapping[str, float] | None = None
    """The policy's distribution over the legal moves, when asked for and known."""


@dataclass(frozen=True)
class Forfeit:
    """A policy's forfeit: its seat's view at that turn and the answers it gave there,
    none of which named a legal move (fewer, or none, when it could not answer)."""

    seat: int
    player: str
    view: str
    answers: tuple[str, ...] = ()


@dataclass(frozen=True)
class Outcome:
    """How a game ended: returns per seat and every seat's final view."""

    returns: tuple[float, ...]
    views: tuple[str, ...]
    truncated: bool = False
    forfeit: Forfeit | None = None

    @property
    def forfeited_by(self) -> int | None:
        return None if self.forfeit is None else self.forfeit.seat


@dataclass
class Tally:
    """One player's running score: the sum of its returns and its wins, draws, losses."""

    total: float = 0.0
    wins: int = 0
    draws: int = 0
    losses: int = 0


def verdict(returns: Sequence[float], seat: int) -> str:
    """``won`` (the one best return), ``drew`` (tied best) or ``lost``; a single
    player's game is ``scored``.

    >>> verdict([1.0, -1.0], 0), verdict([0.0, 0.0], 1), verdict([-2.0, 2.0], 0)
    ('won', 'drew', 'lost')
    """
    if len(returns) == 1:
        return "scored"
    best = max(returns)
    if returns[seat] < best:
        return "lost"
    return "won" if list(returns).count(best) == 1 else "drew"


def read_move(text: str, observation: Observation, parse: Callable[[str], str | None]) -> str:
    """The legal move a person's answer names: the move itself (brackets and case
    optional), its number in the list (where moves are not numbers themselves), or any
    text the game parses; else ``IllegalMove``.

    >>> obs = Observation("kuhn_poker", 0, "", legal_actions=("[Pass]", "[Bet]"))
    >>> read_move("bet", obs, lambda t: None), read_move("1", obs, lambda t: None)
    ('[Bet]', '[Pass]')
    """
    answer = text.strip()
    legal = observation.legal_actions
    if legal is None:  # a free-text turn: the game reads the text
        action = parse(answer) if answer else None
        if action is None:
            raise IllegalMove(f"the game does not accept {quoted(answer)} here; write a message")
        return action
    by_name = {_bare(a).lower(): a for a in legal}
    if _bare(answer).lower() in by_name:
        return by_name[_bare(answer).lower()]
    number = number_below(answer, len(legal) + 1) if numbered(legal) else None
    if number:
        return legal[number - 1]
    action = parse(answer)
    if action is None:
        raise IllegalMove(f"{quoted(answer)} is no legal move; legal: {' '.join(legal)}")
    return action


_QUOTE = reprlib.Repr()
_QUOTE.maxstring = 60


def quoted(answer: str) -> str:
    """``answer`` quoted in an error, cut in the middle when long: a pasted page must
    not push the legal moves that follow it off the screen.

    >>> quoted("raise"), len(quoted("x" * 10_000))
    ("'raise'", 60)
    """
    return _QUOTE.repr(answer)


def numbered(legal: Sequence[str]) -> bool:
    """Whether moves can be picked by number: not where a move's name is a number
    (tic-tac-toe's cells), which would make "3" mean two things."""
    return not any(_bare(a).isdigit() for a in legal)


def number_below(text: str, limit: int) -> int | None:
    """The number ``text`` writes, when it is one below ``limit``; else None. ASCII
    decimal digits only: ``str.isdigit`` also holds for '²', and ``int`` refuses that
    and a number of more than 4300 digits, both of which a person may type.

    >>> number_below("2", 3), number_below("\u00b2", 3), number_below("1" * 5000, 3)
    (2, None, None)
    """
    digits = text.lstrip("0") or "0"
    if not (text.isascii() and text.isdigit()) or len(digits) > len(str(limit)):
        return None
    return int(digits) if int(digits) < limit else None


def _bare(action: str) -> str:
    return action.strip().removeprefix("[").removesuffix("]").strip()


class Session:
    """Game after game of one game between the named ``players``.

    ``players`` maps a name to its policy, or to ``PERSON``; ``lineup`` names who sits
    in each seat in the first game, and with ``rotate`` it turns by one seat every
    game. ``show_probs`` asks policies for their distribution over the legal moves at
    each of their moves (``Move.probs``). ``score`` is kept by name.
    """

    def __init__(
        self,
        make_env: Callable[[], Env],
        players: Mapping[str, Policy | None],
        lineup: Sequence[str],
        *,
        seed: int = 0,
        rotate: bool = False,
        show_probs: bool = False,
    ) -> None:
        unknown = sorted(set(lineup) - set(players))
        if unknown:
            raise ValueError(f"the lineup names unknown players: {', '.join(unknown)}")
        seats = make_env().spec.num_players
        if len(lineup) != seats:
            raise ValueError(f"the game has {seats} seats but the lineup names {len(lineup)}")
        self.make_env, self.players, self.lineup = make_env, dict(players), tuple(lineup)
        self.seed, self.rotate, self.show_probs = seed, rotate, show_probs
        self.games_played = 0
        self.score = {name: Tally() for name in self.lineup}
        self.env: Env | None = None
        self.moves: list[Move] = []
        """The moves of the game on the table (or the last one), in order."""
        self.outcome: Outcome | None = None
        """How the game on the table ended; None while it runs."""
        self._answers: dict[int, str] = {}
        self._steps = 0
        self._seats = self.lineup
        self._histories: dict[int, list[tuple[Observation, Decision]]] = {}
        """Per seat, its policy's decisions so far with what it saw (rejected ones too),
        for a policy that reads its conversation (``wants_history``), as in training."""

    # ----------------------------------------------------------------- who sits
    def seats(self) -> tuple[str, ...]:
        """Who sits in each seat in the game on the table (before the first: the lineup)."""
        return self._seats

    def _lineup_of(self, game: int) -> tuple[str, ...]:
        turn = game % len(self.lineup) if self.rotate else 0
        return self.lineup[-turn:] + self.lineup[:-turn] if turn else self.lineup

    @property
    def deal_seed(self) -> int:
        """The seed of the game on the table (or of the last one)."""
        return self.seed + max(self.games_played - 1, 0)

    @property
    def games_finished(self) -> int:
        return self.games_played - (self.env is not None and self.outcome is None)

    def person_seats(self) -> list[int]:
        return [s for s, name in enumerate(self.seats()) if self.players[name] is PERSON]

    # ---------------------------------------------------------------- the game
    def new_game(self) -> None:
        """Deal the next game (seed ``seed + games played``); ``advance`` plays it."""
        if self.env is not None and self.outcome is None:
            raise ValueError("the game on the table is not over")
        self.env, self.moves, self.outcome = self.make_env(), [], None
        self._answers, self._steps, self._histories = {}, 0, {}
        self._seats = self._lineup_of(self.games_played)
        self.env.reset(self.seed + self.games_played)
        self.games_played += 1

    def waiting(self) -> list[int]:
        """The person seats whose answer the game waits for (none when it is over)."""
        if self.env is None or self.outcome is not None:
            return []
        persons = set(self.person_seats())
        return [p for p in self.env.players_to_act() if p in persons and p not in self._answers]

    def shows(self, move: Move) -> bool:
        """Whether a person at this table may see ``move`` now: their own moves, every
        move of a game of perfect information, all once the game is over, when only
        policies play, or with ``show_probs`` (the person asked to look). Otherwise a
        move is known only through the person's own observation, as the game words it."""
        return (
            self.players[move.player] is PERSON
            or self.outcome is not None
            or self.show_probs
            or not self.person_seats()
            or self.env.spec.perfect_information
        )

    def view(self, seat: int) -> Observation:
        """What ``seat`` may see now: the game's own observation for that seat."""
        if self.env is None:
            raise ValueError("no game on the table; start one")
        return self.env.observe(seat)

    def answer(self, seat: int, text: str) -> str:
        """Take a person's answer for ``seat``: the legal move it names (``IllegalMove``
        otherwise). The move is played by the next ``advance``."""
        if seat not in self.waiting():
            raise IllegalMove(f"seat {seat} is not to move now")
        action = read_move(text, self.view(seat), lambda t: self.env.parse_action(seat, t))
        self._answers[seat] = action
        return action

    def advance(self, max_steps: int | None = None) -> list[Move]:
        """Play steps while no person's answer is missing: the policies answer, the
        game steps. Stops at a person's turn, at the end, or after ``max_steps``."""
        if self.env is None:
            raise ValueError("no game on the table; start one")
        played: list[Move] = []
        steps = 0
        while self.outcome is None and not self.waiting() and steps != max_steps:
            played += self._step()
            steps += 1
        return played

    def _step(self) -> list[Move]:
        env, seats = self.env, self.seats()
        acting = env.players_to_act()
        moves = []
        for p in acting:
            if p in self._answers:
                action = self._answers.pop(p)
                view = env.observe(p).text
                moves.append(Move(self._steps, p, seats[p], action, action, view))
                continue
            try:
                move = self._policy_move(p)
            except PlayerFailed:
                self.moves += moves  # the step's other choices stay in the log
                raise
            if isinstance(move, Forfeit):
                # The game applies none of this step's moves, but the log keeps what
                # the others chose in it, as a rollout keeps their turns.
                self.moves += moves
                self._finish(forfeit_returns(env.spec, p), forfeit=move)
                return moves
            moves.append(move)
        env.step({m.seat: m.action for m in moves})
        self.moves += moves
        self._steps += 1
        if env.is_terminal():
            self._finish(env.returns(), truncated=isinstance(env, Truncates) and env.truncated)
        elif self._steps >= env.spec.max_turns:
            self._finish(env.returns(), truncated=True)
        return moves

    def _policy_move(self, seat: int) -> Move | Forfeit:
        """The seat's policy's move; a ``Forfeit`` when it named no legal move in
        ``1 + AGENT_RETRIES`` answers."""
        name = self.seats()[seat]
        policy = self.players[name]
        obs = self.env.observe(seat)
        probs = None
        # A policy that writes has no exact choice distribution to show.
        writes = getattr(policy, "mode", "choice") == "text"
        if self.show_probs and obs.legal_actions and isinstance(policy, TabularQueryable):
            probs = None if writes else policy.action_probs([obs])[0]
        history = self._histories.setdefault(seat, [])
        reads = getattr(policy, "wants_history", False)
        refused: list[str] = []
        for _ in range(1 + AGENT_RETRIES):
            asked = replace(obs, history=tuple(history)) if reads else obs
            try:
                decision = policy.act([asked])[0]
            except OSError as err:
                forfeit = Forfeit(seat, name, obs.text, tuple(refused))
                self._finish(forfeit_returns(self.env.spec, seat), forfeit=forfeit)
                raise PlayerFailed(f"{name} could not answer and forfeits: {err}") from err
            history.append((obs, decision))
            if decision.action is not None:
                return Move(
                    self._steps, seat, name, decision.action, decision.text, obs.text, probs
                )
            refused.append(decision.text)
        return Forfeit(seat, name, obs.text, tuple(refused))

    def _finish(
        self, returns: Sequence[float], *, truncated: bool = False, forfeit: Forfeit | None = None
    ) -> None:
        views = tuple(self.env.observe(p).text for p in range(len(returns)))
        self.outcome = Outcome(tuple(float(r) for r in returns), views, truncated, forfeit)
        for seat, name in enumerate(self.seats()):
            tally = self.score[name]
            tally.total += returns[seat]
            word = verdict(returns, seat)
            tally.wins += word == "won"
            tally.draws += word == "drew"
            tally.losses += word == "lost"


def headline(returns: Sequence[float], seats: Sequence[str], persons: Sequence[int]) -> str:
    """``you won (+1)`` for a person; ``seat 0 (nash) won`` or ``a draw`` when watching.

    >>> headline([-1.0, 1.0], ["you", "nash"], [0]), headline([0.0, 0.0], ["a", "b"], [])
    ('you lost (-1)', 'a draw')
    """
    if persons:
        return f"you {verdict(returns, persons[0])} ({returns[persons[0]]:+g})"
    best = max(range(len(returns)), key=lambda s: returns[s])
    word = verdict(returns, best)
    if word == "drew":
        return "a draw"
    return f"seat {best} ({seats[best]}) {word} ({returns[best]:+g})"


def score_line(session: Session) -> str:
    """``score after 2 games: you +1 (1 won, 0 drawn, 1 lost) · nash -1 (...)``."""
    done = session.games_finished
    parts = [f"{name} {_tally(t)}" for name, t in session.score.items()]
    return f"score after {done} game{'s' * (done != 1)}: " + " · ".join(parts)


def _tally(t: Tally) -> str:
    return f"{t.total:+g} ({t.wins} won, {t.draws} drawn, {t.losses} lost)"
