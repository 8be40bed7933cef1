"""``coplay play --web``: a scripted person clicks whole games in headless Chromium."""

from __future__ import annotations

import errno
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import urllib.error
import urllib.request
from functools import partial
from pathlib import Path

import pytest

from coplay.cli import main
from coplay.envs.registry import make_env
from coplay.models.checkpoints import find_policy
from coplay.play.session import Session
from coplay.play.transcripts import read_transcripts
from coplay.play.web import bind_error, make_server
from coplay.policies.scripted import make_scripted
from tests.play.ctrl_c import ctrl_c_as_at_a_terminal
from tests.play.garbage import Garbage
from tests.play.referee import kuhn_card, kuhn_returns, tic_tac_toe_board, tic_tac_toe_returns

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def browser():
    sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is not installed")
    chromium = shutil.which("chromium")
    if chromium is None:
        pytest.skip("no chromium on PATH (Debian: apt-get install chromium)")
    with sync_api.sync_playwright() as p:
        b = p.chromium.launch(executable_path=chromium, args=["--no-sandbox"])
        yield b
        b.close()


def serving(session: Session, transcripts: Path | None = None):
    """The page's server on a free port, in a thread; stop it with ``.shutdown()``."""
    server = make_server(session, port=0, transcripts=transcripts)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


@pytest.fixture
def page(browser):
    """A page that fails the test on any console error or uncaught exception."""
    pg = browser.new_page()
    errors: list[str] = []
    pg.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    pg.on("pageerror", lambda e: errors.append(str(e)))
    yield pg
    pg.close()
    assert errors == []


def kuhn_session(agent, name: str, **kwargs) -> Session:
    players = {"you": None, name: agent}
    return Session(partial(make_env, "kuhn_poker"), players, ["you", name], **kwargs)


def test_a_person_clicks_kuhn_against_the_trained_agent_and_the_result_follows_the_rules(
    tiny_run, page
):
    agent = find_policy(tiny_run).load(seed=0)
    server = serving(kuhn_session(agent, "agent", seed=11, show_probs=True, rotate=True))
    page.goto(server.url)
    plans = [["Bet", "Bet"], ["Pass", "Pass"], ["Pass", "Bet"], ["Bet", "Pass"]]
    total = 0.0
    for game, plan in enumerate(plans):
        you = game % 2
        page.wait_for_selector(f"#view-{you}")
        my_card = kuhn_card(page.inner_text(f"#view-{you}"))
        clicks = iter(plan)
        while page.is_hidden("#result"):
            # Only the person's own view is on the page during the game.
            assert page.locator("pre[id^=view-]").count() == 1
            assert page.inner_text("#views").count("Your card") == 1
            page.click(f"#moves button[data-action='[{next(clicks)}]']")
            page.wait_for_function(
                "document.querySelector('#moves button:not([disabled])') "
                "|| !document.querySelector('#result').hidden"
            )
        returns = json.loads(page.get_attribute("#result", "data-returns"))
        cards = [kuhn_card(t) for t in page.locator(".final-view").all_inner_texts()]
        moves = page.eval_on_selector_all("#log li", "items => items.map(i => i.dataset.action)")
        assert cards[you] == my_card
        assert tuple(returns) == kuhn_returns(cards, moves)
        word = "won" if returns[you] > 0 else "lost"
        assert page.inner_text("#headline") == f"You {word} ({returns[you]:+g})"
        assert page.locator("#log .probs .bar").count() >= 2  # the agent's distribution
        total += returns[you]
        assert page.inner_text(
            "#score tbody tr:first-child td:nth-child(2)"
        ) == f"{total:+g}".replace("+0", "0")
        page.click("#next-game")
        page.wait_for_function(
            f"document.querySelector('#title').textContent.includes('game {game + 2}')"
        )
    server.shutdown()


def test_a_person_clicks_tic_tac_toe_and_the_result_matches_the_board(page):
    players = {"you": None, "random": make_scripted("random", "tic_tac_toe", 3)}
    for seed, preference in ((0, "402681357"), (1, "012345678"), (2, "876543210")):
        session = Session(partial(make_env, "tic_tac_toe"), players, ["you", "random"], seed=seed)
        server = serving(session)
        page.goto(server.url)
        clicked = []
        while True:
            page.wait_for_function(
                "document.querySelector('#moves button:not([disabled])') "
                "|| !document.querySelector('#result').hidden"
            )
            if page.is_visible("#result"):
                break
            legal = page.eval_on_selector_all("#moves button", "bs => bs.map(b => b.textContent)")
            cell = next(c for c in preference if c in legal)
            clicked.append(int(cell))
            page.click(f"#moves button[data-action='[{cell}]']")
        board = tic_tac_toe_board(page.locator(".final-view").first.inner_text())
        assert all(board[c] == "x" for c in clicked)  # the clicked cells are the person's
        expected = tic_tac_toe_returns(board)
        word = {1.0: "won", 0.0: "drew", -1.0: "lost"}[expected[0]]
        assert page.inner_text("#headline") == f"You {word} ({expected[0]:+g})"
        assert json.loads(page.get_attribute("#result", "data-returns")) == list(expected)
        server.shutdown()


