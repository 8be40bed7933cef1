"""Policies: scripted bots (and, added by the lead, the language-model policy)."""

from coplay.policies.scripted import (
    NashPolicy,
    PerfectPlayer,
    RandomPolicy,
    ScriptedPolicy,
    TablePolicy,
    make_scripted,
)

__all__ = [
    "NashPolicy",
    "PerfectPlayer",
    "RandomPolicy",
    "ScriptedPolicy",
    "TablePolicy",
    "make_scripted",
]
