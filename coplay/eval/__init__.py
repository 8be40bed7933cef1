"""Evaluation: exact exploitability through OpenSpiel, and matches with intervals."""

from coplay.eval.exact import (
    ExploitabilityResult,
    exploitability,
    tabular_exploitability,
    to_openspiel_policy,
)
from coplay.eval.matches import Interval, MatchResult, play_match, wilson

__all__ = [
    "ExploitabilityResult",
    "Interval",
    "MatchResult",
    "exploitability",
    "play_match",
    "tabular_exploitability",
    "to_openspiel_policy",
    "wilson",
]
