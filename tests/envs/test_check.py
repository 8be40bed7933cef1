"""The environment checker: every registered game passes, each deliberately broken game
is flagged by the right check, and factories resolve from names and module paths."""

import random
from dataclasses import replace
from functools import partial
from pathlib import Path

import numpy as np
import pytest

from coplay.envs import parse_action
from coplay.envs.check import check_env
from coplay.envs.check_registry import CHECKS
from coplay.envs.probe import resolve_factory
from coplay.envs.registry import list_games, make_env
from coplay.types import GameKind, GameSpec, Observation

ROOT = Path(__file__).resolve().parents[2]


class Duel:
    """A correct little game: two private cards, player 0 [Raise]s or [Check]s,
    player 1 [Call]s or [Fold]s; a call shows down for 2 (raised) or 1 chips."""

    spec = GameSpec("duel", 2, GameKind.ZERO_SUM, max_turns=2, perfect_information=False,
                    min_return=-2.0, max_return=2.0)  # fmt: skip
    menus = (("[Raise]", "[Check]"), ("[Call]", "[Fold]"))

    def reset(self, seed):
        self.cards = [int(c) for c in np.random.default_rng(seed).permutation(4)[:2]]
        self.history = []

    def players_to_act(self):
        return [] if self.is_terminal() else [len(self.history)]

    def legal(self, player):
        return self.menus[player] if player in self.players_to_act() else ()

    def text(self, player):
        return f"You hold card {self.cards[player]}. Moves: {self.history}.\n"

    def observe(self, player):
        key = f"p{player} card {self.cards[player]} moves {self.history}"
        return Observation("duel", player, self.text(player), self.legal(player), key)

    def private_facts(self, player):
        return [f"card {self.cards[player]}"]

    def parse_action(self, player, text):
        return parse_action(text, self.legal(player))

    def step(self, actions):
        (player, text), = actions.items()  # fmt: skip
        action = self.parse_action(player, text)
        if action is None:
            raise ValueError(f"{text!r} is not legal")
        self.history.append(action)
        return {0: 0.0, 1: 0.0}

    def is_terminal(self):
        return len(self.history) == 2

    def returns(self):
        if not self.is_terminal():
            return [0.0, 0.0]
        if self.history[1] == "[Fold]":
            return [1.0, -1.0]
        stake = 2.0 if self.history[0] == "[Raise]" else 1.0
        sign = 1.0 if self.cards[0] > self.cards[1] else -1.0
        return [sign * stake, -sign * stake]


# --- one broken game per defect; each names the check that must flag it ---------------


class UnseededDeal(Duel):
    def reset(self, seed):
        super().reset(seed)
        self.cards = random.sample(range(4), 2)  # global randomness, not the seed


class HistoryKeptOverReset(Duel):
    def reset(self, seed):
        history = getattr(self, "history", [])
        super().reset(seed)
        self.history = history[:1]  # a stale move survives reset


class ShowsOpponentCard(Duel):
    def text(self, player):
        return super().text(player) + f"Opponent: {self.cards[1 - player]}.\n"


class LeaksFactNoKey(ShowsOpponentCard):
    def text(self, player):
        return Duel.text(self, player) + f"They hold card {self.cards[1 - player]}.\n"

    def observe(self, player):
        return Observation("duel", player, self.text(player), self.legal(player), None)


class ListsActionItCannotParse(Duel):
    def parse_action(self, player, text):
        return parse_action(text, [a for a in self.legal(player) if a != "[Fold]"])


class ParsesAnything(Duel):
    def parse_action(self, player, text):
        return parse_action(text, self.legal(player)) or self.legal(player)[0]


class EmptyList(Duel):
    menus = ((), ("[Call]", "[Fold]"))


class UnbracketedAndDuplicates(Duel):
    menus = (("Raise", "[Check]", "[check]"), ("[Call]", "[Fold]"))


class CrashesOnFold(Duel):
    def step(self, actions):
        if "[Fold]" in actions.values():
            raise KeyError("fold")
        return super().step(actions)


class StepReturnsNothing(Duel):
    def step(self, actions):
        super().step(actions)


class ReturnsOutOfRange(Duel):
    def returns(self):
        return [3 * r for r in super().returns()]


class NotZeroSum(Duel):
    def returns(self):
        return [max(r, 0.0) for r in super().returns()]


class RewardsDisagreeWithReturns(Duel):
    def step(self, actions):
        super().step(actions)
        return {0: 0.5, 1: -0.5}


class OneReturnTooFew(Duel):
    def returns(self):
        return super().returns()[:1]


class StuckAfterCheck(Duel):
    def players_to_act(self):
        return [] if self.history == ["[Check]"] else super().players_to_act()


class BothActAtOnce(Duel):
    def players_to_act(self):
        return [] if self.is_terminal() else [0, 1]


class OverAtReset(Duel):
    def is_terminal(self):
        return True


class NoTurns(Duel):
    spec = replace(Duel.spec, max_turns=0)


