"""Message dependence: a policy that ignores messages scores about 0, one whose action
the message decides scores high; swaps reach the whole conversation."""

import re
import zlib

import numpy as np
import pytest

from coplay.envs.registry import make_env
from coplay.eval.messages import (
    listener_states,
    message_dependence,
    reprompt,
    swap,
    total_variation,
)
from coplay.policies.scripted import RandomPolicy
from coplay.rollout.engine import play_episodes
from coplay.sft.demos import TALKERS, Talking
from coplay.types import Decision, Observation

HEARD = re.compile(r'Other said: "([^"]*)"')


def _episodes(n=12):
    talker = Talking(RandomPolicy(seed=1), TALKERS["negotiation"], seed=1)
    make = lambda: make_env("negotiation", max_actions=4)  # noqa: E731
    return play_episodes(make, [[talker, talker]] * n, range(n))


class Ignores:
    """Random legal moves, whatever was said."""

    policy_id, version = "ignores", 0

    def __init__(self, seed=0):
        self.rng = np.random.default_rng(seed)

    def act(self, observations):
        out = []
        for o in observations:
            a = o.legal_actions[int(self.rng.integers(len(o.legal_actions)))]
            out.append(Decision(text=a, action=a, policy_id=self.policy_id))
        return out


class Copies:
    """The move the last message heard names (a hash of its text), sometimes invalid."""

    policy_id, version = "copies", 0

    def act(self, observations):
        out = []
        for o in observations:
            heard = HEARD.findall(o.text)[-1]
            pick = zlib.crc32(heard.encode()) % (len(o.legal_actions) + 1)
            a = o.legal_actions[pick] if pick < len(o.legal_actions) else None
            out.append(Decision(text=a or "?", action=a, policy_id=self.policy_id))
        return out


def test_listener_states_swap_the_latest_message_of_the_other_player():
    states = listener_states(_episodes(), seed=0)
    assert len(states) > 10
    for s in states:
        assert s.real.legal_actions and s.message != s.replacement
        assert HEARD.findall(s.real.text)[-1] == s.message
        assert HEARD.findall(s.swapped.text)[-1] == s.replacement
        assert s.swapped.legal_actions == s.real.legal_actions
        assert s.real.text.replace(f'"{s.message}"', f'"{s.replacement}"') == s.swapped.text


class Untidy:
    """Says messages the game tidies up (spaces collapsed, a bracket), moves at random."""

    policy_id, version = "untidy", 0

    def __init__(self, seed):
        self.rng = np.random.default_rng(seed)

    def act(self, observations):
        out = []
        for o in observations:
            n = int(self.rng.integers(40))
            options = o.legal_actions or (f"plan  {n} [go] ",)
            a = options[int(self.rng.integers(len(options)))]
            out.append(Decision(text=a, action=a, policy_id=self.policy_id))
        return out


def test_a_message_the_game_cleaned_is_found_as_the_listener_saw_it():
    # The listener's observation quotes the cleaned message; the raw text was looked
    # for instead and every listener state was dropped.
    make = lambda: make_env("dilemma", rounds=2)  # noqa: E731
    eps = play_episodes(make, [[Untidy(1), Untidy(2)]] * 12, range(12))
    states = listener_states(eps, seed=0)
    assert len(states) > 10
    for s in states:
        assert "  " not in s.message and "[" not in s.message
        assert f'"{s.message}"' in s.real.text and f'"{s.replacement}"' in s.swapped.text


def test_a_policy_that_ignores_messages_scores_about_zero():
    states = listener_states(_episodes(), seed=0)
    result = message_dependence(Ignores(seed=2), states, k=32, bootstrap=200, seed=0)
    assert result.states == len(states) and result.k == 32
    assert result.tv_swapped > 0.3  # two finite samples of a uniform choice differ...
    assert abs(result.excess) < 0.06  # ...as much as with the real message twice
    lo, hi = result.excess_ci
    assert lo <= 0.0 <= hi


def test_a_policy_that_copies_the_message_scores_high():
    states = listener_states(_episodes(), seed=0)
    result = message_dependence(Copies(), states, k=4, bootstrap=200, seed=0)
    assert result.tv_noise == 0.0  # deterministic
    assert result.tv_swapped > 0.8 and result.excess_ci[0] > 0.7


def test_swap_reaches_earlier_observations_and_reprompt_rebuilds_their_prompts():
    said = Observation(game="g", player=1, text='Other said: "a"', legal_actions=None)
    answer = Decision(text="ok", action="ok", policy_id="p", prompt_ids=(1, 2))
    now = Observation(
        game="g",
        player=1,
        text='Other said: "a"\nact',
        legal_actions=("[X]",),
        history=((said, answer),),
    )
    out = swap(now, "a", "b")
    assert out.text == 'Other said: "b"\nact'
    assert out.history[0][0].text == 'Other said: "b"' and out.history[0][1] is answer

    class Prompts:
        def prompt_ids(self, obs):
            return tuple(ord(c) for c in obs.text)

    rebuilt = reprompt(Prompts(), out)
    assert rebuilt.history[0][1].prompt_ids == tuple(ord(c) for c in 'Other said: "b"')
    assert rebuilt.history[0][1].response_ids == answer.response_ids


def test_total_variation_and_errors():
    from collections import Counter

    assert total_variation(Counter(a=3, b=1), Counter(a=1, b=3)) == pytest.approx(0.5)
    assert total_variation(Counter(a=2), Counter(b=5)) == 1.0
    with pytest.raises(ValueError, match="at least one listener state"):
        message_dependence(Ignores(), [], k=4)
