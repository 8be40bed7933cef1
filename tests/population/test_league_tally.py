"""The learner's results against the league's members, and their Elo ratings."""

import itertools

import numpy as np
import pytest

from coplay.eval.matches import outcome
from coplay.eval.ratings import elo_ratings
from coplay.population.league import snapshot_reason
from coplay.population.league_tally import Tally, league_elo, tally_games
from coplay.types import Episode, Trajectory
from tests.population.league_runs import league_cfg, two_player


def episode(seats, returns) -> Episode:
    return Episode("kuhn_poker", 0, 0, tuple(seats), (), tuple(returns))


def test_tally_reads_the_learners_games_from_the_seats():
    eps = [
        episode(["learner", "a"], [1, -1]),  # win against a
        episode(["b", "learner"], [2, -2]),  # loss against b
        episode(["learner", "b"], [0, 0]),  # draw against b
        episode(["learner", "learner"], [1, -1]),  # self-play: skipped
        episode(["x", "learner"], [-1, 1]),  # not in the league: skipped
    ]
    t = tally_games(eps, "learner", ["a", "b"])
    assert t.games.tolist() == [1, 2] and t.wins.tolist() == [1, 0] and t.draws.tolist() == [0, 1]
    # (wins + draws/2 + 1/2) / (games + 1)
    np.testing.assert_allclose(t.win_rates(), [1.5 / 2, 1.0 / 3])
    assert t.score() == pytest.approx(1.5 / 3)
    assert (t + Tally.empty(3)).games.tolist() == [1, 2, 0]


def test_tally_judges_a_game_by_the_board_not_by_a_penalty():
    # The learner won on the board (+1) but was charged two invalid-answer penalties.
    mine = Trajectory(0, "learner", ret=1.0 - 2.0, shaping=-2.0)
    eps = [Episode("kuhn_poker", 0, 0, ("learner", "a"), (mine, Trajectory(1, "a")), (-1.0, -1.0))]
    t = tally_games(eps, "learner", ["a"])
    assert t.wins.tolist() == [1] and t.draws.tolist() == [0]


def test_a_three_player_game_counts_one_result_per_member_seat():
    # The learner against each of the member's seats, by their two returns alone: the
    # old "strictly best of the table" read these as draw, loss, win and loss.
    eps = [
        episode(["learner", "a", "a"], [1, 1, -2]),  # ties seat 1, beats seat 2
        episode(["a", "learner", "a"], [2, 0, -2]),  # loses to seat 0, beats seat 2
        episode(["a", "a", "learner"], [-1, -1, 2]),  # beats both
        episode(["learner", "b", "b"], [-1, 0, 1]),  # loses to both
        episode(["learner", "a", "b"], [1, 0, -1]),  # two members at once: skipped
        episode(["learner"] * 3, [1, 0, -1]),  # self-play: skipped
    ]
    t = tally_games(eps, "learner", ["a", "b"])
    assert (t.wins.tolist(), t.draws.tolist(), t.games.tolist()) == ([4, 0], [1, 0], [3, 1])
    assert t.losses.tolist() == [1, 2] and t.results.tolist() == [6, 2]
    np.testing.assert_allclose(t.win_rates(), [(4 + 0.5 + 0.5) / 7, 0.5 / 3])
    assert t.score() == pytest.approx(4.5 / 8)


@pytest.mark.parametrize("players", [2, 3, 4])
def test_equal_policies_are_even_whatever_the_number_of_players(players):
    # Every ordering of distinct returns, the learner in seat 0: a member as strong as the
    # learner. Counting "the learner's return is the table's best" gave 1/n (1/3 for
    # three players: a ~120-point Elo gap and a PFSP weight above the learner's).
    seats = ["learner", *["m"] * (players - 1)]
    eps = [episode(seats, r) for r in itertools.permutations(range(players))]
    t = tally_games(eps, "learner", ["m"])
    assert t.score() == pytest.approx(0.5) and t.win_rates() == pytest.approx([0.5])
    assert t.games.tolist() == [len(eps)]
    elo = league_elo(t)
    assert elo[0] == pytest.approx(elo[1], abs=1e-6)
    even = league_cfg(snapshot_every=0, win_threshold=0.5, min_games=1)
    assert snapshot_reason(1, even, t) == "threshold"  # the threshold reads this score


def test_two_player_tallies_are_the_games_own_results():
    # n - 1 = 1 result per game: the game's win / draw / loss, as before (ties included).
    rng = np.random.default_rng(0)
    eps, want = [], {"a": [0, 0, 0], "b": [0, 0, 0]}  # wins, draws, games
    for k in range(200):
        member, seat = "ab"[k % 2], int(rng.integers(2))
        returns = [float(x) for x in rng.integers(-1, 2, size=2)]
        seats = ["learner", member] if seat == 0 else [member, "learner"]
        eps.append(episode(seats, returns))
        result = outcome(returns, seat)
        want[member][0] += result == 1
        want[member][1] += result == 0
        want[member][2] += 1
    t = tally_games(eps, "learner", ["a", "b"])
    wins, draws, games = (np.array(x) for x in zip(want["a"], want["b"], strict=True))
    assert t.wins.tolist() == wins.tolist() and t.draws.tolist() == draws.tolist()
    assert t.games.tolist() == games.tolist() and draws.sum() > 0
    np.testing.assert_allclose(t.win_rates(), (wins + draws / 2 + 0.5) / (games + 1))
    reference = np.zeros((3, 3), np.int64)
    reference[0, 1:], reference[1:, 0] = wins, games - wins - draws
    ties = np.zeros((3, 3), np.int64)
    ties[0, 1:] = ties[1:, 0] = draws
    np.testing.assert_allclose(league_elo(t), elo_ratings(reference, ties))


def test_a_tally_saved_before_losses_were_kept_is_restored():
    # Saved states held [wins, draws, games]: one result per game then.
    t = Tally.restored([[30, 10], [2, 0], [40, 12]])
    assert t.losses.tolist() == [8, 2] and t.results.tolist() == [40, 12]
    again = Tally.restored(t.saved())
    assert all(np.array_equal(x, y) for x, y in zip(again.saved(), t.saved(), strict=True))


def test_league_elo_ranks_the_beaten_member_below_the_learner():
    t = two_player([30, 10], [0, 0], [40, 40])
    elo = league_elo(t)
    assert elo[1] < elo[0] < elo[2]
    # 30-10 against member a: 400 log10(3) ~ 191 points, symmetric for b at 10-30.
    assert elo[0] - elo[1] == pytest.approx(191, abs=15)


def test_a_member_without_games_gets_no_elo():
    # The last snapshot joined at the end and never played.
    t = two_player([30, 0], [0, 0], [40, 0])
    elo = league_elo(t)
    assert np.isnan(elo[2]) and elo[0] - elo[1] == pytest.approx(191, abs=15)
