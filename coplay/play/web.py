"""``coplay play --web``: the same session in a local web page, plus replays of a run's games.

The standard library serves one page (``page.html``: its script and style inline, so
nothing is fetched from the network) and a small JSON API over one ``Session``:

    GET  /api/state           the table as the person may see it (``table_state``)
    POST /api/move            {"seat": 0, "move": "[Bet]"}: the person's move, then the
                              policies' moves up to the person's next turn
    POST /api/new             deal the next game (once the game on the table is over)
    POST /api/step            watching: one more step of the policies
    GET  /api/replays         the run's recorded games (``transcripts.jsonl``), summarised
    GET  /api/replays/<i>     one recorded game, turn by turn

A POST may say which table it was made on, ``"at": [game number, moves logged]`` (the
page always does): made on another, it is refused with 409 (``table_moved_on``).

A person's private information leaves the server only for the person's own seats: the
other seats' views and their hidden moves are sent once the game is over.
"""

from __future__ import annotations

import errno
import ipaddress
import json
import socket
import sys
import threading
from dataclasses import asdict
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from importlib.resources import files
from pathlib import Path
from typing import Any

from coplay.play.session import (
    IllegalMove,
    Move,
    PlayerFailed,
    Session,
    headline,
    number_below,
    numbered,
    score_line,
)
from coplay.play.transcripts import ReplayGame, read_transcripts

MAX_BODY = 64 * 1024
"""Largest request body read (a move is a few bytes)."""


def page() -> str:
    return files("coplay.play").joinpath("page.html").read_text()


def table_state(session: Session) -> dict[str, Any]:
    """The table as the person may see it: their own views and legal moves, the moves
    ``session.shows``, the score; every view and move once the game is over."""
    seats, persons = session.seats(), session.person_seats()
    watching = not persons
    over = session.outcome is not None
    shown = range(len(seats)) if watching else persons  # the others' are in the outcome
    return {
        "game": session.env.spec.name,
        "seed": session.deal_seed,
        "number": session.games_played,
        "seats": [
            {"seat": s, "name": n, "person": session.players[n] is None}
            for s, n in enumerate(seats)
        ],
        "watching": watching,
        "show_probs": session.show_probs,
        "views": [{"seat": s, "text": session.view(s).text} for s in shown],
        "turns": [_turn(session, s) for s in session.waiting()],
        "log": [_move(m, session.shows(m)) for m in session.moves],
        "outcome": _outcome(session) if over else None,
        "score": [{"name": name, **asdict(t)} for name, t in session.score.items()],
        "score_line": score_line(session),
    }


def _turn(session: Session, seat: int) -> dict[str, Any]:
    legal = session.view(seat).legal_actions
    return {
        "seat": seat,
        "legal": None if legal is None else list(legal),
        "numbered": legal is not None and numbered(legal),
    }


def _move(move: Move, shown: bool) -> dict[str, Any]:
    if not shown:
        return {"seat": move.seat, "player": move.player, "hidden": True}
    return {
        "seat": move.seat,
        "player": move.player,
        "action": move.action,
        "text": move.text,
        "probs": dict(move.probs) if move.probs else None,
        "hidden": False,
    }


def _outcome(session: Session) -> dict[str, Any]:
    out = session.outcome
    return {
        "returns": list(out.returns),
        "headline": headline(out.returns, session.seats(), session.person_seats()),
        "views": list(out.views),
        "truncated": out.truncated,
        "forfeited_by": out.forfeited_by,
        # What the forfeiting policy answered: shown once the game is over, as its moves.
        "forfeit": asdict(out.forfeit) if out.forfeit else None,
    }


def replay_summary(games: list[ReplayGame]) -> list[dict[str, Any]]:
    return [
        {
            "index": i,
            "iteration": g.iteration,
            "game": g.game,
            "seed": g.seed,
            "seats": list(g.seats),
            "returns": list(g.returns),
            "turns": len(g.turns),
        }
        for i, g in enumerate(games)
    ]


