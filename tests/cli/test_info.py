"""``coplay config``, ``check-env``, ``games`` and ``presets``."""

from pathlib import Path

import pytest
import yaml

from coplay.cli import main
from tests.cli.helpers import TINY, config_values


def test_games_and_presets_list(capsys):
    assert main(["games"]) == 0 and "kuhn_poker" in capsys.readouterr().out
    assert main(["presets"]) == 0 and "tictactoe-selfplay" in capsys.readouterr().out


def test_config_command_lists_keys(capsys):
    assert main(["config", "--preset", "kuhn-selfplay", "train.iterations=7"]) == 0
    out = capsys.readouterr().out
    assert "train.iterations" in out and "7" in out


def test_check_env_passes_registered_and_example_games(capsys, monkeypatch):
    monkeypatch.chdir(Path(__file__).resolve().parents[2])  # where examples/ lives
    assert main(["check-env", "frozen_lake", "--episodes", "3", "size=3", "slippery=true"]) == 0
    out = capsys.readouterr().out
    assert all(name in out for name in ("determinism", "private_info", "returns"))
    assert "fail" not in out
    assert main(["check-env", "examples.bidding:make", "--episodes", "3"]) == 0


BROKEN_ENV = """
from coplay.envs.frozen_lake import FrozenLake


class TooRich(FrozenLake):
    def returns(self):
        return [5.0]


def make(**params):
    return TooRich(**params)
"""


def test_check_env_exits_1_on_a_defect_and_says_what(tmp_path, capsys, monkeypatch):
    (tmp_path / "too_rich_lake.py").write_text(BROKEN_ENV)
    monkeypatch.chdir(tmp_path)
    assert main(["check-env", "too_rich_lake:make", "--episodes", "2", "size=3"]) == 1
    out = capsys.readouterr().out
    assert "fail" in out and "returns() [5.0] leave" in out and "fix:" in out


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["check-env", "nope"], "unknown game 'nope'"),
        (["check-env", "frozen_lake", "size=99"], "size must be an integer in 2..12"),
        (["check-env", "frozen_lake", "holes"], "must look like key=value"),
        (["check-env", "frozen_lake", "size=4", "size=8"], "game parameter 'size' is given twice"),
        (["check-env", "sokoban", "--episodes", "0"], "episodes must be a positive integer"),
        (["check-env", "nosuchpkg.mod:make"], "no module 'nosuchpkg.mod'"),
    ],
)
def test_check_env_user_errors_exit_2_in_one_line(argv, message, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1


def test_config_train_and_help_agree_on_the_base_of_a_config_file(tmp_path, capsys):
    f = tmp_path / "mine.yaml"
    f.write_text("train: {iterations: 1, eval_every: 1, eval_episodes: 8, eval_opponents: []}\n")
    assert main(["config", "--config", str(f)]) == 0
    shown = capsys.readouterr().out
    assert f"config ({f})" in shown  # no preset: the file over the built-in defaults
    values = config_values(shown)
    out = tmp_path / "run"
    argv = ["train", "--quiet", "--config", str(f), "--out", str(out), *TINY[3:]]
    assert main(argv) == 0
    trained = yaml.safe_load((out / "config.yaml").read_text())
    assert values["algo.estimator"] == trained["algo"]["estimator"] == "rae"  # not the preset's
    assert values["rollout.group_size"] == str(trained["rollout"]["group_size"])
    with pytest.raises(SystemExit):
        main(["config", "--help"])
    assert "none: the file alone" in capsys.readouterr().out


def test_games_list_the_families_and_presets_their_game_and_purpose(capsys):
    assert main(["games"]) == 0
    out = capsys.readouterr().out
    assert "openspiel:<name>" in out and "textarena:<id>" in out and "package.module:" in out
    assert main(["presets"]) == 0
    row = next(x for x in capsys.readouterr().out.splitlines() if "│ kuhn3-selfplay" in x)
    assert "kuhn_poker" in row and "three-player Kuhn poker" in row


def test_check_env_colours_its_results_without_markup(capsys):
    from coplay.cli.common import console

    with console.capture() as captured:
        assert main(["check-env", "kuhn_poker", "--episodes", "2"]) == 0
    assert "[green]" not in captured.get() and "│ pass" in captured.get()


def test_check_env_calls_openspiel_parameters_that_break_the_game_a_user_error(capsys):
    # goofspiel of -1 cards loads in OpenSpiel, then failed at the first deal
    # ("vector::reserve"), and check-env exited 1: "the game has a defect".
    assert main(["check-env", "openspiel:goofspiel", "--episodes", "1", "num_cards=-1"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(
        "coplay check-env: error: bad parameters for game 'goofspiel', num_cards=-1"
    )
    assert len(err.splitlines()) == 1
