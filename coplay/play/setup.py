"""From the command line to a session: who sits where, then the terminal or the web page.

The command (``coplay.cli``) builds the policies, which needs the training stack; this
module seats them and starts the chosen screen.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from coplay.play.session import Session, number_below
from coplay.types import Env, Policy

PERSON_NAME = "you"


def seating(specs: Sequence[str], seats: int, *, seat: str | None) -> dict[str, str | None]:
    """Who sits where in the first game, in seat order: name -> player spec, None for
    the person (``seat``: a number or ``alternate``, which starts in seat 0; None when
    only policies play). The specs take the other seats in turn; a spec that sits twice
    is named ``SPEC #2`` the second time.

    >>> seating(["nash"], 2, seat="1")
    {'nash': 'nash', 'you': None}
    >>> seating(["nash", "random"], 3, seat=None)
    {'nash': 'nash', 'random': 'random', 'nash #2': 'nash'}
    """
    person = None if seat is None else _person_seat(seat, seats)
    names: dict[str, str | None] = {}
    others = iter(list(specs) * seats)
    for s in range(seats):
        if s == person:
            names[PERSON_NAME] = None
            continue
        spec = next(others)
        count = sum(n == spec or n.startswith(f"{spec} #") for n in names)
        names[f"{spec} #{count + 1}" if count else spec] = spec
    return names


def _person_seat(text: str, seats: int) -> int:
    if text == "alternate":
        return 0
    seat = number_below(text, seats)
    if seat is None:
        raise ValueError(f"--seat must be a seat from 0 to {seats - 1} or 'alternate', got {text}")
    return seat


def play(
    make_env: Callable[[], Env],
    players: Mapping[str, Policy | None],
    *,
    rotate: bool,
    games: int,
    seed: int,
    show_probs: bool,
    web: tuple[str, int] | None,
    transcripts: Path | None,
) -> int:
    """Play in the terminal (``games`` games) or serve the web page on ``web`` (host,
    port), which also replays ``transcripts`` where given."""
    if games <= 0:
        raise ValueError(f"--games must be positive, got {games}")
    session = Session(
        make_env, players, list(players), seed=seed, rotate=rotate, show_probs=show_probs
    )
    if web is not None:
        from coplay.play.web import serve

        return serve(session, host=web[0], port=web[1], transcripts=transcripts)
    from coplay.play.terminal import play_in_terminal

    return play_in_terminal(session, games=games)
