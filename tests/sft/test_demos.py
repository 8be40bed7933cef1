"""Narrated demonstrations: answers parse to the played action, random play claims no
strategy, solved players state their true probabilities, seeds reproduce files."""

import json
import re

import numpy as np
import pytest

from coplay.cli import main
from coplay.envs.actions import parse_action
from coplay.policies.answer import ANSWER_FORMATS
from coplay.policies.scripted import NashPolicy
from coplay.sft.data import read_conversations
from coplay.sft.demos import RANDOM_WHY, write_demos
from coplay.types import Decision

STRATEGY_WORDS = ("strategy", "equilibrium", "best", "optimal", "strong", "weak", "probability")


def _answers(path):
    return [(c.messages[-2].content, c.messages[-1].content) for c in read_conversations(path)]


def test_random_play_is_narrated_as_random_and_varied(tmp_path):
    path = tmp_path / "r.jsonl"
    n = write_demos(path, game="kuhn_poker", player="random", games=40, seed=3)
    pairs = _answers(path)
    assert len(pairs) == n > 40
    used = set()
    for prompt, answer in pairs:
        legal = re.findall(r"\[\w+\]", prompt.splitlines()[-1])
        action = parse_action(answer, legal)
        assert action is not None and answer.endswith(action)
        reasoning = answer.removeprefix("<think>").split("</think>")[0]
        assert "[" not in reasoning
        assert not any(w in reasoning.lower() for w in STRATEGY_WORDS), reasoning
        card = re.search(r"Your card: (\w)", prompt).group(1)
        assert {"J": "Jack", "Q": "Queen", "K": "King"}[card] in reasoning
        used |= {i for i, t in enumerate(RANDOM_WHY) if t.split("{")[0] in reasoning}
    assert len(used) >= 3  # several phrasings


def test_nash_demos_state_the_equilibrium_probabilities(tmp_path):
    path = tmp_path / "n.jsonl"
    write_demos(path, game="kuhn_poker", player="nash", games=30, seed=0)
    nash = NashPolicy("kuhn_poker")
    checked = 0
    for conv in read_conversations(path):
        answer = conv.messages[-1].content
        stated = re.findall(r"(Pass|Bet) (0\.\d\d)", answer)
        if not stated:
            continue
        # The stated mix equals the table at this observation (found by its text).
        env_probs = _probs_for(nash, conv.messages[-2].content)
        for name, p in stated:
            assert float(p) == pytest.approx(env_probs[f"[{name}]"], abs=0.006)
        checked += 1
    assert checked > 5


def _probs_for(policy, text):
    """The policy's probabilities at the Kuhn observation whose text is ``text``."""
    from coplay.envs.registry import make_env

    for seed in range(60):
        env = make_env("kuhn_poker")
        env.reset(seed)
        rng = np.random.default_rng(seed)
        while not env.is_terminal():
            p = env.players_to_act()[0]
            obs = env.observe(p)
            if obs.text == text:
                return policy.action_probs([obs])[0]
            env.step({p: obs.legal_actions[int(rng.integers(len(obs.legal_actions)))]})
    raise AssertionError("observation not found")


def test_same_seed_same_file_and_chat_context(tmp_path):
    a, b, c = tmp_path / "a.jsonl", tmp_path / "b.jsonl", tmp_path / "c.jsonl"
    write_demos(a, game="tic_tac_toe", player="perfect", games=3, seed=1)
    write_demos(b, game="tic_tac_toe", player="perfect", games=3, seed=1)
    assert a.read_text() == b.read_text()
    n = write_demos(c, game="tic_tac_toe", player="perfect", games=3, seed=1, context="chat")
    assert n == 6  # one conversation per player and game
    roles = [m.role for m in read_conversations(c)[0].messages]
    assert roles[:5] == ["system", "user", "assistant", "user", "assistant"]


