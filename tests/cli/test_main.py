"""``coplay`` itself: one error line and exit status 2 for every bad input, across the
commands; ``--debug``, Ctrl-C, overrides anywhere, piped tables, and every command's help."""

import shutil
from dataclasses import replace

import pytest

from coplay.cli import COMMANDS, main
from tests.cli.helpers import TOURNEY, config_values


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["train", "--preset", "nope"], "unknown preset"),
        (["train", "game.name=chess_x"], "unknown game"),
        (["train", "train.iterations=0"], "train.iterations"),
        (
            ["train", "model.backend=nope"],
            "model.backend: unknown model backend 'nope': use one of hf",
        ),
        (
            ["train", "model.backend=vllm", "model.engine.kv_cach_gb=1"],
            "model.engine.kv_cach_gb: Extra inputs are not permitted",
        ),
        (["train", "model.engine.max_model_len=64"], "model.backend=hf starts none"),
        (["train", "--config", "/nonexistent.yaml"], "does not exist"),
        (["eval", "/nonexistent/run"], "/nonexistent/run does not exist"),
        (["eval", "/nonexistent/run", "--game", "kuhn_poker"], "does not exist"),
    ],
)
def test_bad_input_gives_one_error_line(argv, message, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1


def test_overrides_may_stand_before_between_and_after_options(capsys):
    argv = ["config", "train.iterations=7", "--preset", "kuhn-selfplay", "train.seed=3"]
    assert main(argv) == 0
    values = config_values(capsys.readouterr().out)
    assert (values["train.iterations"], values["train.seed"]) == ("7", "3")
    with pytest.raises(SystemExit):  # options stay checked
        main(["config", "train.seed=3", "--bogus", "x"])
    assert "unrecognized arguments: --bogus" in capsys.readouterr().err


def test_piped_tables_keep_whole_keys_and_headers(capsys):
    from coplay.train.settings import build_config, describe

    assert main(["config"]) == 0
    out = capsys.readouterr().out
    keys = [k for k, _, _ in describe(build_config(preset="kuhn-selfplay"))]
    assert set(keys) <= set(config_values(out))  # every key whole, on its own row
    assert main(["tournament", "--game", "kuhn_poker", "--players", "random", "nash"]) == 0
    assert "OpenSkill mu ± sigma" in capsys.readouterr().out


def test_debug_shows_the_traceback(tmp_path):
    from coplay.train.config import ConfigError

    with pytest.raises(ConfigError, match="holds no run to resume"):
        main(["--debug", "train", "--resume", str(tmp_path)])
    with pytest.raises(ConfigError, match="holds no run to resume"):
        main(["train", "--resume", str(tmp_path), "--debug"])


def test_ctrl_c_outside_training_is_one_line(capsys, monkeypatch):
    def interrupt(args):
        raise KeyboardInterrupt

    monkeypatch.setitem(COMMANDS, "games", replace(COMMANDS["games"], run=interrupt))
    assert main(["games"]) == 130
    assert capsys.readouterr().err == "coplay games: interrupted\n"


def test_ctrl_c_while_the_command_line_is_read_is_one_line(capsys, monkeypatch):
    # Building the parser imports what its choices come from (psro's meta-solvers take
    # seconds): Ctrl-C there ended in a traceback.
    def interrupt(parser):
        raise KeyboardInterrupt

    monkeypatch.setitem(COMMANDS, "psro", replace(COMMANDS["psro"], add_arguments=interrupt))
    try:
        status = main(["games"])
    except KeyboardInterrupt:
        pytest.fail("Ctrl-C while the parser was built left main as a traceback")
    assert status == 130
    assert capsys.readouterr().err == "coplay: interrupted\n"


@pytest.mark.parametrize(("command", "missing"), [("eval", "path"), ("check-env", "game")])
def test_a_missing_argument_is_named_alone(command, missing, capsys):
    # The game parameters that may follow it were said to be required too.
    with pytest.raises(SystemExit):
        main([command])
    err = capsys.readouterr().err
    assert err.endswith(
        f"coplay {command}: error: the following arguments are required: {missing}\n"
    )


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["config", "a..b=1"], "override 'a..b=1': the key 'a..b' has an empty part"),
        (["config", "a.b=[1,"], "override 'a.b=[1,': the value is not valid YAML"),
        (
            ["config", "rollout.games_per_iter=99999999999999999999999"],
            "invalid config: rollout.games_per_iter: 99999999999999999999999 is beyond a 64-bit",
        ),
        (
            ["config", "algo.estimator=gae", "algo.params={gamma: abc}"],
            "invalid config: algo.params.gamma: Input should be a valid number",
        ),
    ],
)
def test_a_malformed_override_is_one_error_line_naming_it(argv, message, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"coplay config: error: {message}") and len(err.splitlines()) == 1


# --- the bad-input table of docs/results.md, command by command ---------------------------


