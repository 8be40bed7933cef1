"""A tiny text-mode Kuhn LM that writes a legal action in about half its answers, so
that sampled tallies differ from state to state (the untrained model's answers are
almost all invalid, and all-invalid tallies are equal whatever the seeds)."""

from __future__ import annotations

import torch

from coplay.envs.probe import resolve_factory
from coplay.eval.exact import to_table
from coplay.models.build import build_policy
from coplay.policies.lm import LMPolicy
from coplay.train.settings import build_config
from coplay.train.trainer import game_text
from coplay.types import Observation
from tests.train.runs import TINY

TEXT = ["model.mode=text", "model.max_new_tokens=4", "model.text.answer=free"]
"""Free text, read leniently (the last bracketed legal action), four tokens at most."""


def writing_lm(seed: int = 0) -> LMPolicy:
    """The tiny text LM of ``seed``, writing actions (``write_actions``)."""
    cfg = build_config(overrides=[*TINY, *TEXT])
    text = game_text(resolve_factory("kuhn_poker", {}), seed=0)
    lm = build_policy(cfg.model, corpus=text.texts, actions=text.actions, seed=seed)
    write_actions(lm)
    return lm


def write_actions(lm: LMPolicy, bias: float = 4.0) -> None:
    """Add ``bias`` to the logits of Kuhn's action tokens (one token each), in place."""
    model = lm.model
    ids = [lm.action_ids(a)[0] for a in ("[Pass]", "[Bet]")]
    head = torch.nn.Linear(model.lm_head.in_features, model.lm_head.out_features, bias=True)
    with torch.no_grad():
        head.weight.copy_(model.lm_head.weight)
        head.bias.zero_()
        head.bias[ids] = bias
    model.lm_head = head


def kuhn_observations() -> list[Observation]:
    """The observation at every Kuhn information state, in the tabulation's order."""
    seen: list[Observation] = []
    to_table(_Recorder(seen), "kuhn_poker")
    return seen


class _Recorder:
    """Records what the tabulation asks, answering uniformly."""

    def __init__(self, seen: list[Observation]) -> None:
        self.seen = seen

    def action_probs(self, observations):
        self.seen.extend(observations)
        return [{a: 1 / len(o.legal_actions) for a in o.legal_actions} for o in observations]
