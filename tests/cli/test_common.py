"""What the commands share: seed and port ranges, paths, ``--force``, the players a
checkpoint, bot or roster run names and the game they record, and a console that prints
data as text."""

import json
from pathlib import Path

import pytest

from coplay.cli import main
from tests.cli.helpers import SHAPELESS, TINY, TOURNEY, config_values, copy


@pytest.mark.parametrize("command", [["eval", "nash"], ["tournament", "random", "nash"]])
def test_a_seed_out_of_range_is_one_error_line(command, capsys):
    with pytest.raises(SystemExit):
        main([*command, "--game", "kuhn_poker", "--seed", "-1"])
    assert "argument --seed: a seed is 0 to 2147483647, got -1" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("command", "port", "message"),
    [
        (["play", "random", "--game", "kuhn_poker", "--web"], "99999", "a port is 0 to 65535"),
        (["serve", "runs/x"], "99999", "a port is 1 to 65535"),
        # 0 would serve on a free port but tell the clients remote:http://...:0
        (["serve", "runs/x"], "0", "a port is 1 to 65535, got 0"),
    ],
)
def test_a_port_out_of_range_is_one_error_line(command, port, message, capsys):
    with pytest.raises(SystemExit):
        main([*command, "--port", port])
    assert message in capsys.readouterr().err


@pytest.fixture(scope="module")
def bidding_run(tmp_path_factory):
    """A run on a user's own game (examples/bidding.py, module:factory)."""
    out = tmp_path_factory.mktemp("bidding") / "run"
    over = ["game.name=examples.bidding:make", "train.iterations=1", "rollout.games_per_iter=8"]
    over += ["train.eval_opponents=[random]"]
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(Path(__file__).resolve().parents[2])
        assert main(["train", "--quiet", "--out", str(out), *over, *TINY[4:]]) == 0
    return out


def test_a_custom_game_evaluates_and_plays_tournaments_without_naming_it(
    bidding_run, capsys, monkeypatch
):
    monkeypatch.chdir(Path(__file__).resolve().parents[2])
    assert main(["eval", str(bidding_run), "--episodes", "8"]) == 0
    assert "on examples.bidding:make" in capsys.readouterr().out
    argv = ["tournament", "--players", str(bidding_run), "random", "--episodes", "4"]
    assert main(argv) == 0
    assert "examples.bidding:make: mean return" in capsys.readouterr().out
    assert main([*argv[:-2], "--game", "examples.nope:make", "--episodes", "4"]) == 2
    assert "no module 'examples.nope'" in capsys.readouterr().err


def test_play_and_tournament_keep_a_checkpoints_parameters_however_the_game_is_spelled(
    three_player_run,
):
    from coplay.cli.common import players_game

    final = str(three_player_run / "checkpoints" / "final")
    for game in ("kuhn_poker", "openspiel:kuhn_poker"):
        assert players_game(game, [final, "random"]) == (game, {"players": 3})
    assert players_game("leduc_poker", [final, "random"]) == ("leduc_poker", {})


@pytest.mark.parametrize("game", [None, "kuhn_poker", "openspiel:kuhn_poker"])
def test_checkpoints_that_spell_one_game_two_ways_must_agree_on_its_parameters(monkeypatch, game):
    # --game openspiel:kuhn_poker played the 2-player checkpoint at 3 players, the first
    # one's; without --game, one game with the same parameters was "two games".
    from types import SimpleNamespace

    from coplay.cli import common
    from coplay.models.loading import PlayedGame

    games = {"three": PlayedGame("kuhn_poker", {"players": 3})}
    monkeypatch.setattr(common, "is_checkpoint_player", lambda spec: spec in games)
    monkeypatch.setattr(
        common, "saved_player", lambda spec: SimpleNamespace(game=lambda: games[spec])
    )
    games["two"] = PlayedGame("openspiel:kuhn_poker", {})
    with pytest.raises(
        ValueError, match="the checkpoints play openspiel:kuhn_poker with different"
    ):
        common.players_game(game, ["three", "two"])
    games["two"] = PlayedGame("openspiel:kuhn_poker", {"players": 3})
    assert common.players_game(game, ["three", "two"]) == (game or "kuhn_poker", {"players": 3})


# --- data on the console is text: ``[word]`` and ``:name:`` are never markup or emoji ---


