"""``coplay eval``: results, exact and sampled rows, the game a checkpoint was trained on,
and the checks made before the matches are played."""

import pytest

from coplay.cli import main
from tests.cli.helpers import TINY, penalty_run
from tests.policies.chat_server import completion, serving_fake


@pytest.mark.parametrize("opponent", ["random", "nash"])
def test_eval_prints_results(kuhn_run, capsys, opponent):
    assert main(["eval", str(kuhn_run), "--opponent", opponent, "--episodes", "50"]) == 0
    out = capsys.readouterr().out
    assert "win" in out and "mean_return" in out and "exploitability" in out


def test_eval_exact_adds_each_seats_exact_outcome(kuhn_run, capsys):
    assert main(["eval", str(kuhn_run), "--opponent", "nash", "--episodes", "10", "--exact"]) == 0
    out = capsys.readouterr().out
    assert "seat 0 (exact)" in out and "seat 1 (exact)" in out and "argmax" in out


def test_eval_costly_lists_the_positions_worth_changing(kuhn_run, capsys):
    argv = ["eval", str(kuhn_run), "--opponent", "nash", "--episodes", "10", "--costly", "2"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "costliest positions, seat 0" in out and "costliest positions, seat 1" in out
    assert main([*argv[:-1], "-1"]) == 2
    assert "--costly must be 0 (off) or positive" in capsys.readouterr().err


def test_eval_exact_on_a_game_without_openspiel_is_a_clear_error(tmp_path, capsys):
    out = tmp_path / "talk"
    over = ["game.name=signalling", "train.iterations=1", "rollout.games_per_iter=4"]
    assert main(["train", "--quiet", "--out", str(out), *over, "train.eval_opponents=[]"]) == 0
    capsys.readouterr()
    assert main(["eval", str(out), "--episodes", "4", "--exact"]) == 2
    printed = capsys.readouterr()
    assert "no OpenSpiel backend" in printed.err
    assert "4/4 episodes" not in printed.out + printed.err  # refused before the match


def test_eval_rejects_unknown_opponent(kuhn_run, capsys):
    assert main(["eval", str(kuhn_run), "--opponent", "grandmaster"]) == 2
    assert "unknown opponent" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--workers", "2"], "--workers 2 needs Ray, which is not installed: pip install"),
        (["--workers", "-1"], "--workers must be 0 or more, got -1"),
        (["--ray-address", "auto"], "--ray-address needs --workers N (N > 0)"),
    ],
)
def test_eval_workers_without_ray_or_bad_give_one_error_line(
    kuhn_run, extra, message, capsys, monkeypatch
):
    monkeypatch.setattr("coplay.distributed.config.find_spec", lambda name: None)  # no ray
    assert main(["eval", str(kuhn_run), "--episodes", "2", *extra]) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1


def test_piped_eval_prints_progress_lines_with_an_eta(kuhn_run, capsys, monkeypatch):
    monkeypatch.setenv("COPLAY_PROGRESS_EVERY_S", "0")
    assert main(["eval", str(kuhn_run), "--episodes", "40"]) == 0
    captured = capsys.readouterr()
    assert "eval: 40/40 episodes" in captured.err.splitlines()[-1]
    assert "eval:" not in captured.out  # results alone on stdout


def test_a_lora_roster_run_evaluates_by_role_and_never_its_bare_base(tmp_path, capsys):
    roster = tmp_path / "roster.yaml"
    roster.write_text(
        "policies: {first: {kind: learner}, second: {kind: learner}}\n"
        "seats: [first, second]\nlora: {rank: 2, alpha: 4}\n"
    )
    out = tmp_path / "run"
    over = ["magnet=null", "loss.kl=null"]
    over += ["train.iterations=1", "train.eval_opponents=[]", *TINY[3:]]
    assert main(["train", "--quiet", "--roster", str(roster), "--out", str(out), *over]) == 0
    capsys.readouterr()
    assert main(["eval", str(out), "--role", "second", "--episodes", "8"]) == 0
    assert "final/second vs random on kuhn_poker" in capsys.readouterr().out
    assert main(["eval", str(out), "--episodes", "8"]) == 2
    assert "roster run with policies first, second" in capsys.readouterr().err
    base = out / "checkpoints" / "final" / "base"
    assert main(["eval", str(base), "--episodes", "8"]) == 2
    assert "untrained base of a LoRA roster run" in capsys.readouterr().err
    assert main(["eval", str(out), "--role", "base", "--episodes", "8"]) == 0