def play_move(session: Session, body: dict) -> None:
    """The person's move, then the policies' up to the person's next turn."""
    seat = body.get("seat")
    if type(seat) is not int:  # not a bool, a float or a list taken for a seat
        raise ValueError(f"seat must be a seat number, got {seat!r}")
    session.answer(seat, str(body.get("move", "")))
    session.advance()


def deal(session: Session, body: dict) -> None:
    """The next game, played up to the person's first turn (watching: not at all)."""
    session.new_game()
    if session.person_seats():
        session.advance()


def step(session: Session, body: dict) -> None:
    """Watching: one more step of the policies."""
    if session.person_seats():
        raise ValueError("policies move by themselves when a person plays")
    session.advance(max_steps=1)


def table_moved_on(session: Session, body: dict) -> str | None:
    """Why a request made on an older table is refused, or None. The page sends ``at``,
    the game number and moves logged that it showed; a second tab, or a page left
    behind a deal, would otherwise play its move into another turn or game."""
    at = body.get("at")
    if at is None:  # a client that does not say (scripts): the table as it is
        return None
    if not (isinstance(at, list) and len(at) == 2 and all(type(x) is int for x in at)):
        raise ValueError(f"at must be [game number, moves logged], got {at!r}")
    now = [session.games_played, len(session.moves)]
    if at != now:
        return (
            f"the table has moved on (game {now[0]}, {now[1]} moves, where this page showed "
            f"game {at[0]}, {at[1]} moves): it shows the table as it is now"
        )
    return None


ACTIONS = {"/api/move": play_move, "/api/new": deal, "/api/step": step}
"""What each POST does to the session, given the request's JSON body."""


class PlayServer(ThreadingHTTPServer):
    """The page's server: one session, its lock (requests come on threads), the replays."""

    daemon_threads = True

    def __init__(self, address: tuple[str, int], session: Session, replays: list[ReplayGame]):
        super().__init__(address, Handler)
        self.session, self.replays = session, replays
        self.lock = threading.Lock()

    def handle_error(self, request, client_address) -> None:
        """A client that went away before its reply (a tab closed or reloaded while a
        policy thought) is no error of the server's: nothing to tell the terminal."""
        if isinstance(sys.exc_info()[1], ConnectionError):
            return
        super().handle_error(request, client_address)

    @property
    def url(self) -> str:
        host, port = self.server_address[:2]
        return f"http://{host}:{port}/"