def test_brackets_in_config_values_and_help_are_printed_as_they_are(capsys):
    assert main(["config", 'model.text.stop=["[/x]", ":smile:"]']) == 0  # was a MarkupError
    values = config_values(capsys.readouterr().out)
    assert values["train.eval_opponents"] == "[random, nash]"
    assert values["model.text.stop"] == "['[/x]', ':smile:']"
    assert main(["config"]) == 0
    assert "e.g. [mypkg.parts]: they" in capsys.readouterr().out
    assert main(["games"]) == 0
    assert "pip install 'coplay[textarena]'" in capsys.readouterr().out


def test_a_run_directory_with_brackets_is_named_whole(kuhn_run, tmp_path, capsys):
    out = tmp_path / "exp[seed1]"
    assert main(["train", "--quiet", "--out", str(out), *TINY, "train.iterations=1"]) == 0
    printed = capsys.readouterr().out
    assert f"coplay train kuhn_poker -> {out}" in printed
    assert f"run directory: {out}" in printed
    argv = [*TOURNEY, "--players", str(out), "[/nash]"]
    assert main(argv) == 2  # a player name is data in the error line too
    assert "unknown opponent '[/nash]'" in capsys.readouterr().err
    assert main([*TOURNEY, "--players", str(out), "random"]) == 0
    assert "exp[seed1]" in capsys.readouterr().out  # its column header


def test_force_moves_the_old_run_aside_and_starts_clean(kuhn_run, tmp_path, capsys):
    run = copy(kuhn_run, tmp_path / "run")
    (run / "checkpoints" / "iter_000099").mkdir()  # stale: the new run must not show it
    (run / "metrics.jsonl").write_text('{"iteration": 99}\n')
    over = [*TINY, "train.iterations=1", "train.save_every=1"]
    assert main(["train", "--quiet", "--force", "--out", str(run), *over]) == 0
    assert sorted(p.name for p in (run / "checkpoints").iterdir()) == ["final", "iter_000001"]
    rows = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["iteration"] for r in rows] == [0, 1]
    (old,) = tmp_path.glob("run.old-*")
    assert (old / "checkpoints" / "iter_000099").is_dir()
    assert f"moved the old run in {run} to {old}" in capsys.readouterr().out.replace("\n", "")


# --- --force moves nothing aside before the rest of the command is checked ---------------


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (
            ["train", "--out", "{run}", "model.path={run}/checkpoints/final"],
            "model.path {run}/checkpoints/final is inside {run}, which --force would move aside",
        ),
        (["train", "--out", "{run}", "--roster", "{tmp}/missing.yaml"], "does not exist"),
        (["train", "--out", "{run}", "train.opponent=bogus"], "unknown opponent 'bogus'"),
        (["train", "--out", "{run}", "train.eval_opponents=[bogus]"], "unknown opponent"),
        (["train", "--out", "{run}", "model.path={tmp}"], "no Hugging Face checkpoint at {tmp}"),
        (["league", "--out", "{run}", "--bots", "bogus"], "unknown opponent 'bogus'"),
        (["psro", "--out", "{run}", "--config", "{run}/config.yaml"], "--config {run}/config."),
    ],
)
def test_force_moves_nothing_before_the_other_arguments_are_checked(
    argv, message, kuhn_run, tmp_path, capsys
):
    run = copy(kuhn_run, tmp_path / "run")
    files = {p: p.read_bytes() for p in run.rglob("*") if p.is_file()}
    names = {"run": run, "tmp": tmp_path}
    assert main([*(a.format(**names) for a in argv), "--force", *SHAPELESS]) == 2
    err = capsys.readouterr().err.strip()
    assert message.format(**names) in err and len(err.splitlines()) == 1
    assert {p: p.read_bytes() for p in run.rglob("*") if p.is_file()} == files
    assert not list(tmp_path.glob("run.old-*"))


def test_force_puts_the_old_run_back_when_the_new_one_fails_unwritten(
    kuhn_run, tmp_path, capsys, monkeypatch
):
    from coplay.train import trainer

    def refused(cfg, out, fresh=True):
        raise ValueError("refused while setting up")

    monkeypatch.setattr(trainer, "setup", refused)
    run = copy(kuhn_run, tmp_path / "run")
    files = {p: p.read_bytes() for p in run.rglob("*") if p.is_file()}
    assert main(["train", "--quiet", "--out", str(run), "--force", *TINY]) == 2
    captured = capsys.readouterr()
    assert captured.err == "coplay train: error: refused while setting up\n"
    assert f"put the old run back in {run}" in captured.out
    assert {p: p.read_bytes() for p in run.rglob("*") if p.is_file()} == files
    assert not list(tmp_path.glob("run.old-*"))