def test_a_text_checkpoint_keeps_its_format_and_is_never_scored_exactly(tmp_path, capsys):
    import coplay

    out = tmp_path / "text"
    over = [*TINY[:1], "train.eval_opponents=[]", "rollout.games_per_iter=4"]
    text = ["model.mode=text", "model.max_new_tokens=4", "model.text.answer=think-boxed"]
    assert main(["train", "--quiet", "--out", str(out), *over, *text]) == 0
    policy = coplay.load_policy(out)
    assert (policy.mode, policy.text.answer) == ("text", "think-boxed")
    assert policy.tokenizer.chat_template
    # its exact rows are those of its sampled answers, each with K and an interval
    assert main(["eval", str(out), "--episodes", "4", "--samples", "2", "--exact"]) == 0
    shown = capsys.readouterr().out
    assert "exploitability (sampled, K=2)" in shown and "(exact)" not in shown


def test_eval_exact_and_costly_read_a_text_opponent_by_its_sampled_answers(
    kuhn_run, writer, capsys
):
    # --exact against a writing checkpoint played every game, then died before the table.
    argv = ["eval", str(kuhn_run), "--opponent", str(writer), "--episodes", "4", "--samples", "2"]
    assert main([*argv, "--exact", "--costly", "1"]) == 0
    shown = capsys.readouterr().out
    for seat in (0, 1):
        assert f"exact loss seat{seat} (opponent sampled, K=2)" in shown
        assert f"costliest positions, seat {seat}" in shown
    assert "opponent's invalid answers (sampled, K=2)" in shown
    assert "seat 0 (exact)" not in shown  # no row claims the opponent's choice scores


def test_eval_of_a_text_policy_against_a_text_opponent_samples_both(writer, capsys):
    argv = ["eval", str(writer), "--opponent", str(writer), "--episodes", "4", "--samples", "2"]
    assert main([*argv, "--exact"]) == 0
    shown = capsys.readouterr().out
    assert "exact loss seat1 (sampled, K=2)" in shown
    assert "opponent's invalid answers (sampled, K=2)" in shown


def _sampled_exploitability(shown: str) -> str:
    return next(line for line in shown.splitlines() if "exploitability (sampled" in line)


def test_eval_of_a_runs_checkpoint_plays_under_the_runs_game_settings(
    writer, tmp_path, capsys, monkeypatch
):
    # It played and sampled with the defaults (forfeits, the game's length) whatever the
    # run trained with: a penalty run's sampled exploitability of 0.46 read 2.0 here.
    import coplay.eval.matches as matches

    played = []
    real = matches.play_match
    monkeypatch.setattr(matches, "play_match", lambda *a, **kw: played.append(kw) or real(*a, **kw))
    run = penalty_run(writer, tmp_path / "run")
    argv = ["--episodes", "4", "--samples", "4"]
    assert main(["eval", str(run), *argv]) == 0
    in_run = capsys.readouterr().out
    assert main(["eval", str(writer), *argv]) == 0
    alone = capsys.readouterr().out
    assert played[0]["max_turns"] == 3 and played[0]["invalid"].on_fail == "penalty"
    assert played[1]["max_turns"] is None and played[1]["invalid"].on_fail == "forfeit"
    assert f"game settings (from {run / 'config.yaml'}): invalid answers on_fail=penalty" in (
        in_run.replace("\n", "")
    )
    assert "max_turns=3" in in_run and "defaults: no run config found" in alone
    assert _sampled_exploitability(in_run) != _sampled_exploitability(alone)


