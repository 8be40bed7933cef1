"""``coplay tournament``: the cross-play matrix and ratings, its results file, and bad
players refused in one line."""

import json

import pytest

from coplay.cli import main
from tests.cli.helpers import TOURNEY, penalty_run


def test_tournament_prints_matrix_and_ratings_and_writes_json(tmp_path, capsys):
    out = tmp_path / "t.json"
    argv = ["tournament", "--game", "kuhn_poker", "--players", "random", "nash"]
    assert main([*argv, "--episodes", "20", "--seed", "1", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "mean return of row vs column" in printed and "Elo" in printed and "α-rank" in printed
    data = json.loads(out.read_text())
    assert data["players"] == ["random", "nash"] and data["episodes_per_match"] == 20
    ret = data["mean_return"]
    assert ret[0][1]["value"] == pytest.approx(-ret[1][0]["value"])  # zero-sum, same games
    assert data["wins"][0][1] + data["wins"][1][0] + data["draws"][0][1] == 20
    assert sum(data["ratings"]["alpharank"]) == pytest.approx(1.0)


@pytest.mark.parametrize(
    ("players", "message"),
    [
        (["random"], "at least 2 policies"),
        (["random", "random"], "list each player once"),
        (["random", "grandmaster"], "unknown opponent"),
        (["random", "remote:http://127.0.0.1:9/v1"], "remote:URL#model"),
        (["random", "remote:http://127.0.0.1:9/v1#m"], "cannot reach"),
    ],
)
def test_tournament_bad_players_give_one_error_line(players, message, capsys):
    argv = ["tournament", "--game", "kuhn_poker", "--players", *players, "--episodes", "2"]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1


def test_tournament_refuses_a_single_player_game_in_one_line(capsys):
    # The lone seat counted every game as a win in a cross-play matrix of nonsense.
    argv = ["tournament", "--game", "frozen_lake", "--players", "random", "nash"]
    assert main([*argv, "--episodes", "2"]) == 2
    err = capsys.readouterr().err
    assert err == (
        "coplay tournament: error: a tournament needs a game of 2 or more players; "
        "'frozen_lake' has 1\n"
    )


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--workers", "2"], "--workers 2 needs Ray, which is not installed: pip install"),
        (["--workers", "-1"], "--workers must be 0 or more, got -1"),
        (["--ray-address", "auto"], "--ray-address needs --workers N (N > 0)"),
    ],
)
def test_tournament_workers_without_ray_or_bad_give_one_error_line(
    extra, message, capsys, monkeypatch
):
    monkeypatch.setattr("coplay.distributed.config.find_spec", lambda name: None)  # no ray
    argv = ["tournament", "--game", "kuhn_poker", "--players", "random", "nash", *extra]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1


def test_a_key_is_never_sent_over_plain_http_off_this_machine(capsys, monkeypatch):
    monkeypatch.setenv("EXAMPLE_KEY", "secret")
    players = ["random", "remote:http://api.example.com/v1#m@EXAMPLE_KEY"]
    assert main(["tournament", "--game", "kuhn_poker", "--players", *players]) == 2
    err = capsys.readouterr().err.strip()
    assert "refusing to send an API key over plain http:// to api.example.com" in err
    assert len(err.splitlines()) == 1 and "secret" not in err


def test_tournament_that_cannot_write_still_prints_its_results(tmp_path, capsys, monkeypatch):
    def full_disk(path, text):
        raise OSError(28, "No space left on device", str(path))

    monkeypatch.setattr("coplay.report.atomic.write_text", full_disk)
    out = tmp_path / "t.json"
    assert main([*TOURNEY, "--players", "random", "nash", "--out", str(out)]) == 2
    captured = capsys.readouterr()
    assert "mean return of row vs column" in captured.out and "Elo" in captured.out
    # stderr holds the progress line too; the error is one line of its own
    errors = [line for line in captured.err.splitlines() if line.startswith("coplay ")]
    assert errors == [
        f"coplay tournament: error: cannot write results to {out}: No space left on device"
    ]


def test_tournament_refuses_an_out_under_a_file_before_playing(tmp_path, capsys):
    (tmp_path / "afile").write_text("")
    out = tmp_path / "afile" / "t.json"
    assert main([*TOURNEY, "--players", "random", "nash", "--out", str(out)]) == 2
    captured = capsys.readouterr()
    assert "mean return" not in captured.out  # refused before a game was played
    assert captured.err == (
        f"coplay tournament: error: cannot write {out}: {tmp_path / 'afile'} is a file\n"
    )