def test_answers_are_written_in_the_chosen_format_with_its_instruction(tmp_path):
    path = tmp_path / "boxed.jsonl"
    write_demos(path, game="kuhn_poker", player="random", games=2, answer="think-boxed")
    fmt = ANSWER_FORMATS["think-boxed"]
    for conv in read_conversations(path):
        system, *_, last = conv.messages
        assert (system.role, system.content) == ("system", fmt.instruction)
        parsed = fmt.parse(last.content, ["[Pass]", "[Bet]"])
        assert parsed.action in ("[Pass]", "[Bet]") and "\\boxed{" in last.content
    with pytest.raises(ValueError, match="unknown answer format"):
        write_demos(path, game="kuhn_poker", player="random", games=1, answer="nope")


def test_cli_demos_then_sft(tmp_path, capsys):
    demos = tmp_path / "d.jsonl"
    assert main(["demos", "--game", "kuhn_poker", "--games", "4", "--out", str(demos)]) == 0
    assert main(["demos", "--game", "kuhn_poker", "--games", "4", "--out", str(demos)]) == 2
    assert "already exists" in capsys.readouterr().err
    out = tmp_path / "sft"
    tiny = ["model.tiny.hidden_size=32", "model.tiny.intermediate_size=64", "sft.epochs=1"]
    # Narrated Kuhn answers run to about 40 tokens: the checkpoint must be let write them.
    tiny.append("model.max_new_tokens=64")
    assert main(["sft", "--quiet", "--data", str(demos), "--out", str(out), *tiny]) == 0
    assert json.loads((out / "summary.json").read_text())["steps"] >= 1


def test_force_moves_nothing_before_the_arguments_are_checked(tmp_path, capsys):
    demos = tmp_path / "d.jsonl"
    argv = ["demos", "--game", "kuhn_poker", "--games", "4", "--out", str(demos)]
    assert main(argv) == 0
    assert main([*argv, "--answer", "bogus", "--force"]) == 2
    assert "unknown answer format 'bogus'" in capsys.readouterr().err
    assert [p.name for p in tmp_path.iterdir()] == ["d.jsonl"]  # not moved aside
    # A dataset inside the run directory --force would move is refused, not lost.
    run = tmp_path / "sft"
    tiny = ["model.tiny.hidden_size=32", "model.tiny.intermediate_size=64", "sft.epochs=1"]
    tiny.append("model.max_new_tokens=64")  # the narrated answers' length
    assert main(["sft", "--quiet", "--data", str(demos), "--out", str(run), *tiny]) == 0
    inside = run / "demos.jsonl"
    inside.write_bytes(demos.read_bytes())
    assert main(["sft", "--quiet", "--force", "--data", str(inside), "--out", str(run), *tiny]) == 2
    assert "inside" in capsys.readouterr().err and inside.is_file()


def _negotiation_chats(tmp_path, games=6, **kw):
    path = tmp_path / "neg.jsonl"
    params = {"max_actions": 4}
    write_demos(path, game="negotiation", player="random", games=games, params=params, **kw)
    return read_conversations(path)


def test_negotiation_demos_talk_truthfully_about_the_speakers_values(tmp_path):
    fmt = ANSWER_FORMATS["think"]
    said = set()
    for conv in _negotiation_chats(tmp_path, games=8, context="chat"):
        msgs = conv.messages[1:]
        # Every turn of the player is narrated: 2 message and 2 action turns at most.
        assert 2 <= len(msgs) // 2 <= 4
        for user, answer in zip(msgs[::2], msgs[1::2], strict=True):
            values = [
                int(v)
                for v in re.search(r"values per item: ([\d ]+) ", user.content).group(1).split()
            ]
            reasoning = answer.content.removeprefix("<think>").split("</think>")[0]
            assert reasoning.startswith(("My values", "To me", "I value"))
            assert len(reasoning) < 200  # a sentence or two, not the whole observation
            if user.content.endswith("Send the other player a message."):
                message = fmt.parse(answer.content, None).action
                said.add(message)
                assert "[" not in message and len(message) <= 60
                _check_true(message, values)
            else:
                legal = re.findall(r"\[[\w ]+\]", user.content.splitlines()[-1]) + ["[Walk]"]
                assert fmt.parse(answer.content, None).action  # an action follows the block
                assert answer.content.split("</think> ")[1].startswith(
                    ("[Propose", "[Accept]", "[Walk]")
                ), legal
    assert len(said) >= 5  # varied phrasings and items


