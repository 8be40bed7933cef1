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
    assert main(["sft", "--quiet", "--data", str(demos), "--out", str(out), *tiny]) == 0
    assert json.loads((out / "summary.json").read_text())["steps"] >= 1
