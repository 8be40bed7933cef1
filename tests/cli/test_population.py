"""``coplay psro`` and ``coplay league``: their options, progress lines and smoke runs."""

import json
import re

import pytest
import yaml

from coplay.cli import main
from tests.cli.helpers import TINY, stop_with


def test_psro_and_league_smoke_runs(tmp_path, capsys):
    tiny = [*TINY, "train.eval_opponents=[]", "train.eval_every=2"]
    psro = tmp_path / "psro"
    argv = ["psro", "--out", str(psro), "--iterations", "1", "--initial", "random", "--report"]
    assert main([*argv, *tiny]) == 0
    assert "exploitability 0.4583" in capsys.readouterr().out  # uniform random Kuhn: 11/24
    assert len((psro / "psro.jsonl").read_text().splitlines()) == 2
    assert '<table class="heatmap">' in (psro / "report.html").read_text()
    league = tmp_path / "league"
    argv = ["league", "--out", str(league), "--snapshot-every", "1", "--bots", "random", *tiny]
    assert main([*argv, "--report"]) == 0
    out = capsys.readouterr().out
    assert "league/win_rate" in (league / "report.html").read_text()
    assert "0 (initial), 1 (schedule), 2 (schedule)" in out
    # The snapshot taken after the last iteration played no games: it gets no rating.
    # (Which earlier snapshot the two iterations sampled is the draw's affair.)
    assert "snap:2  not rated (no games)" in out and "learner  Elo" in out
    assert json.loads((league / "summary.json").read_text())["elo"]["snap:2"] is None
    assert (league / "snapshots" / "iter_000002" / "config.json").is_file()


def test_psro_with_the_exact_oracle_reaches_nash_on_kuhn(tmp_path, capsys):
    argv = ["psro", "--out", str(tmp_path), "--iterations", "7", "--oracle", "exact"]
    assert main([*argv, "--initial", "random", *TINY]) == 0
    assert "iteration 7: 8 members, exploitability 0.0000" in capsys.readouterr().out
    last = json.loads((tmp_path / "psro.jsonl").read_text().splitlines()[-1])
    assert last["psro/exploitability"] < 1e-6


def test_psro_recommendations_each_trains_a_response_per_recommended_member(tmp_path, capsys):
    argv = ["psro", "--out", str(tmp_path), "--iterations", "4", "--oracle", "exact"]
    argv += ["--meta-solver", "ce", "--recommendations", "each", "--initial", "random"]
    assert main([*argv, *TINY]) == 0
    out = capsys.readouterr().out
    assert yaml.safe_load((tmp_path / "psro.yaml").read_text())["recommendations"] == "each"
    # Kuhn's CE recommends several members from iteration 3 on: one response each, of
    # which a copy of a member does not join.
    assert re.search(r"iteration 3: 4 members, .*, 3 recommendations answered, mean", out)
    assert re.search(r"iteration 4: 5 members", out)
    assert main(["psro", "--recommendations", "each", "--meta-solver", "nash", *TINY]) == 2
    assert "recommendations=each answers the members a conditional" in capsys.readouterr().err


def test_psro_seat_weights_reach_the_config_and_survive_a_resume(tmp_path, monkeypatch):
    import coplay.population.psro as psro

    out = tmp_path / "psro"
    tiny = [*TINY, "train.eval_opponents=[]"]
    # Overrides may follow the weights directly: they are no numbers, so they end them.
    argv = ["psro", "--out", str(out), "--iterations", "1", "--initial", "random"]
    assert main([*argv, "--seat-weights", "1", "3", *tiny]) == 0
    assert yaml.safe_load((out / "psro.yaml").read_text())["seat_weights"] == [1.0, 3.0]
    assert yaml.safe_load((out / "config.yaml").read_text())["train"]["iterations"] == 2
    assert (out / "members" / "01" / "config.json").is_file()
    seen = []
    monkeypatch.setattr(psro, "run_psro", stop_with(seen))
    assert main(["psro", "--resume", str(out)]) == 130
    assert seen[0].seat_weights == [1.0, 3.0] and seen[0].initial == "random"


