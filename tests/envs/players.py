"""Test players for the talk games: replay fixed answers, message turns included."""

from collections.abc import Sequence

from coplay.envs.actions import parse_action
from coplay.types import Decision, Observation


class Replay:
    """Answers with the next of ``texts`` (cycling), as a language model would:
    a message turn's action is the text, otherwise the bracketed legal action in it."""

    def __init__(self, texts: Sequence[str], policy_id: str = "replay") -> None:
        self.texts = list(texts)
        self.policy_id = policy_id
        self.version = 0
        self.seen: list[Observation] = []

    def act(self, observations: Sequence[Observation]) -> list[Decision]:
        out = []
        for obs in observations:
            text = self.texts[len(self.seen) % len(self.texts)]
            self.seen.append(obs)
            legal = obs.legal_actions
            action = text if legal is None else parse_action(text, legal)
            out.append(Decision(text=text, action=action, policy_id=self.policy_id))
        return out