class Handler(BaseHTTPRequestHandler):
    server: PlayServer

    def log_message(self, format: str, *args: object) -> None:
        pass  # the page polls nothing, but a request log would drown the terminal

    def do_GET(self) -> None:
        path = self.path.split("?")[0]
        if path == "/":
            return self._send(HTTPStatus.OK, page().encode(), "text/html; charset=utf-8")
        if path == "/api/state":
            with self.server.lock:
                return self._json(table_state(self.server.session))
        if path == "/api/replays":
            return self._json(replay_summary(self.server.replays))
        if path.startswith("/api/replays/"):
            index = number_below(path.removeprefix("/api/replays/"), len(self.server.replays))
            if index is not None:
                return self._json(asdict(self.server.replays[index]))
        self._json({"error": f"no such page: {path}"}, HTTPStatus.NOT_FOUND)

    def do_POST(self) -> None:
        action = ACTIONS.get(self.path)
        if action is None:
            return self._json({"error": f"no such action: {self.path}"}, HTTPStatus.NOT_FOUND)
        try:
            body = self._body()
            with self.server.lock:
                moved_on = table_moved_on(self.server.session, body)
                if moved_on:
                    return self._json({"error": moved_on}, HTTPStatus.CONFLICT)
                action(self.server.session, body)
                state = table_state(self.server.session)
        except (IllegalMove, ValueError) as err:
            return self._json({"error": str(err)}, HTTPStatus.BAD_REQUEST)
        except PlayerFailed as err:  # the game is over as that seat's forfeit
            return self._json({"error": str(err)}, HTTPStatus.BAD_GATEWAY)
        self._json(state)

    def _body(self) -> dict:
        length = int(self.headers.get("Content-Length") or 0)
        if length < 0:  # read(-1) would wait for the client to close
            raise ValueError(f"Content-Length must not be negative, got {length}")
        if length > MAX_BODY:
            raise ValueError(f"request body of {length} bytes is too large")
        raw = self.rfile.read(length) if length else b"{}"
        try:
            body = json.loads(raw or b"{}")
        except json.JSONDecodeError as err:
            raise ValueError(f"the request body is no JSON: {err}") from None
        except RecursionError:  # json's parser recurses once per bracket
            raise ValueError("the request body is nested too deeply") from None
        if not isinstance(body, dict):
            raise ValueError("the request body must be a JSON object")
        return body

    def _json(self, data: Any, status: HTTPStatus = HTTPStatus.OK) -> None:
        self._send(status, json.dumps(data).encode(), "application/json")

    def _send(self, status: HTTPStatus, body: bytes, kind: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-store")
        self.end_headers()
        self.wfile.write(body)


def make_server(
    session: Session, *, host: str = "127.0.0.1", port: int = 0, transcripts: Path | None = None
) -> PlayServer:
    """A server for ``session`` (its first game dealt) on ``host:port`` (0: a free port),
    replaying the games of ``transcripts`` where that file exists."""
    replays = read_transcripts(transcripts) if transcripts is not None else []
    if session.env is None:
        deal(session, {})
    try:
        return PlayServer((host, port), session, replays)
    except OSError as err:
        raise bind_error(host, port, err) from None


def check_host(host: str, port: int) -> None:
    """Refuse a ``host`` the page cannot be served on before the players are built, in
    the words ``make_server`` would use. It binds as the server will (its address
    family) but on a free port: ``port`` is only named, and is tried when serving."""
    with socket.socket(PlayServer.address_family, socket.SOCK_STREAM) as probe:
        try:
            probe.bind((host, 0))
        except OSError as err:
            raise bind_error(host, port, err) from None


def bind_error(host: str, port: int, err: OSError) -> OSError:
    """Why the page cannot be served on ``host:port``, and what to pass instead, in one
    line: another port when it is taken or not allowed, otherwise an address of this
    machine (``host`` is a name that does not resolve, or an address it does not have)."""
    if err.errno in (errno.EADDRINUSE, errno.EACCES):
        advice = "pass another --port"
    else:
        advice = (
            "pass an address of this machine as --host "
            "(127.0.0.1: this machine only, 0.0.0.0: all its addresses)"
        )
    return OSError(f"cannot serve on {host}:{port}: {err.strerror or err}; {advice}")


def is_loopback(host: str) -> bool:
    """Whether ``host`` names this machine only (localhost, 127.0.0.0/8, ::1).

    >>> [is_loopback(h) for h in ("127.0.0.1", "localhost", "::1", "0.0.0.0", "10.0.0.5")]
    [True, True, True, False, False]
    """
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:  # a host name other than localhost: it may resolve anywhere
        return False


def serve(session: Session, *, host: str, port: int, transcripts: Path | None) -> int:
    """Serve the page until Ctrl-C; the exit status (0)."""
    server = make_server(session, host=host, port=port, transcripts=transcripts)
    if not is_loopback(host):
        # The page has no login: anyone who reaches the address plays the session.
        print(
            f"coplay play: warning: serving on {host}, reachable from other machines; "
            "the page has no login (the default --host 127.0.0.1 is local only)",
            file=sys.stderr,
            flush=True,
        )
    replays = f", {len(server.replays)} recorded games to replay" if server.replays else ""
    print(f"coplay play: open {server.url} (Ctrl-C stops){replays}", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        print(f"\ncoplay play: stopped; {score_line(session)}")
    finally:
        server.server_close()
    return 0
