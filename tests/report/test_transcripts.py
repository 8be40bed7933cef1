"""Games as per-seat conversations: each turn in its own seat's column, log-probs on hover."""

import math
import re

from coplay.report.transcripts import game_html, logprob_note, select_games, transcripts_html

GAME = {
    "iteration": 2,
    "game": "kuhn_poker",
    "seed": 5,
    "seats": ["learner", "random"],
    "returns": [1.0, -1.0],
    "turns": [
        {
            "step": 0,
            "player": 0,
            "observation": "You are player 0. Your card: K.",
            "text": "[Bet]",
            "action": "[Bet]",
            "valid": True,
            "rejected": [],
            "reward": 0.0,
            "policy_id": "learner",
            "policy_version": 2,
            "response_ids": [7],
            "logprobs": [math.log(0.25)],
        },
        {
            "step": 1,
            "player": 1,
            "observation": "You are player 1. Your card: <J>.",
            "text": "pass please",
            "action": "[Pass]",
            "valid": True,
            "rejected": ["[Fold]"],
            "reward": -1.0,
            "policy_id": "random",
            "policy_version": 0,
            "response_ids": [],
            "logprobs": [],
        },
    ],
}


def columns(page: str) -> dict[str, str]:
    return dict(re.findall(r'<td class=turn data-seat="(\d)">(.*?)</td>', page, re.S))


def test_each_turn_is_drawn_in_its_own_seats_column_only():
    cols = columns(game_html(GAME))
    assert "Your card: K" in cols["0"] and "Your card: K" not in cols["1"]
    assert "Your card: &lt;J&gt;" in cols["1"] and "Your card" not in cols["0"].replace(
        "Your card: K", ""
    )
    assert "→ [Pass]" in cols["1"] and "[Fold]" in cols["1"]  # parsed action, rejected try


def test_the_hover_holds_the_answers_log_probability():
    note = logprob_note(GAME["turns"][0])
    assert note.startswith("log p = -1.3863 (p = 0.250), 1 tokens")
    assert "token 7: -1.3863" in note
    assert "no log-probabilities" in logprob_note(GAME["turns"][1])
    assert 'title="log p = -1.3863' in game_html(GAME)


def test_games_are_chosen_latest_first_or_by_iteration():
    records = [{"iteration": i, "turns": []} for i in (1, 1, 2, 2, 3)]
    assert [r["iteration"] for r in select_games(records, 3)] == [2, 2, 3]
    assert [r["iteration"] for r in select_games(records, 5, iteration=1)] == [1, 1]
    assert select_games(records, 0) == []


def test_the_iteration_and_the_forfeiting_seat_are_escaped():
    page = transcripts_html([GAME | {"iteration": "<i>", "forfeited_by": "<b>x</b>"}], 1)
    assert "iteration &lt;i&gt;" in page and "forfeited by seat &lt;b&gt;x&lt;/b&gt;" in page
    assert "<i>" not in page and "<b>" not in page
