"""Rollout engine: one batched call per policy per round, policies asked in order of
first appearance, results independent of batch order, waves of games."""

import pytest

from coplay.rollout.engine import play_episodes
from coplay.types import Decision
from tests.rollout.bots import FirstLegal, Logged, Scripted, kuhn


def test_one_batched_call_per_policy_per_round():
    bot = Scripted(["[Pass]"])
    play_episodes(kuhn, [[bot, bot]] * 10, list(range(10)))
    # Kuhn with everyone passing lasts two rounds: all 10 games ask at once each round.
    assert bot.calls == [10, 10]


def test_equal_seeds_form_groups_with_equal_deals():
    bot = FirstLegal()
    eps = play_episodes(kuhn, [[bot, bot]] * 6, [7, 7, 7, 9, 9, 9])
    texts = [e.turns[0].observation.text for e in eps]
    assert texts[0] == texts[1] == texts[2]
    assert [e.group_id for e in eps] == [7, 7, 7, 9, 9, 9]


def test_results_do_not_depend_on_batch_order():
    bot = FirstLegal()
    seeds = list(range(20))
    fwd = play_episodes(kuhn, [[bot, bot]] * 20, seeds)
    rev = play_episodes(kuhn, [[bot, bot]] * 20, seeds[::-1])
    assert [e.returns for e in fwd] == [e.returns for e in rev[::-1]]


class KingAware:
    """Bets, or calls a bet, holding the king; otherwise passes (checks or folds)."""

    policy_id = "king"
    version = 0

    def act(self, observations):
        picks = ["[Bet]" if "Your card: K." in o.text else "[Pass]" for o in observations]
        return [Decision(text=a, action=a, policy_id=self.policy_id) for a in picks]


class AlwaysBet:
    """Bets, or calls a bet, whatever it holds."""

    policy_id = "bettor"
    version = 0

    def act(self, observations):
        return [
            Decision(text="[Bet]", action="[Bet]", policy_id=self.policy_id) for _ in observations
        ]


def test_seat_permutation_swaps_per_seat_statistics():
    # King-aware against an always-bettor, in either seat: with the king it bets or
    # calls and wins the showdown (+2); otherwise it checks or folds to the bet (-1).
    # So its return is a function of its own card alone, whatever its seat.
    a, b = KingAware(), AlwaysBet()
    seeds = list(range(30))
    ab = play_episodes(kuhn, [[a, b]] * 30, seeds)
    ba = play_episodes(kuhn, [[b, a]] * 30, seeds)
    assert all(e.seats == ("king", "bettor") for e in ab)
    assert all(e.seats == ("bettor", "king") for e in ba)

    def want(ep, seat):
        text = ep.trajectories[seat].turns[0].observation.text
        assert f"You are player {seat}." in text
        return 2.0 if "Your card: K." in text else -1.0

    for eps, seat in ((ab, 0), (ba, 1)):
        got = [e.returns[seat] for e in eps]
        assert got == [want(e, seat) for e in eps]
        assert [e.returns[1 - seat] for e in eps] == [-r for r in got]  # zero-sum
        assert {t.decision.policy_id for e in eps for t in e.trajectories[seat].turns} == {"king"}
        assert set(got) == {2.0, -1.0}  # both cards occur: the check is not vacuous


def test_policies_are_asked_in_order_of_first_appearance_each_round():
    log = []
    a, b = Logged("a", log), Logged("b", log)
    play_episodes(kuhn, [[b, a], [a, b], [a, b]], [0, 1, 2])
    # Round 1: seat 0 acts in every game (b first); round 2: seat 1 (a first).
    assert log == [("b", 0, 1), ("a", 0, 2), ("a", 0, 1), ("b", 0, 2)]


def test_one_id_at_two_versions_is_asked_apart():
    log = []
    old, new = Logged("me", log, version=1), Logged("me", log, version=2)
    eps = play_episodes(kuhn, [[old, new], [new, old]], [0, 1])
    assert log == [("me", 1, 1), ("me", 2, 1), ("me", 2, 1), ("me", 1, 1)]
    assert [t.decision.policy_version for t in eps[0].turns] == [1, 2]


class Queued(FirstLegal):
    """A ``Submits`` policy that logs when each batch is queued and when it is read."""

    policy_id = "queued"

    def __init__(self, log: list[str]):
        self.log = log

    def submit(self, observations, streams=None):
        games = len(observations)
        self.log.append(f"queue {games}")

        def read():
            self.log.append(f"read {games}")
            return self.act(observations)

        return read


def test_waves_queue_one_part_while_another_steps():
    # 5 Kuhn games in 2 parts (3 + 2), two moves each at least: the second part's
    # batch is queued before the first part's is read, and each part's next batch
    # is queued before the other part's is read, so its pass can run meanwhile.
    log = []
    me = Queued(log)
    eps = play_episodes(kuhn, [[me, me]] * 5, range(5), waves=2)
    assert all(e.returns for e in eps)
    assert log[:6] == ["queue 3", "queue 2", "read 3", "queue 3", "read 2", "queue 2"]
    assert log.count("queue 3") == log.count("read 3")
    assert play_episodes(kuhn, [[me, me]] * 5, range(5)) == eps  # one part: the same


def test_waves_must_be_positive():
    with pytest.raises(ValueError, match="waves must be at least 1, got 0"):
        play_episodes(kuhn, [[FirstLegal(), FirstLegal()]], [0], waves=0)


class Plain(FirstLegal):
    """Answers at once, logging when."""

    policy_id = "plain"

    def __init__(self, log: list[str]):
        self.log = log

    def act(self, observations):
        self.log.append(f"act {len(observations)}")
        return super().act(observations)


def test_a_round_is_read_in_request_order_as_one_answer_after_another():
    # A policy that answers at once is asked when its request is read, after the
    # queued policy before it has drawn: a generator the two share (a bot built on the
    # learner's) is drawn from in the order it always was.
    log = []
    queued, plain = Queued(log), Plain(log)
    eps = play_episodes(kuhn, [[queued, plain], [plain, queued]] * 2, range(4))
    assert log[:3] == ["queue 2", "read 2", "act 2"]  # both asked in the first round
    assert all(e.returns for e in eps)


def test_no_games_play_no_episodes():
    assert play_episodes(kuhn, [], [], waves=2) == []
    assert play_episodes(kuhn, [], []) == []
