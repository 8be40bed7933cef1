"""The equivalence check's comparison: what counts as a difference."""

BENCHMARK = "equivalence"

ROWS = {"metrics.jsonl": [{"iteration": 0, "loss/policy": 0.5}]}
FAILED = {"error": [{"stderr": ["Traceback: boom"]}]}


def test_equal_rows_are_the_same_and_a_moved_value_differs(bench, capsys):
    assert bench.compare({"a": ROWS}, {"a": ROWS}) == 0
    moved = {"metrics.jsonl": [{"iteration": 0, "loss/policy": 0.6}]}
    assert bench.compare({"a": ROWS}, {"a": moved}) == 1
    assert "DIFF" in capsys.readouterr().out


def test_a_case_that_failed_or_ran_on_one_side_only_is_no_match(bench, capsys):
    # Both sides failing with one line printed "same", and a case missing from one file
    # was listed but not counted: the check passed on cases that never ran.
    assert bench.compare({"a": FAILED}, {"a": FAILED}) == 1
    assert bench.compare({"a": ROWS, "b": ROWS}, {"a": ROWS}) == 1
    out = capsys.readouterr().out
    assert "FAILED a" in out and "only in first: b" in out