def test_league_seat_weights_survive_a_resume(tmp_path, monkeypatch):
    import coplay.population.league as league
    from coplay.population.league_config import settings_yaml
    from coplay.train.checkpoints import rundir

    made, resumed = [], []
    monkeypatch.setattr(league, "run_league", stop_with(made))
    assert main(["league", "--out", str(tmp_path), "--seat-weights", "3", "1", *TINY]) == 130
    assert made[0].seat_weights == [3.0, 1.0]
    # What a league run saves before its first iteration, then --resume reads it back.
    rundir.write_config(tmp_path, made[0].run)
    (tmp_path / "league.yaml").write_text(settings_yaml(made[0]))
    monkeypatch.setattr(league, "run_league", stop_with(resumed))
    assert main(["league", "--resume", str(tmp_path)]) == 130
    assert resumed[0].seat_weights == [3.0, 1.0]
    assert resumed[0].run.train.iterations == made[0].run.train.iterations == 2


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["psro", "--meta-solver", "best"], "unknown meta_solver 'best'"),
        (["psro", "game.params={players: 3}"], "2-player games"),
        (
            ["psro", "--oracle", "exact", "game.name=tic_tac_toe"],
            "oracle=exact needs an exact meta-game",
        ),
        (["psro", "--restarts", "0"], "restarts"),
        (["league", "--sampler", "elo"], "unknown sampler 'elo'"),
        (["league", "--win-threshold", "2"], "win_threshold"),
        (["psro", "--oracle", "best"], "unknown oracle 'best'; available: lm, exact"),
        (["psro", "--initial", "nash"], "unknown initial 'nash'; available: lm, random"),
        (
            ["psro", "--seat-weights", "-1", "3"],
            "invalid config: seat_weights must be >= 0 and not all 0, got [-1.0, 3.0]",
        ),
        (["psro", "--seat-weights", "1", "2", "3"], "seat_weights has 3 weights; kuhn_poker has 2"),
        (["league", "--seat-weights", "0", "0"], "seat_weights must be >= 0 and not all 0"),
        (["league", "--seat-weights", "1", "2", "3"], "seat_weights has 3 weights; kuhn_poker"),
        (["league", "--pfsp-weighting", "soft"], "pfsp_weighting: Input should be 'hard' or"),
        (["league", "--pfsp-power", "0"], "pfsp_power: Input should be greater than 0"),
        (["league", "--min-games", "0"], "min_games: Input should be greater than 0"),
        (["league", "--meta-episodes", "0"], "meta_episodes: Input should be greater than 0"),
        (["league", "--meta-solver", "best"], "unknown meta_solver 'best'"),
        (["psro", "--crossplay-episodes", "0"], "crossplay_episodes: Input should be greater"),
    ],
)
def test_population_commands_reject_bad_settings_in_one_line(argv, message, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1


def test_population_settings_options_reach_the_config(tmp_path, monkeypatch):
    # None of these could be set from the command line: --sampler meta on a general-sum
    # game asked for a solver that no option could name.
    import coplay.population.league as league
    import coplay.population.psro as psro

    made = []
    monkeypatch.setattr(league, "run_league", stop_with(made))
    monkeypatch.setattr(psro, "run_psro", stop_with(made))
    argv = ["league", "--out", str(tmp_path / "l"), "--sampler", "meta", "--meta-solver", "ce"]
    argv += ["--min-games", "8", "--meta-episodes", "4"]
    assert main([*argv, "game.name=dilemma", *TINY]) == 130
    want = {"sampler": "meta", "meta_solver": "ce", "min_games": 8, "meta_episodes": 4}
    assert {k: getattr(made[0], k) for k in want} == want
    argv = ["league", "--out", str(tmp_path / "f"), "--sampler", "pfsp"]
    argv += ["--pfsp-weighting", "hard", "--pfsp-power", "1.5", *TINY]
    assert main(argv) == 130
    assert (made[1].pfsp_weighting, made[1].pfsp_power) == ("hard", 1.5)
    argv = ["psro", "--out", str(tmp_path / "p"), "--crossplay-episodes", "7", *TINY]
    assert main(argv) == 130
    assert made[2].crossplay_episodes == 7


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        # Its meta-game pairs two members: an IndexError traceback at the first snapshot.
        (
            ["league", "--sampler", "meta", "game.params={players: 3}"],
            "sampler=meta needs a two-player game; 'kuhn_poker' has 3 players",
        ),
        # The exact oracle trains no LM: both were accepted and had no effect.
        (
            ["psro", "--oracle", "exact", "--restarts", "2", "--initial", "random"],
            "--oracle exact trains no language model: --restarts 2 would have no effect; "
            "drop it or use --oracle lm",
        ),
        (
            ["psro", "--oracle", "exact", "--seat-weights", "1", "3", "--initial", "random"],
            "--oracle exact trains no language model: --seat-weights 1 3 would",
        ),
    ],
)
def test_population_settings_that_cannot_work_are_refused_before_anything_is_written(
    argv, message, tmp_path, capsys
):
    out = tmp_path / "run"
    tiny = [*TINY, "train.eval_opponents=[]"]
    assert main([argv[0], "--out", str(out), *argv[1:], *tiny]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1
    assert not out.exists()


def test_psro_progress_prints_only_the_numbers_it_knows(capsys, monkeypatch):
    # Every line of a sampled meta-game read "exploitability nan, response value nan",
    # and the last line of every run "response value nan (best nan)".
    from coplay.cli.common import PIPED_WIDTH, console
    from coplay.cli.population import _psro_step
    from coplay.population.psro_state import PsroStep

    # As main sets it: run alone, the test saw rich's 80 columns wrap the lines.
    monkeypatch.setattr(console, "width", PIPED_WIDTH)

    nan = float("nan")

    def step(k, exploitability, value, best, **joint):
        return PsroStep(
            k, k + 1, exploitability, nan, value, best, ((1.0,),), 0.0, 0.0, 3.0, **joint
        )

    steps = [
        step(0, 0.4583, 0.0159, 0.4583),  # exact
        step(1, 0.4448, nan, nan),  # exact, the last
        step(0, nan, 0.25, nan),  # sampled, restarts judged by cross-play
        step(0, nan, nan, nan),  # sampled, one restart: nothing measured
        step(1, nan, nan, nan),  # sampled, the last
        step(0, 0.4583, nan, nan, cce_gap=0.9166),  # a product joint: its gap is the NashConv
        step(0, 0.4583, nan, nan, cce_gap=0.25, correlated=True),  # JPSRO's own joint
        step(0, 0.4583, nan, nan, cce_gap=0.25, correlated=True, ce_gap=0.5),  # JPSRO(CE)
        step(0, 0.4583, nan, nan, cce_gap=0.9166, ce_gap=0.9166),  # CE fell back to uniform
    ]
    for s in steps:
        _psro_step(s, 1, lambda done: None, None)
    assert capsys.readouterr().out.splitlines() == [
        "iteration 0: 1 member, exploitability 0.4583, response value 0.0159 (best 0.4583), 3 s",
        "iteration 1: 2 members, exploitability 0.4448, the final meta-game, no response "
        "trained, 3 s",
        "iteration 0: 1 member, response value 0.2500, 3 s",
        "iteration 0: 1 member, response value n/a, 3 s",
        "iteration 1: 2 members, the final meta-game, no response trained, 3 s",
        "iteration 0: 1 member, exploitability 0.4583, response value n/a, 3 s",
        "iteration 0: 1 member, exploitability 0.4583, joint's CCE gap 0.2500, response value "
        "n/a, 3 s",
        "iteration 0: 1 member, exploitability 0.4583, joint's CCE gap 0.2500, CE gap 0.5000, "
        "response value n/a, 3 s",
        "iteration 0: 1 member, exploitability 0.4583, response value n/a, 3 s",
    ]