def _check_true(message: str, values: list[int]) -> None:
    items = ("book", "hat", "ball")
    named = [i for i, name in enumerate(items) if name in message.lower()]
    assert len(named) == 1, message
    v = values[named[0]]
    if "nothing" in message or "You can have all" in message:
        assert v == 0, (message, values)
    else:
        assert v == max(values), (message, values)
        each = re.search(r"worth (\d+) each", message)
        assert each is None or int(each.group(1)) == v


def test_negotiation_reasoning_states_the_offer_and_its_worth(tmp_path):
    checked = 0
    for conv in _negotiation_chats(tmp_path, games=6, context="turn"):
        user, answer = conv.messages[-2].content, conv.messages[-1].content
        offer = re.findall(r"Other: \[Propose [\d ]+\], you get ([\d ]+)", user)
        if not offer:
            continue
        gets = [int(x) for x in offer[-1].split()]
        values = [int(v) for v in re.search(r"values per item: ([\d ]+) ", user).group(1).split()]
        worth = sum(a * b for a, b in zip(gets, values, strict=True))
        assert " ".join(map(str, gets)) in answer and f"{worth}" in answer
        left = re.search(r"\((\d+) actions? left\)", user).group(1)
        assert f"{left} actions left." in answer
        checked += 1
    assert checked > 5


def test_later_observations_show_the_narrated_messages(tmp_path):
    """The talker's messages are played, so the other player reads exactly them."""
    fmt = ANSWER_FORMATS["think"]
    convs = _negotiation_chats(tmp_path, games=3, context="chat")
    for first, second in zip(convs[::2], convs[1::2], strict=True):  # seats 0 and 1
        spoken = [
            fmt.parse(a.content, None).action
            for u, a in zip(first.messages[1::2], first.messages[2::2], strict=True)
            if u.content.endswith("message.")
        ]
        heard = re.findall(r'Other said: "([^"]*)"', second.messages[-2].content)
        assert spoken and heard == spoken[: len(heard)] and heard


class _TextPlayer:
    """A text-mode checkpoint's stand-in: it writes its first legal move (or, not
    ``valid``, an answer that parses to none) and, as ``LMPolicy`` in text mode does,
    refuses to give a choice distribution."""

    mode = "text"

    def __init__(self, valid: bool) -> None:
        self.policy_id, self.version, self.valid = "frozen:ckpt", 0, valid

    def act(self, observations):
        return [
            Decision("?", o.legal_actions[0] if self.valid else None, self.policy_id)
            for o in observations
        ]

    def action_probs(self, observations):
        raise ValueError("exact evaluation reads the choice distribution over the legal actions")


def test_a_text_mode_player_is_narrated_without_probabilities(tmp_path, monkeypatch):
    # Narration asked it for its choice distribution, which a text-mode model refuses.
    monkeypatch.setattr("coplay.sft.demos.build_opponent", lambda *a, **k: _TextPlayer(True))
    path = tmp_path / "t.jsonl"
    assert write_demos(path, game="kuhn_poker", player="ckpt", games=4) > 0
    assert all("My policy chooses" in a for _, a in _answers(path))


def test_a_player_without_a_valid_move_writes_no_empty_file(tmp_path, monkeypatch):
    monkeypatch.setattr("coplay.sft.demos.build_opponent", lambda *a, **k: _TextPlayer(False))
    path = tmp_path / "t.jsonl"
    with pytest.raises(
        ValueError, match="no conversations to write: player ckpt made no valid move in 4 games"
    ):
        write_demos(path, game="kuhn_poker", player="ckpt", games=4)
    assert not path.exists()