BAD_INPUT = {
    "--out holds a run": (
        ["train", "--quiet", "--out", "{run}"],
        "{run} already holds a run; continue it with --resume {run}, or pass --force",
    ),
    "--out is a file": (["train", "--quiet", "--out", "{file}"], "output {file} is a file"),
    "--out under a file": (
        ["train", "--quiet", "--out", "{file}/run"],
        "cannot create {file}/run: {file} is a file",
    ),
    "--resume with --force": (
        ["train", "--quiet", "--resume", "{run}", "--force"],
        "--force starts a new run; it cannot go with --resume",
    ),
    "--resume changing the game": (
        ["train", "--quiet", "--resume", "{run}", "game.name=leduc_poker"],
        "cannot resume {run}: the saved weights do not fit the new config "
        "(game.name: 'kuhn_poker' -> 'leduc_poker')",
    ),
    "--resume ending before its saved iteration": (
        ["train", "--quiet", "--resume", "{run}", "train.iterations=1"],
        "{run} has already trained 2 iterations; train.iterations=1 would end before that",
    ),
    "override of the wrong type": (
        ["train", "--quiet", "--out", "{tmp}/x", "train.iterations=many"],
        "invalid config: train.iterations: Input should be a valid integer",
    ),
    "psro --out holds a run": (
        ["psro", "--out", "{run}"],
        "{run} already holds a run; continue it with --resume {run}, or pass --force",
    ),
    "league --out holds a run": (
        ["league", "--out", "{run}"],
        "{run} already holds a run; continue it with --resume {run}, or pass --force",
    ),
    "league --resume of a training run": (
        ["league", "--resume", "{run}"],
        "{run} is a training run, not a league run (it has no league.yaml); "
        "resume it with coplay train --resume {run}",
    ),
    "psro --resume of an empty folder": (
        ["psro", "--resume", "{tmp}"],
        "{tmp} holds no psro run to resume (it has no psro.yaml and config.yaml)",
    ),
    "league --resume with --force": (
        ["league", "--resume", "{run}", "--force"],
        "--force starts a new run; it cannot go with --resume",
    ),
    "tournament --out exists": (
        [*TOURNEY, "--players", "random", "nash", "--out", "{run}/summary.json"],
        "{run}/summary.json already exists; pass --force to move it aside",
    ),
}


@pytest.mark.parametrize("case", sorted(BAD_INPUT))
def test_bad_input_is_one_error_line_with_exit_status_2(case, kuhn_run, tmp_path, capsys):
    argv, message = BAD_INPUT[case]
    (tmp_path / "afile").write_text("")
    names = {"run": kuhn_run, "file": tmp_path / "afile", "tmp": tmp_path}
    before = (kuhn_run / "config.yaml").read_bytes(), (kuhn_run / "summary.json").read_bytes()
    capsys.readouterr()
    assert main([a.format(**names) for a in argv]) == 2
    err = [line for line in capsys.readouterr().err.splitlines() if line.startswith("coplay ")]
    assert len(err) == 1 and ": error: " + message.format(**names) in err[0], err
    # a refusal leaves the run as it was
    assert before == (
        (kuhn_run / "config.yaml").read_bytes(),
        (kuhn_run / "summary.json").read_bytes(),
    )


@pytest.mark.parametrize("command", ["train", "league", "psro"])
def test_a_run_whose_saved_settings_were_emptied_is_refused_not_resumed_with_defaults(
    command, kuhn_run, tmp_path, capsys
):
    # An emptied psro.yaml resumed a finished 1-response run to 8 responses; an emptied
    # config.yaml or league.yaml resumed with the defaults, or failed far from the file.
    run = tmp_path / "run"
    shutil.copytree(kuhn_run, run)
    emptied = run / ("config.yaml" if command == "train" else f"{command}.yaml")
    emptied.write_text("")
    before = (run / "metrics.jsonl").read_bytes()
    assert main([command, "--resume", str(run), "train.iterations=3"]) == 2
    err = capsys.readouterr().err
    assert f"{emptied} is empty" in err and len(err.splitlines()) == 1
    assert (run / "metrics.jsonl").read_bytes() == before


@pytest.mark.parametrize("command", ["train", "config", "league"])
def test_a_config_that_is_a_directory_is_named_so(command, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "conf").mkdir()
    assert main([command, "--config", "conf"]) == 2
    assert capsys.readouterr().err == (
        f"coplay {command}: error: config file conf is a directory, not a YAML file\n"
    )
    assert [p.name for p in tmp_path.iterdir()] == ["conf"]  # no run started


@pytest.mark.parametrize("command", ["train", "config", "psro"])
def test_an_empty_preset_is_refused_with_the_list_not_taken_for_the_default(
    command, tmp_path, capsys, monkeypatch
):
    monkeypatch.chdir(tmp_path)
    assert main([command, "--preset", "", "train.iterations=1"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"coplay {command}: error: unknown preset ''; presets: ")
    assert "kuhn-selfplay" in err and len(err.splitlines()) == 1
    assert list(tmp_path.iterdir()) == []  # no runs/kuhn-selfplay started


def test_every_option_with_a_default_names_it_in_its_help():
    # eval --episodes and --seed had no help at all; eval --opponent, tournament and
    # check-env --episodes, show and report --games, serve --port and demos left it out.
    # play --games, --seat, --host and --port, which word their defaults themselves,
    # said "(default 1)".
    import argparse

    missing, misworded = [], []
    for command in COMMANDS.values():
        parser = argparse.ArgumentParser(prog=f"coplay {command.name}")
        command.add_arguments(parser)
        for action in parser._actions:
            text = (action.help or "") % {**vars(action), "prog": parser.prog}
            if "(default" in text.replace("(default: ", ""):
                misworded.append(f"{command.name} {action.dest}")
            if not action.option_strings or action.nargs == 0 or action.default is None:
                continue  # a positional, a flag, or a default the help words itself
            if f"(default: {action.default})" not in text:
                missing.append(f"{command.name} {action.option_strings[-1]}")
    assert missing == [] and misworded == []
