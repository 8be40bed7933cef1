"""Reading chat JSONL: good lines parse; each kind of bad line is one error naming file:line."""

import json

import pytest

from coplay.sft.data import DataError, read_conversations

GOOD = {"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "[Bet]"}]}


def _write(tmp_path, lines):
    path = tmp_path / "d.jsonl"
    path.write_text("\n".join(x if isinstance(x, str) else json.dumps(x) for x in lines) + "\n")
    return path


def test_reads_conversations_and_skips_blank_lines(tmp_path):
    path = _write(tmp_path, [GOOD, "", GOOD])
    convs = read_conversations(path)
    assert [c.line for c in convs] == [1, 3]
    assert convs[0].as_dicts() == GOOD["messages"]


@pytest.mark.parametrize(
    ("bad", "says"),
    [
        ("{not json", "not valid JSON"),
        # json's message ends in "at" here: the column follows it once
        ('{"messages": "cut', "not valid JSON (Invalid control character at column 18)"),
        ({"msgs": []}, 'non-empty "messages" list'),
        ({"messages": [{"content": "x"}]}, 'message 0 has no "role"'),
        ({"messages": [{"role": "bot", "content": "x"}]}, "role 'bot'"),
        ({"messages": [{"role": "user"}]}, 'no "content" string'),
        ({"messages": [{"role": "user", "content": "x"}]}, "no assistant message"),
        (
            {"messages": [{"role": "user", "content": "x"}, {"role": "assistant", "content": " "}]},
            "message 1 is an empty assistant turn",
        ),
        (
            {
                "messages": [
                    {"role": "assistant", "content": "hi"},
                    {"role": "user", "content": "x"},
                ]
            },
            "opens with an assistant message",
        ),
        # Roles out of the order play gives them: what would the answer answer?
        (
            {
                "messages": [
                    {"role": "system", "content": "x"},
                    {"role": "assistant", "content": "a"},
                ]
            },
            "message 1 is an assistant message after a system message, not a user's",
        ),
        (
            {
                "messages": [
                    {"role": "user", "content": "x"},
                    {"role": "assistant", "content": "a"},
                    {"role": "assistant", "content": "b"},
                ]
            },
            "message 2 is an assistant message after an assistant message, not a user's",
        ),
        (
            {
                "messages": [
                    {"role": "user", "content": "x"},
                    {"role": "assistant", "content": "a"},
                    {"role": "system", "content": "rules"},
                    {"role": "user", "content": "y"},
                    {"role": "assistant", "content": "b"},
                ]
            },
            "message 2 is a system message inside the conversation; only its first may be one",
        ),
        ("[" * 100_000, "nested too deeply"),
        # JSON may escape half a surrogate pair, which passed and failed later unnamed
        (
            '{"messages": [{"role": "user", "content": "x"}, '
            '{"role": "assistant", "content": "a\\ud800b"}]}',
            "message 1 (assistant) holds a lone surrogate \\ud800, not text",
        ),
    ],
)
def test_a_bad_line_is_named_with_its_number(tmp_path, bad, says):
    path = _write(tmp_path, [GOOD, bad])
    with pytest.raises(DataError) as err:
        read_conversations(path)
    assert str(err.value).startswith(f"{path}:2: ")
    assert says in str(err.value)
    assert "\n" not in str(err.value)


def test_missing_and_empty_files(tmp_path):
    with pytest.raises(FileNotFoundError, match="no dataset at"):
        read_conversations(tmp_path / "none.jsonl")
    (tmp_path / "e.jsonl").write_text("\n\n")
    with pytest.raises(DataError, match="holds no conversations"):
        read_conversations(tmp_path / "e.jsonl")


def test_a_file_that_is_not_utf8_is_named_with_its_line(tmp_path):
    path = tmp_path / "d.jsonl"
    path.write_bytes(json.dumps(GOOD).encode() + b"\n" + b'{"messages": "\xff"}\n')
    with pytest.raises(DataError, match=rf"^{path}:2: not UTF-8 text"):
        read_conversations(path)


def test_users_may_speak_twice_and_have_the_last_word(tmp_path):
    user, answer = {"role": "user", "content": "x"}, {"role": "assistant", "content": "[Bet]"}
    path = _write(tmp_path, [{"messages": [user, user, answer, user]}])
    assert [m.role for m in read_conversations(path)[0].messages] == [
        "user",
        "user",
        "assistant",
        "user",
    ]