def test_force_of_the_current_directory_is_one_error_line(kuhn_run, tmp_path, capsys, monkeypatch):
    run = copy(kuhn_run, tmp_path / "run")
    monkeypatch.chdir(run)
    assert main(["train", "--quiet", "--out", ".", "--force", *TINY]) == 2
    assert capsys.readouterr().err == (
        f"coplay train: error: cannot move {run} aside: it holds the current directory; "
        "run from outside it\n"
    )
    assert not list(tmp_path.glob("run.old-*"))


@pytest.mark.parametrize(
    "argv",
    [
        ["train", "--resume", "", *TINY],
        ["train", "--out", "", *TINY],
        ["psro", "--resume", "", "--iterations", "1", "--oracle", "exact", *TINY],
        ["league", "--out", "", *TINY],
        ["report", "x", "--out", ""],
        [*TOURNEY, "--players", "random", "nash", "--out", ""],
    ],
)
def test_an_empty_path_is_refused_not_taken_for_the_default(argv, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit):
        main(argv)
    assert "an empty path names nothing" in capsys.readouterr().err
    assert not list(tmp_path.iterdir())  # no runs/<preset> started instead


def test_a_nash_folder_does_not_hide_the_nash_bot(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "nash").mkdir()
    assert main([*TOURNEY, "--players", "random", "nash"]) == 0


def _fake_roster_run(path):
    for role in ("alice", "bob"):
        (path / "checkpoints" / "final" / role).mkdir(parents=True)
        (path / "checkpoints" / "final" / role / "config.json").write_text("{}")
    return path


@pytest.mark.parametrize(
    "argv",
    [
        [*TOURNEY, "--players", "{run}", "random"],
        ["tournament", "--players", "{run}", "random"],
        ["play", "{run}", "--game", "kuhn_poker"],
        ["eval", "{kuhn}", "--opponent", "{run}"],
    ],
)
def test_a_roster_run_as_a_player_names_its_folders_not_a_missing_role_option(
    argv, kuhn_run, tmp_path, capsys
):
    run = _fake_roster_run(tmp_path / "roster")
    assert main([a.format(run=run, kuhn=kuhn_run) for a in argv]) == 2
    assert capsys.readouterr().err.endswith(
        f"error: {run} is a roster run with policies alice, bob: pass one policy's folder, "
        f"e.g. {run / 'checkpoints' / 'final' / 'alice'}\n"
    )


@pytest.mark.parametrize(("driver", "trace"), [("league", "snapshots"), ("psro", "psro.jsonl")])
@pytest.mark.parametrize("command", ["train", "driver"])
def test_a_population_run_that_lost_its_settings_is_named_not_resumed_as_a_training_run(
    kuhn_run, tmp_path, capsys, driver, trace, command
):
    # A league without league.yaml was advised, and let, to resume as a plain run: it
    # would train on without its league.
    run = copy(kuhn_run, tmp_path / "run")
    (run / trace).mkdir() if trace == "snapshots" else (run / trace).write_text("")
    files = {p: p.read_bytes() for p in run.rglob("*") if p.is_file()}
    command = driver if command == "driver" else command
    assert main([command, "--resume", str(run), "train.iterations=3"]) == 2
    what = f"a {driver} run, but" if command == driver else f"a {driver} run;"
    assert capsys.readouterr().err == (
        f"coplay {command}: error: {run} is {what} its settings file {driver}.yaml is "
        f"missing: put it back, then coplay {driver} --resume {run}\n"
    )
    assert {p: p.read_bytes() for p in run.rglob("*") if p.is_file()} == files


@pytest.mark.parametrize("command", ["train", "league"])
def test_a_run_directory_as_model_path_names_its_checkpoint(kuhn_run, tmp_path, capsys, command):
    out = tmp_path / "o"
    assert main([command, "--out", str(out), *SHAPELESS, f"model.path={kuhn_run}"]) == 2
    final = kuhn_run / "checkpoints" / "final"
    assert capsys.readouterr().err == (
        f"coplay {command}: error: no Hugging Face checkpoint at {kuhn_run} (config.json "
        f"missing); {kuhn_run} is a run directory: give its checkpoint, {final}\n"
    )
    assert not out.exists()
