"""Cross-play: exact outcomes of fixed strategies, zero-sum invariants, exact values, bad input."""

import itertools
import json

import numpy as np
import pyspiel
import pytest
from open_spiel.python.algorithms import expected_game_score

from coplay.envs.gameref import GameRef
from coplay.envs.registry import make_env
from coplay.eval.crossplay import cross_play, rate_cross_play, to_json
from coplay.eval.exact import to_openspiel_policy
from coplay.eval.matches import mean_interval, wilson
from coplay.eval.ratings import alpharank_ratings
from coplay.policies.scripted import NashPolicy, PerfectPlayer, RandomPolicy, ScriptedPolicy
from coplay.rollout.invalid import InvalidActionConfig
from coplay.rollout.source import LocalSource
from coplay.types import Decision


class Always(ScriptedPolicy):
    """Plays one Kuhn action whenever it is legal (else the other one)."""

    def __init__(self, action: str) -> None:
        super().__init__(0)
        self.action, self.policy_id = action, f"always{action}"

    def action_probs(self, observations):
        return [
            {a: float(a == self.action) for a in obs.legal_actions}
            if self.action in obs.legal_actions
            else dict.fromkeys(obs.legal_actions, 1 / len(obs.legal_actions))
            for obs in observations
        ]


def test_fixed_kuhn_strategies_have_exact_outcomes():
    # An always-better folds the always-passer in either seat: +1 every game.
    res = cross_play("kuhn_poker", {"bet": Always("[Bet]"), "pass": Always("[Pass]")}, episodes=20)
    assert res.payoff[0, 1] == 1.0 and res.payoff[1, 0] == -1.0
    assert res.wins[0, 1] == 20 and res.wins[1, 0] == 0 and res.draws.sum() == 0
    assert res.results[0][1].win.value == 1.0 and res.results[1][0].loss.value == 1.0
    # Against itself a policy sits in both seats: every game is one win and one loss.
    for i in range(2):
        assert res.results[i][i].win.value == res.results[i][i].loss.value == 0.5
        assert res.payoff[i, i] == 0.0


def test_two_player_matrix_is_zero_sum_and_both_sides_share_games():
    policies = {"random": RandomPolicy(1), "nash": NashPolicy("kuhn_poker", 2)}
    res = cross_play("kuhn_poker", policies, episodes=100, seed=3)
    np.testing.assert_allclose(res.payoff + res.payoff.T, 0.0, atol=1e-12)
    np.testing.assert_array_equal(res.meta_game[1], res.meta_game[0].T)
    assert res.wins[0, 1] + res.wins[1, 0] + res.draws[0, 1] == 100
    assert res.wins.trace() == 0 and res.names == ("random", "nash")


def test_mean_return_interval_covers_the_exact_value():
    game = "kuhn_poker"
    nash, rand = NashPolicy(game, 0), RandomPolicy(0)
    os_game = pyspiel.load_game(game)
    tabs = [to_openspiel_policy(p, game) for p in (nash, rand)]
    state = os_game.new_initial_state()
    seat0 = expected_game_score.policy_value(state, tabs)[0]
    seat1 = expected_game_score.policy_value(state, tabs[::-1])[1]
    exact = (seat0 + seat1) / 2  # seats alternate; about 0.148
    res = cross_play(game, {"nash": nash, "random": rand}, episodes=400, seed=0)
    iv = res.results[0][1].mean_return
    assert iv.low < exact < iv.high and exact > 0


def test_perfect_tic_tac_toe_never_loses():
    res = cross_play(
        "tic_tac_toe", {"perfect": PerfectPlayer(seed=0), "random": RandomPolicy(1)}, episodes=30
    )
    assert res.results[0][1].loss.value == 0.0 and res.wins[1, 0] == 0
    assert res.results[0][0].win.value == 0.0  # perfect self-play always draws
    ratings = rate_cross_play(res)
    assert ratings.elo[0] > ratings.elo[1] and ratings.alpharank[0] > 0.99


