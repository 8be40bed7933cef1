"""Scripted policies and the Kuhn game, shared by the rollout engine's test files."""

from collections.abc import Sequence

from coplay.envs.registry import make_env
from coplay.types import Decision, Observation


class Scripted:
    """Answers with a fixed sequence of texts (cycling), parsing them like an LM would."""

    def __init__(self, texts: Sequence[str], policy_id: str = "scripted"):
        self.texts = list(texts)
        self.policy_id = policy_id
        self.version = 0
        self.calls: list[int] = []
        self._i = 0

    def act(self, observations: Sequence[Observation]) -> list[Decision]:
        from coplay.envs.actions import parse_action

        self.calls.append(len(observations))
        out = []
        for obs in observations:
            text = self.texts[self._i % len(self.texts)]
            self._i += 1
            out.append(
                Decision(
                    text=text,
                    action=parse_action(text, obs.legal_actions),
                    policy_id=self.policy_id,
                )
            )
        return out


class FirstLegal:
    policy_id = "first"
    version = 0

    def act(self, observations):
        return [
            Decision(text=o.legal_actions[0], action=o.legal_actions[0], policy_id="first")
            for o in observations
        ]


def kuhn():
    return make_env("kuhn_poker")


class SteeredFirst(FirstLegal):
    """Plays the first legal action, or the one it is told to (and records when)."""

    policy_id = "steered"

    def __init__(self):
        self.forced: list[list[int]] = []

    def act_forced(self, observations, indices):
        self.forced.append(list(indices))
        picks = [
            o.legal_actions[i % len(o.legal_actions)]
            for o, i in zip(observations, indices, strict=True)
        ]
        return [Decision(text=a, action=a, policy_id=self.policy_id) for a in picks]


class Logged(FirstLegal):
    """Plays the first legal action and logs its calls in a list shared between bots."""

    def __init__(self, policy_id, log, version=0):
        self.policy_id, self.log, self.version = policy_id, log, version

    def act(self, observations):
        self.log.append((self.policy_id, self.version, len(observations)))
        return [
            Decision(
                text=(a := o.legal_actions[0]),
                action=a,
                policy_id=self.policy_id,
                policy_version=self.version,
            )
            for o in observations
        ]
