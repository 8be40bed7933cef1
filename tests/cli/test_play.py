"""``coplay play``: the players it takes and the options it refuses."""

import pytest

from coplay.cli import main
from tests.cli.helpers import copy


def test_play_takes_a_run_whose_path_holds_an_equals_sign(kuhn_run, tmp_path, monkeypatch):
    seen = {}

    def play(make_env, players, **kwargs):
        seen.update(players)
        return 0

    monkeypatch.setattr("coplay.play.setup.play", play)
    run = copy(kuhn_run, tmp_path / "lr=0.1")
    assert main(["play", str(run), "--seed", "1"]) == 0
    assert sorted(p is None for p in seen.values()) == [False, True]  # the run and you


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (["random", "--port", "9000"], "--port is where the web page is served; add --web or"),
        (["random", "--host", "0.0.0.0"], "--host is where the web page is served; add --web or"),
        (["--watch", "random", "nash", "--seat", "1"], "--seat 1 is your seat, and with --watch"),
        (["random", "--web", "--games", "3"], "--games counts the games played in the terminal"),
    ],
)
def test_play_refuses_options_it_would_ignore(options, message, capsys, monkeypatch):
    monkeypatch.setattr("coplay.play.setup.play", lambda *a, **k: 0)  # nothing is played
    assert main(["play", "--game", "kuhn_poker", *options]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"coplay play: error: {message}") and len(err.splitlines()) == 1


def test_watching_with_alternate_seats_turns_the_policies_seats(capsys, monkeypatch):
    seen = {}

    def play(make_env, players, **kwargs):
        seen.update(kwargs)
        return 0

    monkeypatch.setattr("coplay.play.setup.play", play)
    argv = ["play", "--game", "kuhn_poker", "--watch", "random", "nash", "--seat", "alternate"]
    assert main(argv) == 0
    assert seen["rotate"] and seen["games"] == 1 and seen["web"] is None


def test_a_host_that_cannot_be_served_on_is_named_as_the_host(capsys, monkeypatch):
    monkeypatch.setattr("coplay.play.setup.play", lambda *a, **k: 0)  # nothing is served
    # 192.0.2.1 is reserved for documentation (RFC 5737): no machine has it.
    assert main(["play", "random", "--game", "kuhn_poker", "--web", "--host", "192.0.2.1"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("coplay play: error: cannot serve on 192.0.2.1:8765: ")
    assert "; pass an address of this machine as --host (" in err and "--port" not in err


@pytest.mark.parametrize("given", ["run", "checkpoint", "second"])
def test_the_web_page_replays_the_games_of_the_run_a_checkpoint_comes_from(
    kuhn_run, monkeypatch, given
):
    # A checkpoint inside a run (RUN/checkpoints/final) holds no transcripts: the page
    # replays the run's, whichever watched player is the saved one.
    import coplay.play.setup as setup_module

    asked = {}
    monkeypatch.setattr(setup_module, "play", lambda *a, **kw: asked.update(kw) or 0)
    final = str(kuhn_run / "checkpoints" / "final")
    watched = {"run": [str(kuhn_run), "nash"], "checkpoint": [final, "nash"]}
    watched["second"] = ["random", final]
    assert main(["play", "--web", "--watch", *watched[given]]) == 0
    assert asked["transcripts"] == kuhn_run / "transcripts.jsonl"