def test_tournament_refuses_to_overwrite_results_unless_forced(tmp_path, capsys):
    out = tmp_path / "t.json"
    out.write_text("{}")
    argv = [*TOURNEY, "--players", "random", "nash", "--out", str(out)]
    assert main(argv) == 2
    assert "--force" in capsys.readouterr().err and out.read_text() == "{}"
    assert main([*argv, "--force"]) == 0
    assert json.loads(out.read_text())["complete"] is True
    (old,) = tmp_path.glob("t.json.old-*")
    assert old.read_text() == "{}"


class _FailingRemote:
    """A remote player whose endpoint goes down at its first request."""

    policy_id = "remote"

    def act(self, observations):
        raise ConnectionError("cannot reach http://127.0.0.1:9/v1: connection refused")


def test_tournament_saves_partial_results_when_a_player_fails(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(
        "coplay.policies.remote.remote_from_spec", lambda spec, api_key=None: _FailingRemote()
    )
    out = tmp_path / "t.json"
    players = ["random", "nash", "remote:http://127.0.0.1:9/v1#m"]
    assert main([*TOURNEY, "--players", *players, "--out", str(out)]) == 2
    captured = capsys.readouterr()
    assert "mean return of row vs column" in captured.out  # the matches played are shown
    err = captured.err.strip()
    assert "cannot reach" in err and len(err.splitlines()) == 1
    data = json.loads(out.read_text())
    assert data["complete"] is False and "random vs remote" in data["stopped"]
    ret = data["mean_return"]
    assert ret[0][1]["value"] == pytest.approx(-ret[1][0]["value"])  # random vs nash played
    assert ret[0][2]["value"] is None and ret[2][2]["value"] is None  # not played
    assert data["wins"][0][1] + data["wins"][1][0] + data["draws"][0][1] == 10


def test_tournament_plays_under_the_runs_game_settings_which_must_agree(
    writer, tmp_path, capsys, monkeypatch
):
    import coplay.eval.crossplay as crossplay

    asked = []
    real = crossplay.cross_play
    monkeypatch.setattr(
        crossplay, "cross_play", lambda *a, **kw: asked.append(kw) or real(*a, **kw)
    )
    run = penalty_run(writer, tmp_path / "run")
    argv = ["tournament", "--players", str(run), "random", "--episodes", "2"]
    assert main(argv) == 0
    assert asked[0]["max_turns"] == 3 and asked[0]["invalid"].on_fail == "penalty"
    assert "invalid answers on_fail=penalty" in capsys.readouterr().out.replace("\n", "")
    other = penalty_run(writer, tmp_path / "other", max_turns=4)
    assert main(["tournament", "--players", str(run), str(other), "--episodes", "2"]) == 2
    err = capsys.readouterr().err
    assert "the checkpoints' runs play kuhn_poker under different settings" in err
    assert len(err.splitlines()) == 1


@pytest.mark.parametrize(
    "second", ["kuhn/", "./kuhn", "kuhn/checkpoints/final", "{abs}", "../{name}/kuhn"]
)
def test_tournament_refuses_one_checkpoint_under_two_spellings(
    kuhn_run, capsys, monkeypatch, second
):
    monkeypatch.chdir(kuhn_run.parent)
    second = second.format(abs=kuhn_run, name=kuhn_run.parent.name)
    assert main([*TOURNEY, "--players", "kuhn", "random", second]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"coplay tournament: error: kuhn and {second} are the same checkpoint (")
    assert err.endswith("checkpoints/final); list each player once\n")


def test_a_three_player_tournament_shows_no_alpharank_and_says_why(tmp_path, capsys, monkeypatch):
    # Cross-play of 3 players is one policy against copies of another, not the meta-game
    # alpha-rank ranks: its column is a dash, the JSON null, and one line says why.
    import coplay.cli.tournament as tournament
    from coplay.policies.scripted import RandomPolicy

    def player(spec, game, params, *, seed):
        return RandomPolicy(seed, policy_id=spec)  # two distinct players of any game

    monkeypatch.setattr(tournament, "build_player", player)
    out = tmp_path / "t.json"
    argv = ["tournament", "--game", "openspiel:matching_pennies_3p", "--players", "random", "nash"]
    assert main([*argv, "--episodes", "4", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert tournament.NO_ALPHARANK in printed.replace("\n", " ")
    rows = [
        line for line in printed.splitlines() if line.lstrip("│ ").startswith(("random", "nash"))
    ]
    assert [row.rstrip(" │").endswith("-") for row in rows[-2:]] == [True, True]
    assert json.loads(out.read_text())["ratings"]["alpharank"] == [None, None]
