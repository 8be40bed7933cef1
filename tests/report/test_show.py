"""``coplay show``: sample games printed as conversations; bad input is one line."""

import json
from pathlib import Path

from rich.console import Console

from coplay.cli import main
from coplay.report.show import show_games


def test_games_print_what_each_seat_saw_and_answered(capsys):
    record = {
        "iteration": 3,
        "game": "kuhn_poker",
        "seed": 1,
        "seats": ["learner", "learner"],
        "returns": [-1.0, 1.0],
        "turns": [
            {"player": 0, "observation": "Your card: J.", "text": "[Pass]", "logprobs": [-0.5]},
            {"player": 1, "observation": "Your card: Q.", "text": "[Bet]", "logprobs": []},
        ],
    }
    console = Console(width=100, force_terminal=False)
    with console.capture() as cap:
        assert show_games([record], console, games=1) == 1
    text = cap.get()
    assert "seat 0 · learner" in text and "Your card: J." in text
    assert "answered [Pass]  (p = 0.607)" in text
    assert text.index("Your card: J.") < text.index("Your card: Q.")
    assert "returns  seat 0: -1  seat 1: 1" in text


def test_ids_are_printed_as_written_not_read_as_markup():
    record = {
        "iteration": 1,
        "game": "kuhn[x]",
        "seats": ["x[/b]", "nash[v2]"],
        "turns": [{"player": 0, "text": "a"}, {"player": 1, "text": "b"}],
    }
    console = Console(width=100, force_terminal=False)
    with console.capture() as cap:
        show_games([record], console, games=1)
    text = cap.get()
    assert "seat 0 · x[/b]" in text and "seat 1 · nash[v2]" in text and "kuhn[x]" in text


def test_coplay_show_prints_a_runs_games(tiny_run, capsys):
    assert main(["show", str(tiny_run), "--games", "1"]) == 0
    out = capsys.readouterr().out
    last = json.loads((tiny_run / "transcripts.jsonl").read_text().splitlines()[-1])
    assert f"iteration {last['iteration']} · kuhn_poker · seed {last['seed']}" in out
    assert last["turns"][0]["observation"].splitlines()[1] in out


def test_coplay_show_bad_input_is_one_line(tiny_run, tmp_path, capsys):
    assert main(["show", str(tmp_path / "nowhere")]) == 2
    assert capsys.readouterr().err.strip().count("\n") == 0
    assert main(["show", str(tiny_run), "--iteration", "99"]) == 2
    err = capsys.readouterr().err
    assert (
        err == f"coplay show: error: {tiny_run} has no transcripts of iteration 99; it has 1, 2\n"
    )
    mixed = tmp_path / "mixed"
    mixed.mkdir()
    (mixed / "metrics.jsonl").write_text('{"iteration": 0}\n')
    records = [{"iteration": 1, "turns": []}, {"turns": []}]  # the second names none
    (mixed / "transcripts.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    assert main(["show", str(mixed), "--iteration", "7"]) == 2
    assert capsys.readouterr().err.endswith("no transcripts of iteration 7; it has 1\n")


def test_coplay_show_names_the_file_and_line_of_a_bad_record(tmp_path, capsys):
    run = tmp_path / "run"
    run.mkdir()
    (run / "metrics.jsonl").write_text('{"iteration": 0}\n')
    transcripts = run / "transcripts.jsonl"
    ok = {"iteration": 0, "turns": [{"player": 0}]}
    for bad, fault in [
        ({"iteration": 0}, "'turns' must be a list of turns"),
        ({"iteration": 0, "turns": [{"player": "1"}]}, "turn 0: 'player' must be a seat"),
        ({"iteration": 0, "turns": [{"player": 0, "logprobs": [800.0]}]}, "'logprobs' must be"),
        ({"iteration": 0, "turns": [{"player": 0, "step": None}]}, "'step' must be an integer"),
        ({"iteration": None, "turns": []}, "'iteration' must be an integer"),
    ]:
        transcripts.write_text(json.dumps(ok) + "\n" + json.dumps(bad) + "\n")
        assert main(["show", str(run)]) == 2
        err = capsys.readouterr().err
        assert err.startswith(f"coplay show: error: {transcripts}:2 is not a transcript record: ")
        assert fault in err and err.count("\n") == 1


def test_piped_output_says_in_words_an_answer_was_invalid_and_who_forfeited():
    record = {
        "iteration": 1,
        "game": "kuhn_poker",
        "seats": ["learner", "learner"],
        "returns": [-1.0, 1.0],
        "forfeited_by": 0,
        "turns": [{"player": 0, "observation": "Your card: J.", "text": "[Fold]", "valid": False}],
    }
    console = Console(width=100, force_terminal=False, no_color=True)
    with console.capture() as cap:
        show_games([record], console, games=1)
    text = cap.get()
    assert "answered [Fold]  (invalid)" in text
    assert "forfeited by seat 0" in text


def test_coplay_show_prints_the_games_of_a_run_that_has_logged_no_metrics_yet(tmp_path, capsys):
    # Refused before, though its games were there: a PSRO run during its first response,
    # or a train run killed between its first evaluation and that evaluation's row.
    run = tmp_path / "run"
    run.mkdir()
    (run / "metrics.jsonl").write_text("")
    record = {"iteration": 0, "game": "kuhn_poker", "seed": 5, "turns": [{"player": 0}]}
    (run / "transcripts.jsonl").write_text(json.dumps(record) + "\n")
    assert main(["show", str(run)]) == 0
    out, err = capsys.readouterr()
    assert "iteration 0 · kuhn_poker · seed 5" in out
    assert err == (
        f"coplay show: warning: {run / 'metrics.jsonl'} is empty: the run has logged no "
        f"metrics yet, only games ({run / 'transcripts.jsonl'})\n"
    )


def test_coplay_show_says_a_psro_runs_games_are_its_latest_responses(tmp_path, capsys):
    run = tmp_path / "psro"
    for n, seed in (("00", 3), ("01", 4)):
        (run / "responses" / n).mkdir(parents=True)
        record = {"iteration": 2, "game": "kuhn_poker", "seed": seed, "turns": [{"player": 0}]}
        (run / "responses" / n / "transcripts.jsonl").write_text(json.dumps(record) + "\n")
    (run / "psro.jsonl").write_text(json.dumps({"iteration": 1}) + "\n")
    assert main(["show", str(run)]) == 0
    out = capsys.readouterr().out
    assert out.startswith(
        f"games of the latest best response only ({Path('responses') / '01'}); iterations are its own\n"
    )
    assert "seed 4" in out and "seed 3" not in out


def test_control_characters_in_a_record_are_printed_as_escapes():
    # rich strips a carriage return, but not ESC: an answer holding "\x1b[2J" cleared
    # the reader's terminal, and "\x1b]0;...\x07" retitled its window.
    record = {
        "iteration": 1,
        "game": "kuhn\x1b[31m",
        "seats": ["a\x1b]0;owned\x07", "b"],
        "returns": [1.0, -1.0],
        "turns": [
            {"player": 0, "observation": "saw\x1b[2J", "text": "[Bet]\x1b[H", "rejected": ["\x9b"]}
        ],
    }
    console = Console(width=100, force_terminal=False, no_color=True)
    with console.capture() as cap:
        show_games([record], console, games=1)
    text = cap.get()
    assert "\x1b" not in text and "\x9b" not in text and "\x07" not in text
    assert "saw\\x1b[2J" in text and "answered [Bet]\\x1b[H" in text and "a\\x1b]0;owned" in text
