"""A population run's config and directory: new from the options, resumed from what a
stopped run saved, ``--out`` claimed."""

import pytest

from coplay.cli import main
from tests.cli.helpers import TINY, stop_with


@pytest.mark.parametrize("command", ["psro", "league"])
def test_population_commands_refuse_a_run_directory(kuhn_run, capsys, command):
    assert main([command, "--out", str(kuhn_run), *TINY]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "already holds a run" in err and "--force" in err


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["league", "--resume", "{run}", "--sampler", "uniform"], "--sampler cannot go"),
        (["league", "--resume", "{run}", "--out", "{tmp}/x"], "--out cannot go"),
        (["league", "--resume", "{run}", "--bots", "random"], "--bots cannot go"),
        (["psro", "--resume", "{run}", "--iterations", "3"], "--iterations cannot go"),
        (["psro", "--resume", "{run}", "--cold"], "--cold cannot go"),
        (
            ["psro", "--resume", "{run}", "--crossplay-episodes", "7"],
            "--crossplay-episodes cannot go",
        ),
        (["league", "--resume", "{run}", "--meta-solver", "ce"], "--meta-solver cannot go"),
        (["league", "--resume", "{run}", "--pfsp-weighting", "hard"], "--pfsp-weighting cannot go"),
        (["league", "--resume", "{run}", "--pfsp-power", "1"], "--pfsp-power cannot go"),
        (["league", "--resume", "{run}", "--min-games", "8"], "--min-games cannot go"),
        (["league", "--resume", "{run}", "--meta-episodes", "8"], "--meta-episodes cannot go"),
    ],
)
def test_population_resume_refuses_options_it_would_ignore(
    argv, message, kuhn_run, tmp_path, capsys
):
    assert main([a.format(run=kuhn_run, tmp=tmp_path) for a in argv]) == 2
    err = capsys.readouterr().err
    assert f"{message} with --resume" in err and len(err.splitlines()) == 1


def test_new_population_runs_take_the_configs_defaults(tmp_path, monkeypatch):
    import coplay.population.league as league
    import coplay.population.psro as psro
    from coplay.population.league_config import LeagueConfig
    from coplay.population.psro_config import PsroConfig

    made = []
    monkeypatch.setattr(league, "run_league", stop_with(made))
    monkeypatch.setattr(psro, "run_psro", stop_with(made))
    assert main(["league", "--out", str(tmp_path / "l"), *TINY]) == 130
    assert main(["psro", "--out", str(tmp_path / "p"), *TINY]) == 130
    assert made[0].model_dump(exclude={"run"}) == LeagueConfig().model_dump(exclude={"run"})
    assert made[1].model_dump(exclude={"run"}) == PsroConfig().model_dump(exclude={"run"})