def test_the_replay_steps_through_a_recorded_game(tiny_run, page):
    session = kuhn_session(make_scripted("random", "kuhn_poker", 0), "random")
    server = serving(session, transcripts=tiny_run / "transcripts.jsonl")
    recorded = read_transcripts(tiny_run / "transcripts.jsonl")
    page.goto(server.url)
    page.click("#tab-replay")
    index = len(recorded) - 1
    page.wait_for_selector(f"#replay-game option[value='{index}']", state="attached")
    page.select_option("#replay-game", str(index))
    game = recorded[index]
    for at, turn in enumerate(game.turns):
        page.wait_for_function(
            "([game, at]) => { const pos = document.querySelector('#replay-pos');"
            " return pos.dataset.game === game && pos.dataset.at === at; }",
            arg=[str(index), str(at)],
        )
        assert page.inner_text("#replay-view").rstrip("\n") == turn.observation.rstrip("\n")
        assert page.inner_text("#replay-answer") == turn.text
        assert (
            page.text_content("#replay-who")
            == f"step {turn.step} · seat {turn.player} ({turn.policy_id})"
        )
        prob = re.search(r"probability (\d\.\d+)", page.inner_text("#replay-prob"))
        assert float(prob[1]) == pytest.approx(turn.probability, abs=5e-4)
        page.click("#replay-next")
    assert page.is_visible("#replay-end") and page.is_disabled("#replay-next")
    signed = [f"{r:+g}".replace("+0", "0") for r in game.returns]
    assert page.inner_text("#replay-returns") == ", ".join(
        f"seat {s} ({game.seats[s]}) {r}" for s, r in enumerate(signed)
    )
    page.click("#replay-prev")
    assert page.inner_text("#replay-view").rstrip("\n") == game.turns[-1].observation.rstrip("\n")
    server.shutdown()


def test_watching_two_policies_step_by_step(page):
    players = {
        "nash": make_scripted("nash", "kuhn_poker", 0),
        "random": make_scripted("random", "kuhn_poker", 1),
    }
    server = serving(Session(partial(make_env, "kuhn_poker"), players, ["nash", "random"]))
    page.goto(server.url)
    page.wait_for_selector("#view-1")  # a spectator sees every seat
    steps = 0
    while page.is_hidden("#result"):
        page.click("#step")
        steps += 1
        page.wait_for_function(
            f"document.querySelectorAll('#log li').length === {steps} "
            "|| !document.querySelector('#result').hidden"
        )
    assert 2 <= steps <= 3
    assert re.fullmatch(r"Seat [01] \((nash|random)\) won \(\+[12]\)", page.inner_text("#headline"))
    server.shutdown()


def get(url: str) -> tuple[int, dict]:
    try:
        with urllib.request.urlopen(url) as reply:
            return reply.status, json.loads(reply.read())
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read())


def post(url: str, body: dict) -> tuple[int, dict]:
    request = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST")
    try:
        with urllib.request.urlopen(request) as reply:
            return reply.status, json.loads(reply.read())
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read())


def test_the_api_sends_the_other_seats_view_only_once_the_game_is_over():
    session = kuhn_session(make_scripted("random", "kuhn_poker", 0), "random", seed=2)
    server = serving(session)
    status, state = get(server.url + "api/state")
    assert status == 200 and state["turns"] == [
        {"seat": 0, "legal": ["[Pass]", "[Bet]"], "numbered": True}
    ]
    assert "You are player 1" not in json.dumps(state)  # seat 1's card stays on the server
    status, state = post(server.url + "api/move", {"seat": 0, "move": "raise"})
    assert status == 400 and state == {"error": "'raise' is no legal move; legal: [Pass] [Bet]"}
    for seat in (None, [0], 0.7, True):  # a traceback and no reply, or seat 0, before
        status, state = post(server.url + "api/move", {"seat": seat, "move": "[Pass]"})
        assert status == 400 and state["error"].startswith("seat must be a seat number")
    request = urllib.request.Request(
        server.url + "api/move", data=b"{}", headers={"Content-Length": "-1"}, method="POST"
    )
    with pytest.raises(urllib.error.HTTPError) as err:  # read(-1) waited for the client
        urllib.request.urlopen(request, timeout=10)
    assert err.value.code == 400
    status, state = post(server.url + "api/move", {"seat": 0, "move": "[Pass]"})
    if state["outcome"] is None:  # the agent bet: its move is hidden, the view says it
        assert state["log"][1] == {"seat": 1, "player": "random", "hidden": True}
        assert "You are player 1" not in json.dumps(state)
        status, state = post(server.url + "api/move", {"seat": 0, "move": "[Bet]"})
    assert status == 200 and "You are player 1" in json.dumps(state["outcome"]["views"])
    assert post(server.url + "api/step", {})[0] == 400  # policies move by themselves here
    assert get(server.url + "api/nothing")[0] == 404
    server.shutdown()


