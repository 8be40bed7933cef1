"""``coplay play`` in the terminal: a person answers at a prompt, or watches policies play.

During a game a person sees only their own seat's observation and, in games of perfect
information (or with ``--show-probs``), the moves of the policies as they are made; when
the game ends every seat's final view and the whole move list are shown (the
showdown), then the running score. ``q``, Ctrl-D and Ctrl-C end the session with one
line, the score so far. Every line is printed with its control characters shown as
escapes: a policy's answer, or a message in a game's view, must not drive the terminal.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from coplay.play.session import (
    Forfeit,
    IllegalMove,
    Move,
    PlayerFailed,
    Session,
    headline,
    numbered,
    score_line,
)
from coplay.report.show import printable

QUIT = ("q", "quit", "exit")


class Stop(Exception):
    """The person asked to stop (``q``, Ctrl-D)."""


def play_in_terminal(
    session: Session,
    *,
    games: int,
    ask: Callable[[str], str] = input,
    say: Callable[[str], None] = print,
) -> int:
    """Play ``games`` games at the prompt; the exit status (0, also when stopped early)."""
    say = _printed_by(say)
    try:
        for _ in range(games):
            _one_game(session, games, ask, say)
    except (Stop, EOFError, KeyboardInterrupt):
        say("")
        say(f"coplay play: stopped; {score_line(session)}")
        return 0
    return 0


def _printed_by(say: Callable[[str], None]) -> Callable[[str], None]:
    return lambda line: say(printable(line))


def _one_game(session: Session, games: int, ask, say) -> None:
    session.new_game()
    spec = session.env.spec
    seats = session.seats()
    say("")
    say(
        f"== game {session.games_played} of {games} · {spec.name} · seed {session.deal_seed} · "
        + ", ".join(f"seat {s}: {name}" for s, name in enumerate(seats))
    )
    watching = not session.person_seats()
    shown = 0
    while True:
        # What the opening policy moves did before the first prompt, then each answer's.
        shown = _show_moves(session, shown, say, watching=watching)
        if session.outcome is not None:
            break
        if watching:
            _advance(session, say, max_steps=1)
            continue
        for seat in session.waiting():
            _ask_move(session, seat, ask, say)
        _advance(session, say)
    _show_outcome(session, say)


def _advance(session: Session, say, **kwargs) -> None:
    """``session.advance``; a policy that could not answer forfeited the game, which is
    over: say why, and the game's outcome follows as any other's (then the next deal)."""
    try:
        session.advance(**kwargs)
    except PlayerFailed as err:
        say(f"coplay play: {err}")


def _show_moves(session: Session, shown: int, say, *, watching: bool) -> int:
    """Print the moves made since ``shown`` that the person may see; the new count."""
    for move in session.moves[shown:]:
        if watching:
            say(f"-- seat {move.seat} ({move.player}) sees:")
            say(_indent(move.view))
        if session.players[move.player] is None:
            continue  # the person's own move
        say(move_line(move) if session.shows(move) else f"seat {move.seat} ({move.player}) moved")
    return len(session.moves)


def move_line(move: Move) -> str:
    """``seat 1 (nash) played [Bet]``, with the policy's distribution and its answer's
    text when they say more than the move."""
    line = f"seat {move.seat} ({move.player}) played {move.action}"
    if move.probs:
        line += "  probs: " + ", ".join(f"{a} {p:.2f}" for a, p in move.probs.items())
    if move.text.strip() and move.text.strip() != move.action:
        line += f"\n  answer: {move.text.strip()}"
    return line


def _ask_move(session: Session, seat: int, ask, say) -> None:
    view = session.view(seat)
    say(f"-- your turn, seat {seat}:")
    say(_indent(view.text))
    say(moves_line(view.legal_actions))
    while True:
        text = ask("your move (q quits)> ")
        if text.strip().lower() in QUIT:
            raise Stop
        try:
            session.answer(seat, text)
            return
        except IllegalMove as err:
            say(f"not a legal move: {err}")


def moves_line(legal: Sequence[str] | None) -> str:
    """The legal moves, numbered where numbers cannot be taken for moves.

    >>> moves_line(("[Pass]", "[Bet]")), moves_line(("[0]", "[4]"))
    ('moves: 1 [Pass]  2 [Bet]', 'moves: [0] [4]  (type the move)')
    >>> moves_line(None)
    'moves: write your message'
    """
    if legal is None:
        return "moves: write your message"
    if numbered(legal):
        return "moves: " + "  ".join(f"{i} {a}" for i, a in enumerate(legal, 1))
    return "moves: " + " ".join(legal) + "  (type the move)"


def _show_outcome(session: Session, say) -> None:
    out, seats = session.outcome, session.seats()
    persons = session.person_seats()
    if out.truncated:
        say("the game reached its move limit")
    if out.forfeit is not None:
        _show_forfeit(out.forfeit, say, watching=not persons, show_text=session.show_probs)
    say(f"game over: {headline(out.returns, seats, persons)}")
    say("returns: " + ", ".join(f"seat {s} {n} {r:+g}" for s, (n, r) in _by_seat(seats, out)))
    say("moves: " + " · ".join(f"seat {m.seat} {m.action}" for m in session.moves))
    for seat, view in enumerate(out.views):
        say(f"final view of seat {seat} ({seats[seat]}):")
        say(_indent(view))
    say(score_line(session))


def _show_forfeit(forfeit: Forfeit, say, *, watching: bool, show_text: bool) -> None:
    """The turn a policy forfeited: watching, its view, as every turn shows; its
    refused answers when watching or with ``--show-probs``, as a move's text shows."""
    who = f"seat {forfeit.seat} ({forfeit.player})"
    if watching:
        say(f"-- {who} sees:")
        say(_indent(forfeit.view))
    if not forfeit.answers:  # it could not answer: the line before says why
        say(f"{who} forfeited")
        return
    count = len(forfeit.answers)
    say(f"{who} forfeited: no legal move in {count} answer{'s' * (count != 1)}")
    if watching or show_text:
        for i, text in enumerate(forfeit.answers, 1):
            say(f"  answer {i}: {text.strip() or '(empty)'}")


def _by_seat(seats, out):
    return enumerate(zip(seats, out.returns, strict=True))


def _indent(text: str) -> str:
    return "\n".join("  " + line for line in text.rstrip("\n").splitlines())
