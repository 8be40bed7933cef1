"""Freed tensor memory kept for reuse: glibc's thresholds set once, never over a user's."""

import json
import os
import subprocess
import sys

import pytest

from coplay.backends import memory

# Plays 128 tic-tac-toe games with the tiny model twice and prints the page
# faults of the second (the first meets every allocation size once).
_ROLLOUT = """
import json, resource
from coplay.envs.gameref import GameRef
from coplay.models.build import ModelConfig, build_policy
from coplay.rollout.engine import play_episodes
from coplay.train.trainer import game_text
from coplay.backends import memory

game = GameRef("tic_tac_toe")
text = game_text(game.make)
policy = build_policy(ModelConfig(), corpus=text.texts, actions=text.actions, seed=0)
def play(seed):
    seeds = [seed + i for i in range(128)]
    play_episodes(game.make, [[policy] * 2] * 128, seeds, streams=seeds)
play(0)
start = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
play(128)
faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - start
print(json.dumps({"kept": memory.keep_freed_memory(), "faults": faults}))
"""


def _rollout(env: dict) -> dict:
    out = subprocess.run(
        [sys.executable, "-c", _ROLLOUT], env=env, capture_output=True, text=True, check=True
    )
    return json.loads(out.stdout.splitlines()[-1])


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's malloc")
def test_a_rollout_reuses_freed_memory_instead_of_faulting_it_in_again():
    env = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_")}
    env.pop("GLIBC_TUNABLES", None)
    kept = _rollout(env)
    # A malloc setting of the user's own: nothing is changed (glibc's defaults here).
    default = _rollout(env | {"MALLOC_ARENA_MAX": "8"})
    assert kept["kept"] and not default["kept"]
    assert kept["faults"] * 5 < default["faults"]


class _Libc:
    def __init__(self, answer: int = 1) -> None:
        self.calls, self.answer = [], answer

    @property
    def mallopt(self):
        def call(option, value):
            self.calls.append((option, value))
            return self.answer

        return call


@pytest.fixture
def fresh(monkeypatch):
    """A process in which ``keep_freed_memory`` has not run yet, on a recording libc."""
    libc = _Libc()
    monkeypatch.setattr(memory, "_kept", None)
    monkeypatch.setattr(memory.sys, "platform", "linux")
    monkeypatch.setattr(memory.ctypes, "CDLL", lambda name: libc)
    for key in [k for k in memory.os.environ if k.startswith("MALLOC_")]:
        monkeypatch.delenv(key)
    monkeypatch.delenv("GLIBC_TUNABLES", raising=False)
    return libc


def test_the_thresholds_are_set_once_per_process(fresh):
    assert memory.keep_freed_memory()
    assert fresh.calls == [(-3, 4 * 2**20), (-1, 128 * 2**20), (-2, 16 * 2**20)]
    assert memory.keep_freed_memory()
    assert len(fresh.calls) == 3


@pytest.mark.parametrize(
    "env", [{"MALLOC_TRIM_THRESHOLD_": "0"}, {"GLIBC_TUNABLES": "glibc.malloc.trim_threshold=0"}]
)
def test_a_users_own_malloc_settings_are_left_alone(fresh, monkeypatch, env):
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    assert not memory.keep_freed_memory()
    assert fresh.calls == []


def test_without_glibc_nothing_is_set(fresh, monkeypatch):
    monkeypatch.setattr(memory.sys, "platform", "darwin")
    assert not memory.keep_freed_memory()
    monkeypatch.setattr(memory, "_kept", None)
    monkeypatch.setattr(memory.sys, "platform", "linux")

    def no_mallopt(name):
        raise AttributeError("mallopt")

    monkeypatch.setattr(memory.ctypes, "CDLL", no_mallopt)
    assert not memory.keep_freed_memory()
    monkeypatch.setattr(memory, "_kept", None)
    monkeypatch.setattr(memory.ctypes, "CDLL", lambda name: _Libc(answer=0))  # refused
    assert not memory.keep_freed_memory()
    assert fresh.calls == []
