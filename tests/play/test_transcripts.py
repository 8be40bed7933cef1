"""Reading a run's transcripts back for replay."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from coplay.play.transcripts import read_transcripts
from coplay.report.sinks import append_transcripts
from coplay.types import Decision, Episode, Observation, Trajectory, Turn


def episode(seed: int) -> Episode:
    def turn(step: int, player: int, action: str, logprobs: tuple[float, ...]) -> Turn:
        obs = Observation("kuhn_poker", player, f"view {step}", legal_actions=("[Pass]", "[Bet]"))
        decision = Decision(
            text=f"I {action}", action=action, policy_id="learner", logprobs=logprobs
        )
        return Turn(player, obs, decision, step, played_action=action, reward=float(step))

    trajectories = (
        Trajectory(0, "learner", [turn(0, 0, "[Bet]", (-0.5,)), turn(2, 0, "[Pass]", ())]),
        Trajectory(1, "nash", [turn(1, 1, "[Bet]", (-0.25, -0.25))]),
    )
    return Episode("kuhn_poker", seed, seed, ("learner", "nash"), trajectories, (-1.0, 1.0))


def test_the_games_come_back_in_play_order_with_their_probabilities(tmp_path):
    path = tmp_path / "transcripts.jsonl"
    append_transcripts(path, [episode(3)], iteration=5)
    append_transcripts(path, [episode(4)], iteration=6)
    games = read_transcripts(path)
    assert [(g.iteration, g.seed) for g in games] == [(5, 3), (6, 4)]
    first = games[0]
    assert first.seats == ("learner", "nash") and first.returns == (-1.0, 1.0)
    assert [(t.step, t.player, t.action) for t in first.turns] == [
        (0, 0, "[Bet]"),
        (1, 1, "[Bet]"),
        (2, 0, "[Pass]"),
    ]
    assert first.turns[0].observation == "view 0" and first.turns[0].text == "I [Bet]"
    assert first.turns[0].legal_actions == ("[Pass]", "[Bet]")
    assert math.isclose(first.turns[0].probability, math.exp(-0.5))
    assert math.isclose(first.turns[1].probability, math.exp(-0.5))  # a sequence's product
    assert first.turns[2].probability is None  # no log-probs recorded (a scripted seat)
    assert [t.reward for t in first.turns] == [0.0, 1.0, 2.0]


def test_a_torn_last_line_and_a_missing_file_read_as_fewer_games(tmp_path):
    path = tmp_path / "transcripts.jsonl"
    assert read_transcripts(path) == []
    append_transcripts(path, [episode(1), episode(2)], iteration=1)
    path.write_text(path.read_text()[:-40])  # killed while writing the second
    assert [g.seed for g in read_transcripts(path)] == [1]


def damaged(tmp_path, edit) -> Path:
    """A transcripts file of two games, the second edited by ``edit(record)``."""
    path = tmp_path / "transcripts.jsonl"
    append_transcripts(path, [episode(1), episode(2)], iteration=1)
    first, second = (json.loads(line) for line in path.read_text().splitlines())
    edit(second)
    path.write_text(json.dumps(first) + "\n" + json.dumps(second) + "\n")
    return path


@pytest.mark.parametrize(
    ("edit", "fault"),
    [
        # exp() of it overflowed: an OverflowError traceback from coplay play --web
        (lambda r: r["turns"][0].update(logprobs=[1000.0]), "'logprobs' must be a list of"),
        # tuple(5): "coplay play: error: 'int' object is not iterable"
        (lambda r: r["turns"][0].update(legal_actions=5), "'legal_actions' must be a list of"),
        (lambda r: r.update(returns=["won", "lost"]), "'returns' must be a list of finite numbers"),
    ],
    ids=["positive logprob", "legal actions a number", "returns words"],
)
def test_a_record_replay_cannot_read_is_named_by_file_and_line(tmp_path, edit, fault):
    with pytest.raises(
        ValueError, match=r"transcripts.jsonl:2 is not a transcript record: "
    ) as err:
        read_transcripts(damaged(tmp_path, edit))
    assert fault in str(err.value)


def test_a_record_without_a_field_the_report_does_without_is_replayed(tmp_path):
    # "coplay play: error: 'seed'": the replay needed fields the report reads as absent.
    def edit(record):
        del record["seed"], record["game"], record["turns"][0]["step"]

    games = read_transcripts(damaged(tmp_path, edit))
    assert [g.seed for g in games] == [1, None] and games[1].game is None
    assert [t.step for t in games[1].turns] == [None, 1, 2]