def raw_request(server, head: bytes, body: bytes = b"") -> tuple[int, dict]:
    """One request written byte for byte (urllib would encode what these tests send
    as it is); the reply's status and JSON, or (0, {}) when the server sent none."""
    with socket.create_connection(server.server_address[:2], timeout=30) as conn:
        conn.sendall(head + b"\r\nContent-Length: %d\r\n\r\n" % len(body) + body)
        reply = b"".join(iter(lambda: conn.recv(65536), b""))
    if not reply:
        return 0, {}
    status_line, _, rest = reply.partition(b"\r\n")
    return int(status_line.split()[1]), json.loads(rest.partition(b"\r\n\r\n")[2])


@pytest.mark.parametrize("index", [b"\xb2", b"9" * 5000])
def test_a_replay_index_int_cannot_read_is_no_such_page(tmp_path, index, capsys):
    # '\xb2' reads as '²', which passes str.isdigit; int() refused it, and 5000 digits:
    # a traceback on the terminal and no reply.
    path = tmp_path / "transcripts.jsonl"
    record = {"iteration": 1, "game": "kuhn_poker", "seed": 3, "seats": ["a", "b"]}
    path.write_text(json.dumps(record | {"returns": [1, -1], "turns": []}) + "\n")
    session = kuhn_session(make_scripted("random", "kuhn_poker", 0), "random")
    server = serving(session, transcripts=path)
    status, reply = raw_request(server, b"GET /api/replays/" + index + b" HTTP/1.0")
    assert status == 404 and reply["error"].startswith("no such page: /api/replays/")
    assert get(server.url + "api/replays/0")[1]["iteration"] == 1
    server.shutdown()
    assert capsys.readouterr().err == ""


def test_a_body_nested_too_deeply_for_the_json_parser_is_a_bad_request(capsys):
    # json's parser recursed once per bracket: a RecursionError, a traceback on the
    # terminal and no reply.
    session = kuhn_session(make_scripted("random", "kuhn_poker", 0), "random")
    server = serving(session)
    for body in (b"[" * 60_000, b'{"seat": 0, "move": ' + b"[" * 60_000 + b"}"):
        status, reply = raw_request(server, b"POST /api/move HTTP/1.0", body)
        assert status == 400 and reply == {"error": "the request body is nested too deeply"}
    assert get(server.url + "api/state")[1]["log"] == []  # nothing was played
    server.shutdown()
    assert capsys.readouterr().err == ""


def test_a_client_gone_before_its_reply_leaves_the_terminal_quiet(capsys):
    # A tab closed while a policy thought: the reply's write failed with a broken pipe,
    # and the server printed its traceback into the person's terminal.
    session = kuhn_session(make_scripted("random", "kuhn_poker", 0), "random")
    server = make_server(session, port=0)
    for gone in (BrokenPipeError, ConnectionResetError):
        try:
            raise gone("the client went away")
        except gone:
            server.handle_error(None, ("127.0.0.1", 1))
    assert capsys.readouterr().err == ""
    try:
        raise RuntimeError("a policy's own failure")
    except RuntimeError:
        server.handle_error(None, ("127.0.0.1", 1))
    assert "RuntimeError: a policy's own failure" in capsys.readouterr().err  # still told
    server.server_close()


