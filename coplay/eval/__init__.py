"""Evaluation: exact exploitability through OpenSpiel, and matches with intervals."""

from coplay.eval.exact import (
    ExploitabilityResult,
    exploitability,
    tabular_exploitability,
    to_openspiel_policy,
)
from coplay.eval.exact_match import ExactOutcome, exact_outcomes
from coplay.eval.matches import Interval, MatchResult, play_match, wilson

__all__ = [
    "ExactOutcome",
    "ExploitabilityResult",
    "Interval",
    "MatchResult",
    "exact_outcomes",
    "exploitability",
    "play_match",
    "tabular_exploitability",
    "to_openspiel_policy",
    "wilson",
]