BROKEN = [
    (UnseededDeal, "determinism"),
    (HistoryKeptOverReset, "determinism"),
    (ShowsOpponentCard, "private_info"),
    (LeaksFactNoKey, "private_info"),
    (ListsActionItCannotParse, "legal_actions"),
    (ParsesAnything, "legal_actions"),
    (EmptyList, "legal_actions"),
    (UnbracketedAndDuplicates, "legal_actions"),
    (CrashesOnFold, "legal_actions"),
    (StepReturnsNothing, "legal_actions"),
    (ReturnsOutOfRange, "returns"),
    (NotZeroSum, "returns"),
    (RewardsDisagreeWithReturns, "returns"),
    (OneReturnTooFew, "returns"),
    (StuckAfterCheck, "episode_length"),
    (BothActAtOnce, "episode_length"),
    (OverAtReset, "episode_length"),
    (NoTurns, "episode_length"),
]


def test_a_correct_game_passes_every_check():
    report = check_env(Duel, episodes=20, seed=0)
    assert report.passed and report.findings == []
    assert [r.check for r in report.results] == list(CHECKS)
    assert {r.status for r in report.results} == {"pass"}


@pytest.mark.parametrize(("cls", "check"), BROKEN, ids=[c.__name__ for c, _ in BROKEN])
def test_each_broken_game_is_flagged_by_its_check(cls, check):
    report = check_env(cls, episodes=20, seed=0)
    assert not report.passed
    flagged = {f.check for f in report.findings}
    assert check in flagged, report.findings
    by_name = {r.check: r for r in report.results}
    assert by_name[check].status == "fail"
    assert all(f.message and f.fix for f in report.findings)


def test_findings_say_where():
    (finding,) = [f for f in check_env(CrashesOnFold, episodes=5).findings][:1]
    assert finding.message.startswith("seed ") and "step 1" in finding.message
    assert "KeyError" in finding.message
    nothing = check_env(StepReturnsNothing, episodes=1).findings[0].message
    assert "step() must return {player: reward}, got None" in nothing
    leak = check_env(LeaksFactNoKey, episodes=5).findings[0]
    assert "shows player" in leak.message and "private fact 'card" in leak.message


class PaysNaN(Duel):
    def step(self, actions):
        super().step(actions)
        return {0: float("nan"), 1: 0.0}


class ReturnsNaN(Duel):
    def returns(self):
        return [float("nan"), 0.0]


class PaysText(Duel):
    def step(self, actions):
        super().step(actions)
        return {0: "0.0", 1: 0.0}


@pytest.mark.parametrize("cls", [PaysNaN, ReturnsNaN, PaysText])
def test_a_payoff_that_is_no_number_is_a_returns_finding_alone(cls):
    # NaN != NaN: a game paying NaN every time was also called nondeterministic
    # ("rewards {0: nan} vs {0: nan}"), and a text reward stopped the check with no
    # seed or step.
    report = check_env(cls, episodes=3)
    by_name = {r.check: r for r in report.results}
    assert by_name["determinism"].status == "pass"
    assert by_name["returns"].status == "fail"
    assert by_name["returns"].findings[0].message.startswith("seed 0, at the end: ")


def test_info_key_rule_catches_a_leak_only_with_varied_deals():
    # Seeds 0..19 deal player 0 the same card against different ones: the texts part.
    found = check_env(ShowsOpponentCard, episodes=20, checks=["private_info"]).findings
    assert found and "info_key is the same" in found[0].message
    # One episode shows each information state once: nothing to compare yet.
    assert check_env(ShowsOpponentCard, episodes=1, checks=["private_info"]).passed


@pytest.mark.parametrize("name", [g.name for g in list_games()])
def test_every_registered_game_passes(name):
    report = check_env(partial(make_env, name), episodes=3, seed=0)
    assert report.passed, report.findings


@pytest.mark.parametrize("name", ["kuhn_poker", "leduc_poker"])
def test_poker_has_no_false_private_info_findings_over_many_deals(name):
    assert check_env(partial(make_env, name), episodes=60, checks=["private_info"]).passed


def test_bad_arguments_are_one_line_errors():
    with pytest.raises(ValueError, match="episodes must be a positive integer, got 0"):
        check_env(Duel, episodes=0)
    with pytest.raises(ValueError, match="unknown check\\(s\\) speed; known: determinism"):
        check_env(Duel, checks=["speed"])
    with pytest.raises(ValueError, match="built a dict, not an Env \\(missing \\['spec'"):
        check_env(dict)


def test_the_guide_example_passes_and_pays_as_documented():
    from examples.bidding import make

    assert check_env(make, episodes=40).passed
    env = make()
    env.reset(0)
    env.values = [3, 2]
    env.step({0: "[Bid 1]"})
    assert "Player 0 bid 1." in env.observe(1).text and "at 3" not in env.observe(1).text
    env.step({1: "[Bid 1]"})  # a tie goes to player 0, who pays 1 for a value of 3
    assert env.returns() == [2.0, 0.0]


def test_openspiel_parameters_that_break_the_game_are_a_user_error_not_a_defect():
    # goofspiel of -1 cards loads in OpenSpiel and failed at the first deal: check-env
    # reported it as a defect of the env (exit 1) instead of a mistake in its settings.
    with pytest.raises(ValueError, match="^bad parameters for game 'goofspiel', num_cards=-1"):
        resolve_factory("openspiel:goofspiel", {"num_cards": -1})
    # A game OpenSpiel cannot start with its defaults either (crossword takes action
    # structs only) is the env's defect, whatever parameters are given.
    report = check_env(resolve_factory("openspiel:crossword", {"puzzles_root": ""}), episodes=1)
    assert "LegalActions unimplemented" in report.findings[0].message