SPELLINGS = [[], ["--game", "kuhn_poker"], ["--game", "openspiel:kuhn_poker"]]
"""The checkpoint's game: as it records it, and named by --game two ways."""


def _seats(shown: str) -> int:
    return sum(f"mean return, seat {s} " in shown for s in range(4))


@pytest.mark.parametrize("game", SPELLINGS, ids=["recorded", "registered", "family"])
def test_eval_plays_the_checkpoints_game_as_trained_however_spelled(three_player_run, capsys, game):
    # --game openspiel:kuhn_poker played two-player Kuhn with the defaults, and said the
    # run's config was not found.
    assert main(["eval", str(three_player_run), *game, "--episodes", "4"]) == 0
    shown = capsys.readouterr().out
    assert _seats(shown) == 3 and "game parameters" not in shown
    assert f"(from {three_player_run / 'config.yaml'}): invalid answers on_fail=penalty" in shown


@pytest.mark.parametrize("game", SPELLINGS, ids=["recorded", "registered", "family"])
def test_eval_plays_the_parameters_given_and_says_they_are_not_the_trained_ones(
    three_player_run, capsys, game
):
    assert main(["eval", str(three_player_run), *game, "players=2", "--episodes", "4"]) == 0
    shown = capsys.readouterr().out
    said = (
        "game parameters played: players=2; the checkpoint was trained on this game with players=3"
    )
    assert _seats(shown) == 2 and shown.count(said) == 1
    assert main(["eval", str(three_player_run), *game, "players=3", "--episodes", "4"]) == 0
    assert "game parameters" not in capsys.readouterr().out


server = pytest.fixture(serving_fake, name="server")


def test_eval_plays_a_remote_endpoint_and_reads_it_exactly_by_its_sampled_answers(
    kuhn_run, server, capsys
):
    # coplay serve prints a remote: player "for coplay eval --opponent", which refused it.
    server.reply = lambda body: (200, completion("[Bet]"))
    argv = ["eval", str(kuhn_run), "--opponent", f"remote:{server.url}#m", "--episodes", "4"]
    assert main([*argv, "--samples", "2", "--exact"]) == 0
    shown = capsys.readouterr().out
    assert "exact loss seat0 (opponent sampled, K=2)" in shown and server.requests
    assert main([*argv[:3], "remote:nohost#m"]) == 2  # malformed: refused before playing
    assert "base_url must start with http" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (
            ["--game", "dilemma", "--costly", "2"],
            "game 'dilemma' has no OpenSpiel backend; exact evaluation needs one",
        ),
        (["--samples", "0"], "--samples must be positive, got 0"),
    ],
)
def test_eval_refuses_costly_and_samples_before_playing(
    kuhn_run, capsys, monkeypatch, extra, message
):
    def no_match(*args, **kwargs):
        raise AssertionError("the match was played before the refusal")

    monkeypatch.setattr("coplay.eval.matches.play_match", no_match)
    assert main(["eval", str(kuhn_run), "--episodes", "2000", *extra]) == 2
    assert capsys.readouterr().err == f"coplay eval: error: {message}\n"


def test_eval_says_samples_are_ignored_where_nothing_is_sampled(kuhn_run, capsys, monkeypatch):
    # A choice-mode run evaluated exactly: --samples 4 was taken and had no effect.
    monkeypatch.setenv("COPLAY_PROGRESS_EVERY_S", "1000")
    assert main(["eval", str(kuhn_run), "--episodes", "4", "--samples", "4"]) == 0
    assert capsys.readouterr().err.splitlines()[0] == (
        "coplay eval: warning: --samples 4 is ignored: it counts the answers of a text-mode "
        "policy or opponent, and both here play in choice mode"
    )
    assert main(["eval", str(kuhn_run), "--episodes", "4"]) == 0
    assert "--samples" not in capsys.readouterr().err