def test_three_player_focal_against_field_is_zero_sum():
    policies = {"a": RandomPolicy(0), "b": Always("[Bet]")}
    res = cross_play("kuhn_poker", policies, episodes=30, params={"players": 3})
    assert res.num_players == 3
    # Focal return plus two field seats sums to zero game by game.
    np.testing.assert_allclose(res.meta_game[0] + 2 * res.meta_game[1], 0.0, atol=1e-12)
    assert res.wins[0, 1] + res.wins[1, 0] + res.draws[0, 1] == 60  # both orders played
    assert res.results[0][1].episodes == 30 and len(res.results[0][1].mean_return_by_seat) == 3


def test_same_seed_same_result_and_json_is_strict():
    def run():
        policies = {"r1": RandomPolicy(0), "r2": RandomPolicy(1)}
        return cross_play("kuhn_poker", policies, episodes=1, seed=5)

    a, b = run(), run()
    np.testing.assert_array_equal(a.payoff, b.payoff)
    data = to_json(a, rate_cross_play(a))
    text = json.dumps(data, allow_nan=False)
    # one game of zero-sum self-play: an unbounded interval -> null
    assert json.loads(text)["mean_return"][0][0]["high"] is None
    assert json.loads(text)["mean_return"][0][1]["high"] <= 2.0  # Kuhn's most
    assert set(data["ratings"]) == {"elo", "openskill", "alpharank"}


@pytest.mark.parametrize(
    ("game", "policies", "episodes", "message"),
    [
        ("kuhn_poker", {}, 4, "at least one policy"),
        ("kuhn_poker", {"a": RandomPolicy(), "b": RandomPolicy()}, 0, "episodes must be positive"),
        ("no_such_game", {"a": RandomPolicy(), "b": RandomPolicy()}, 4, "unknown game"),
    ],
)
def test_bad_input(game, policies, episodes, message):
    with pytest.raises(ValueError, match=message):
        cross_play(game, policies, episodes=episodes)


def test_one_policy_is_its_self_play_cell_the_first_meta_game_of_a_population():
    res = cross_play("tic_tac_toe", {"r": RandomPolicy(seed=1)}, episodes=20, seed=0)
    assert res.names == ("r",) and res.meta_game[0].shape == (1, 1)
    assert res.meta_game[0][0, 0] == pytest.approx(0.0)  # both seats read: zero-sum


def _recording(monkeypatch) -> list:
    """Every game cross-play plays in this process from now on, in order."""
    from coplay.eval import crossplay_play

    games, real = [], crossplay_play.play_episodes

    def play(*args, **kwargs):
        played = real(*args, **kwargs)
        games.extend(played)
        return played

    monkeypatch.setattr(crossplay_play, "play_episodes", play)
    return games


def test_cooperative_self_play_counts_each_game_once_not_once_per_seat(monkeypatch):
    # Tiny Hanabi pays both seats the same: reading both seats adds no information, so
    # the self-play interval is the one of a single seat's N returns (was sqrt(2) narrower).
    games = _recording(monkeypatch)
    res = cross_play("openspiel:tiny_hanabi", {"random": RandomPolicy(seed=0)}, episodes=40)
    assert len(games) == 40 and all(e.returns[0] == e.returns[1] for e in games)
    cell = res.results[0][0]
    spec = make_env("openspiel:tiny_hanabi").spec
    bounds = (spec.min_return, spec.max_return)
    one_seat = mean_interval([e.returns[0] for e in games], bounds=bounds)
    assert cell.mean_return.value == pytest.approx(one_seat.value)
    assert (cell.mean_return.low, cell.mean_return.high) == pytest.approx(
        (one_seat.low, one_seat.high)
    )
    assert cell.episodes == 40