def test_the_command_serves_the_page_and_stops_on_ctrl_c_in_one_line():
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    command = [sys.executable, "-m", "coplay.cli", "play", "random", "--game", "tic_tac_toe"]
    child = subprocess.Popen(
        [*command, "--web", "--port", "0"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=ctrl_c_as_at_a_terminal,
    )
    try:
        line = child.stdout.readline()
        url = re.fullmatch(
            r"coplay play: open (http://127\.0\.0\.1:\d+/) \(Ctrl-C stops\)\n", line
        )[1]
        with urllib.request.urlopen(url) as reply:
            assert "<title>coplay play</title>" in reply.read().decode()
        assert get(url + "api/state")[1]["game"] == "tic_tac_toe"
    finally:
        child.send_signal(signal.SIGINT)
        out, err = child.communicate(timeout=30)
    assert child.returncode == 0 and err == ""
    assert (
        out
        == "\ncoplay play: stopped; score after 0 games: you +0 (0 won, 0 drawn, 0 lost) · random +0 (0 won, 0 drawn, 0 lost)\n"
    )


def test_a_move_made_on_an_older_table_is_refused_not_played_elsewhere():
    # A second tab (or a page left behind a deal) played its move into whatever game
    # was on the table: game 1's [Bet] became game 2's first move.
    session = kuhn_session(make_scripted("random", "kuhn_poker", 0), "random", seed=2)
    server = serving(session)
    _, seen = get(server.url + "api/state")
    at = [seen["number"], len(seen["log"])]
    status, now = post(server.url + "api/move", {"seat": 0, "move": "[Pass]", "at": at})
    assert status == 200
    status, refused = post(server.url + "api/move", {"seat": 0, "move": "[Bet]", "at": at})
    assert status == 409 and refused["error"].startswith("the table has moved on")
    assert get(server.url + "api/state")[1]["log"] == now["log"]  # nothing was played
    assert post(server.url + "api/move", {"seat": 0, "move": "[Bet]", "at": "x"})[0] == 400
    server.shutdown()


def test_a_port_in_use_and_an_address_not_of_this_machine_get_their_own_advice():
    session = kuhn_session(make_scripted("random", "kuhn_poker", 0), "random", seed=2)
    server = serving(session)
    try:
        with pytest.raises(OSError, match=r"; pass another --port$"):
            make_server(session, port=server.server_address[1])
    finally:
        server.shutdown()
        server.server_close()
    # 192.0.2.1 is a documentation address (RFC 5737): no machine of ours has it.
    host_advice = r"pass an address of this machine as --host \(127\.0\.0\.1: this machine only, "
    with pytest.raises(OSError, match=rf"^cannot serve on 192\.0\.2\.1:0: .*; {host_advice}"):
        make_server(session, host="192.0.2.1", port=0)


@pytest.mark.parametrize(
    ("code", "advice"),
    [
        (errno.EADDRINUSE, "pass another --port"),
        (errno.EACCES, "pass another --port"),  # a port below 1024, not as root
        (errno.EADDRNOTAVAIL, "pass an address of this machine as --host (127.0.0.1: "),
        (socket.EAI_NONAME, "pass an address of this machine as --host (127.0.0.1: "),
    ],
)
def test_only_a_port_taken_or_not_allowed_is_the_ports_fault(code, advice):
    reason = f"reason {code}"
    error = bind_error("10.0.0.5", 80, OSError(code, reason))
    assert str(error).startswith(f"cannot serve on 10.0.0.5:80: {reason}; {advice}")
    assert len(str(error).splitlines()) == 1


@pytest.mark.parametrize(
    "problem", ["address not of this machine", "name that does not resolve", "port in use"]
)
def test_the_command_line_gives_the_servers_advice_for_the_same_problem(problem, capsys):
    # The command line checks --host before the players are built, and it said "cannot
    # serve on --host 192.0.2.1: ...; pass an address of this machine (...)" where the
    # server said "cannot serve on 192.0.2.1:8765: ...; pass an address of this machine
    # as --host (...)": two sentences for one problem.
    session = kuhn_session(make_scripted("random", "kuhn_poker", 0), "random")
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        host, port = {
            "address not of this machine": ("192.0.2.1", 8765),  # RFC 5737
            "name that does not resolve": ("no-such-host.invalid", 8765),  # RFC 2606
            "port in use": ("127.0.0.1", taken.getsockname()[1]),
        }[problem]
        with pytest.raises(OSError) as served:
            make_server(session, host=host, port=port)
        argv = ["play", "random", "--game", "kuhn_poker", "--web", "--host", host]
        assert main([*argv, "--port", str(port)]) == 2
    assert capsys.readouterr().err == f"coplay play: error: {served.value}\n"


def test_the_page_shows_what_a_forfeiting_policy_wrote(page):
    # The outcome said only "seat 1 (garbage) forfeited"; its answers were dropped.
    session = kuhn_session(Garbage("I fold?"), "garbage")
    server = serving(session)
    status, state = post(server.url + "api/move", {"seat": 0, "move": "[Bet]"})
    forfeit = state["outcome"]["forfeit"]
    assert status == 200 and state["outcome"]["forfeited_by"] == 1
    assert forfeit["answers"] == ["I fold? (1)", "I fold? (2)", "I fold? (3)"]
    assert forfeit["view"] == state["outcome"]["views"][1]
    page.goto(server.url)
    page.wait_for_selector("#result:not([hidden])")
    assert page.inner_text("#forfeit").splitlines() == [
        f"seat 1 (garbage), answer {i}: I fold? ({i})" for i in (1, 2, 3)
    ]
    server.shutdown()
