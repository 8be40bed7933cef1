"""Resolving a game from its name, its family or a user's module path: one error line
for every name that builds nothing."""

from pathlib import Path

import pytest

from coplay.envs.probe import resolve_factory
from coplay.envs.registry import UnknownGameError

ROOT = Path(__file__).resolve().parents[2]


def test_resolve_factory_by_name_family_and_module(monkeypatch):
    monkeypatch.chdir(ROOT)
    assert resolve_factory("frozen_lake", {"size": 3})().spec.max_turns == 36
    assert resolve_factory("openspiel:matrix_pd", {})().spec.num_players == 2
    bidding = resolve_factory("examples.bidding:make", {})
    assert bidding().spec.name == "bidding"
    with pytest.raises(UnknownGameError, match="unknown game 'nope'"):
        resolve_factory("nope", {})
    with pytest.raises(ValueError, match="no module 'examples.nope'"):
        resolve_factory("examples.nope:make", {})
    with pytest.raises(ValueError, match="has no function 'nope'"):
        resolve_factory("examples.bidding:nope", {})
    with pytest.raises(ValueError, match="size must be an integer"):
        resolve_factory("sokoban", {"size": 40})


def test_a_game_function_that_raises_is_one_error_line(monkeypatch, tmp_path):
    # check-env's exit 1 means the game has a defect; a crash must not look like one.
    (tmp_path / "badgames.py").write_text("def boom():\n    raise RuntimeError('boom')\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(ValueError, match="badgames:boom: building the game failed: RuntimeError"):
        resolve_factory("badgames:boom", {})


def test_an_unknown_member_of_a_family_is_the_familys_own_error():
    # "textarena" is an importable module too: an unknown id fell through to importing
    # it ("module 'textarena' has no function 'NoSuch-v0'"), and textarena:make ran
    # textarena.make as if it were the user's game function.
    pytest.importorskip("textarena")
    for game in ("textarena:NoSuch-v0", "textarena:make"):
        with pytest.raises(UnknownGameError, match="^unknown TextArena game "):
            resolve_factory(game, {})