def test_zero_sum_self_play_has_a_degenerate_return_interval_at_zero():
    # Each Kuhn game's two returns sum to zero: the self-play mean is 0 by construction,
    # game by game, and its interval is the point 0 (was about +-0.3 around it).
    res = cross_play("kuhn_poker", {"random": RandomPolicy(seed=0)}, episodes=40, seed=1)
    cell = res.results[0][0]
    assert (cell.mean_return.value, cell.mean_return.low, cell.mean_return.high) == (0.0, 0.0, 0.0)
    # Every game is one win and one loss: a rate of 1/2 out of 40 games, not 40 of 80 seats.
    half = wilson(20, 40)
    for rate in (cell.win, cell.loss):
        assert (rate.value, rate.low, rate.high) == pytest.approx((0.5, half.low, half.high))
    assert cell.draw.value == 0.0 and cell.draw.high == pytest.approx(wilson(0, 40).high)


class _NeverLegal:
    """Never names a legal move: the penalty treatment plays a random one for it."""

    policy_id, version = "never-legal", 0

    def act(self, observations):
        return [Decision("hmm", None, self.policy_id) for _ in observations]


def test_the_wins_that_feed_the_ratings_are_the_tables_under_penalties():
    # The win counts (Elo's and OpenSkill's input) read the penalised returns while the
    # table read what the game paid: 18 wins against the table's 86 out of 200.
    players = {"never-legal": _NeverLegal(), "random": RandomPolicy(seed=1)}
    invalid = InvalidActionConfig(on_fail="penalty", penalty=-0.5)
    res = cross_play("tic_tac_toe", players, episodes=60, invalid=invalid)
    side = res.results[0][1]
    assert res.wins[0, 1] == round(side.win.value * 60)
    assert res.wins[1, 0] == round(side.loss.value * 60)
    assert res.draws[0, 1] == round(side.draw.value * 60)


DOMINATED = {("A", 0): 3, ("A", 1): 0, ("A", 2): 0, ("B", 0): 4, ("B", 1): 5, ("B", 2): 1}
"""u(own action; k = how many others play A) of a symmetric 3-player game in which B
strictly dominates A (4 > 3, 5 > 0, 1 > 0): all-B is its one Nash equilibrium."""


def dominated_game(path) -> dict[str, str]:
    """``DOMINATED`` as an OpenSpiel NFG file (player 1's action varies fastest)."""
    payoffs = []
    for a3, a2, a1 in itertools.product("AB", repeat=3):
        profile = (a1, a2, a3)
        for p in range(3):
            others_on_a = sum(profile[q] == "A" for q in range(3) if q != p)
            payoffs.append(DOMINATED[profile[p], others_on_a])
    head = 'NFG 1 R "dominated" { "P1" "P2" "P3" } { 2 2 2 }'
    path.write_text(f"{head}\n\n{' '.join(map(str, payoffs))}\n")
    return {"filename": str(path)}


class Pure(ScriptedPolicy):
    """Always the legal action of one index."""

    def __init__(self, index: int, name: str) -> None:
        super().__init__(0)
        self.index, self.policy_id = index, name

    def action_probs(self, observations):
        return [
            {a: float(i == self.index) for i, a in enumerate(o.legal_actions)} for o in observations
        ]


def test_three_player_alpharank_is_left_out_rather_than_ranking_a_dominated_policy_first(tmp_path):
    # Ranked as [payoff, payoff.T], alpha-rank put all its mass on the dominated A: with
    # three players payoff.T[i, j] is j alone among copies of i, another match.
    params = dominated_game(tmp_path / "dominated.nfg")
    policies = {"A": Pure(0, "A"), "B": Pure(1, "B")}
    res = cross_play("openspiel:nfg_game", policies, episodes=6, params=params)
    # A alone among Bs gets u(A; 0) = 3, B alone among As u(B; 2) = 1
    assert res.payoff.tolist() == [[0.0, 3.0], [1.0, 4.0]]
    ratings = rate_cross_play(res)
    assert ratings.elo[1] > ratings.elo[0]  # B beats A in every game, either way round
    assert np.isnan(ratings.alpharank).all()
    assert to_json(res, ratings)["ratings"]["alpharank"] == [None, None]


