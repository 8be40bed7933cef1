"""The registry of learner-side loss terms: config section name -> term.

``make_learner`` builds each entry from its section (``LossConfig``'s ``kl``,
``entropy``, ``signalling``, ``listening``; ``target`` is passed on its own) and
keeps those that are on. Adding a term is a module with a ``Term`` subclass and an
entry here. The learner adds the terms' losses in this order: float additions do not
commute in their last bits, so a reordering changes every update slightly.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from coplay.train.parts.entropy import Entropy
from coplay.train.parts.kl import KL
from coplay.train.parts.listening import Listening
from coplay.train.parts.policy_iteration import PolicyIteration
from coplay.train.parts.signalling import Signalling
from coplay.train.parts.term import LossTerm, Metrics, Setup, Term

TERMS: dict[str, type[Term]] = {
    "kl": KL,
    "entropy": Entropy,
    "signalling": Signalling,
    "target": PolicyIteration,
    "listening": Listening,
}


def build_terms(sections: Mapping[str, Any], setup: Setup) -> tuple[dict[str, LossTerm], Metrics]:
    """The terms that ``sections`` (name -> config section, None or absent when off)
    turn on, in registry order, and the idle metrics of those left off."""
    terms: dict[str, LossTerm] = {}
    idle: Metrics = {}
    for name, kind in TERMS.items():
        term = kind.build(sections.get(name), setup)
        if term is None:
            idle |= kind.idle_metrics
        else:
            terms[name] = term
    return terms, idle
