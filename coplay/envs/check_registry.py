"""The checks' records and registry: what a check gets (``Probe``), what it finds
(``Finding``), the registry ``CHECKS`` that ``register`` fills, and ``run_check``, which
turns one check's play into a ``CheckResult``.

The checks themselves, and ``check_env``, which runs them into a ``CheckReport``, are
in ``coplay.envs.check``, which registers them when imported.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

from coplay.envs.probe import Defect, Skip, Trace, play, random_actions
from coplay.types import Env

MAX_FINDINGS = 5
"""Findings kept per check; the rest are counted in the note."""


@dataclass(frozen=True)
class Finding:
    """One defect: which check found it, what is wrong and where, how to fix it."""

    check: str
    message: str
    fix: str


@dataclass(frozen=True)
class CheckResult:
    """What one check found."""

    check: str
    description: str
    findings: tuple[Finding, ...] = ()
    note: str = ""
    """Why a check was skipped, or how many findings were left out."""

    @property
    def status(self) -> str:
        """``pass``, ``fail``, ``skip`` or ``blocked`` (by another check's defect)."""
        if any(f.check == self.check for f in self.findings):
            return "fail"
        if self.findings:
            return "blocked"
        return "skip" if self.note.startswith("skipped") else "pass"


@dataclass(frozen=True)
class CheckReport:
    """Every check's result for one game."""

    game: str
    episodes: int
    seed: int
    results: tuple[CheckResult, ...]

    @property
    def findings(self) -> list[Finding]:
        """Each distinct finding once, in check order."""
        return list(dict.fromkeys(f for r in self.results for f in r.findings))

    @property
    def passed(self) -> bool:
        return not self.findings


@dataclass(frozen=True)
class Probe:
    """What a check gets: a factory of fresh envs and the seeds of the episodes to play."""

    make: Callable[[], Env]
    seeds: tuple[int, ...]

    def play(self, seed: int, **kwargs) -> Trace:
        """One random episode of a fresh env."""
        return play(self.make(), seed, random_actions(seed), **kwargs)


CheckFn = Callable[[Probe], Iterator[Finding]]


@dataclass(frozen=True)
class Check:
    run: CheckFn
    description: str


CHECKS: dict[str, Check] = {}


def register(name: str, description: str) -> Callable[[CheckFn], CheckFn]:
    """Add a check to ``CHECKS`` under ``name``."""

    def wrap(fn: CheckFn) -> CheckFn:
        CHECKS[name] = Check(fn, description)
        return fn

    return wrap


def run_check(name: str, probe: Probe) -> CheckResult:
    """Run one check; defects found while playing become findings, not crashes."""
    check = CHECKS[name]
    findings: list[Finding] = []
    note = ""
    try:
        for finding in check.run(probe):
            findings.append(finding)
    except Defect as defect:
        findings.append(Finding(defect.check or name, defect.message, defect.fix))
    except Skip as skip:
        note = f"skipped: {skip}"
    except Exception as err:  # noqa: BLE001 - an env odd enough to trip the checker itself
        findings.append(
            Finding(name, f"the check stopped: {type(err).__name__}: {err}", "see the message")
        )
    if len(findings) > MAX_FINDINGS:
        note = f"{len(findings) - MAX_FINDINGS} more findings not shown"
    return CheckResult(name, check.description, tuple(findings[:MAX_FINDINGS]), note)