def test_two_player_alpharank_is_the_one_of_the_payoff_matrix():
    res = cross_play("kuhn_poker", {"bet": Always("[Bet]"), "pass": Always("[Pass]")}, episodes=8)
    np.testing.assert_allclose(rate_cross_play(res).alpharank, alpharank_ratings(res.payoff))
    np.testing.assert_allclose(rate_cross_play(res).alpharank, [1.0, 0.0], atol=1e-6)


def test_cross_play_refuses_a_single_player_game():
    with pytest.raises(
        ValueError, match="cross-play needs a game of 2 or more players; 'frozen_lake' has 1"
    ):
        cross_play("frozen_lake", {"r": RandomPolicy(seed=0)}, episodes=2)


def test_max_turns_truncates_cross_play_as_training_does():
    # Two moves of tic-tac-toe never end a game: every game is a truncated draw.
    players = {"a": RandomPolicy(seed=1), "b": RandomPolicy(seed=2)}
    res = cross_play("tic_tac_toe", players, episodes=20, max_turns=2)
    np.testing.assert_array_equal(res.meta_game[0], np.zeros((2, 2)))
    assert res.draws[0, 1] == 20
    ttt = LocalSource(GameRef("tic_tac_toe"), max_turns=2)
    on_source = cross_play("tic_tac_toe", players, episodes=20, max_turns=2, source=ttt)
    assert on_source.draws[0, 1] == 20


def test_seats_alternate_within_a_match():
    # Always the first legal cell: the first mover completes the 2-4-6 diagonal and
    # wins every game, so each side wins exactly the games it opens.
    players = {"a": Pure(0, "a"), "b": Pure(0, "b")}
    res = cross_play("tic_tac_toe", players, episodes=4)
    assert res.wins[0, 1] == res.wins[1, 0] == 2
    assert res.results[0][1].mean_return_by_seat == (1.0, -1.0)


class _Fails(RandomPolicy):
    def act(self, observations):
        raise RuntimeError("endpoint down")


def test_an_interrupted_cross_play_keeps_the_matches_played():
    from coplay.eval.crossplay import CrossPlayInterrupted

    # Matches in order (a, a), (a, b), (b, b): the second fails.
    players = {"a": RandomPolicy(seed=0), "b": _Fails(seed=1)}
    with pytest.raises(CrossPlayInterrupted, match="in a vs b after 1 matches") as err:
        cross_play("kuhn_poker", players, episodes=4)
    partial = err.value.partial
    assert partial.payoff[0, 0] == 0.0  # zero-sum self-play
    assert np.isnan(partial.payoff[0, 1]) and np.isnan(partial.payoff[1, 0])
    assert partial.results[1][0].episodes == 0 and partial.wins.sum() == 0
    assert isinstance(err.value.__cause__, RuntimeError)


def test_games_total_counts_self_play_and_both_orders_beyond_two_players():
    from coplay.eval.crossplay import games_total

    assert games_total(3, 2, 10) == 60  # 3 pairs and 3 self-play matches
    assert games_total(3, 3, 10) == 90  # 9 ordered pairs, focal against field


def test_a_match_of_draws_alone_has_a_return_interval_of_some_width():
    # Two perfect players draw every game: the cell's interval was the point 0.
    players = {"a": PerfectPlayer(seed=0), "b": PerfectPlayer(seed=1)}
    res = cross_play("tic_tac_toe", players, episodes=20)
    for cell in (res.results[0][1], res.results[1][0]):
        assert cell.draw.value == 1.0
        assert cell.mean_return.low < -0.1 and cell.mean_return.high > 0.1
