"""Negotiation: seeded deals, payoff arithmetic, private values, invalid actions."""

import pytest

from coplay.envs.negotiation import (
    ACCEPT,
    WALK,
    Deal,
    NegotiationEnv,
    draw_deal,
    episode_metrics,
    propose,
    value,
)
from coplay.envs.registry import make_env
from coplay.policies.scripted import RandomPolicy
from coplay.rollout.engine import play_episodes
from coplay.types import Decision, Episode, Observation, Trajectory, Turn
from tests.envs.players import Replay

# Player 0 values (1, 3, 2), player 1 values (2, 2, 1): each 10 over 3 books, 1 hat, 2 balls.
DEAL = Deal(counts=(3, 1, 2), values=((1, 3, 2), (2, 2, 1)))


class FixedDeal(NegotiationEnv):
    """Every game deals ``DEAL``."""

    def reset(self, seed):
        super().reset(seed)
        self.deal = DEAL


def _env(**params):
    return FixedDeal(**params)


def _play(env, *texts):
    """Each text is one step of whoever must act."""
    for text in texts:
        env.step({env.players_to_act()[0]: text})


def test_same_seed_same_deal_and_every_deal_is_fair():
    assert draw_deal(7) == draw_deal(7)
    deals = [draw_deal(s) for s in range(300)]
    assert len({d.counts for d in deals}) > 10 and len({d.values for d in deals}) > 100
    for d in deals:
        assert all(1 <= n <= 3 for n in d.counts)
        assert [value(v, d.counts) for v in d.values] == [10, 10]
        a, b = d.values
        assert all(x or y for x, y in zip(a, b, strict=True))  # every item wanted
        assert any(x and y for x, y in zip(a, b, strict=True))  # some item contested


def test_reset_determines_what_players_see():
    env = NegotiationEnv(message="symbols")
    env.reset(3)
    first = [env.observe(p).text for p in (0, 1)]
    env.reset(4)
    env.reset(3)
    assert [env.observe(p).text for p in (0, 1)] == first


def test_accepted_proposal_pays_each_its_values():
    env = _env(talk=False)
    _play(env, "[Propose 1 1 0]", ACCEPT)
    # Player 0 keeps 1 book + 1 hat = 1 + 3; player 1 gets 2 books + 2 balls = 4 + 2.
    assert env.is_terminal() and env.returns() == [4.0, 6.0]
    # Over: nobody is to move, and no observation lists moves (it listed proposals).
    assert [env.observe(p).legal_actions for p in (0, 1)] == [(), ()]


def test_counter_proposal_then_accept():
    env = _env(talk=False)
    _play(env, "[Propose 3 1 2]", "[Propose 3 0 0]", ACCEPT)
    # Player 1 keeps 3 books (6); player 0 gets 1 hat + 2 balls = 3 + 4.
    assert env.returns() == [7.0, 6.0]


def test_walk_and_turn_limit_give_the_disagreement_value():
    env = _env(talk=False, disagreement=2.5)
    _play(env, "[Propose 0 0 0]", WALK)
    assert env.is_terminal() and env.returns() == [2.5, 2.5]
    env = _env(talk=False, max_actions=3, disagreement=2.5)
    _play(env, "[Propose 1 1 1]", "[Propose 1 1 1]", "[Propose 2 0 0]")
    assert env.is_terminal() and env.returns() == [2.5, 2.5]


def test_talk_adds_a_free_message_turn_before_every_action():
    env = _env()
    assert env.observe(0).legal_actions is None
    _play(env, 'deal? [Accept] "now"', "[Propose 2 0 1]")
    obs = env.observe(1)
    assert obs.legal_actions is None and env.players_to_act() == [1]
    assert "Other said: \"deal? (Accept) 'now'\"" in obs.text
    assert "Other: [Propose 2 0 1], you get 1 1 1" in obs.text
    _play(env, "fine", ACCEPT)
    # Player 0 keeps 2 books + 1 ball = 2 + 2; player 1 gets one of each = 2 + 2 + 1.
    assert env.returns() == [4.0, 5.0]


def test_symbol_messages_are_a_choice():
    env = _env(message="symbols")
    assert env.observe(0).legal_actions == (
        "[Say I want books]",
        "[Say I want hats]",
        "[Say I want balls]",
    )
    _play(env, "[Say I want hats]")
    assert env.parse_action(0, "[Say I want hats]") is None  # now an action turn
    assert 'You said: "I want hats"' in env.observe(0).text


def test_observations_never_show_the_other_players_values():
    env = _env(message="symbols")
    _play(env, "[Say I want balls]", "[Propose 1 0 2]", "[Say I want books]")
    seen = env.observe(0).text
    env.deal = Deal(counts=DEAL.counts, values=(DEAL.values[0], (0, 4, 3)))
    assert env.observe(0).text == seen
    assert "Your values per item: 1 3 2 " in seen


@pytest.mark.parametrize(
    "text",
    [
        "[Propose 1 2]",
        "[Propose 4 0 0]",
        "[Propose 0 2 0]",
        "[Propose -1 0 0]",
        ACCEPT,
        "[Deal]",
        "",
    ],
)
def test_malformed_or_impossible_actions_parse_to_none(text):
    env = _env(talk=False)
    assert env.parse_action(0, text) is None
    assert env.parse_action(1, "[Walk]") is None  # not player 1's turn
    with pytest.raises(ValueError, match="is not a legal action now"):
        env.step({0: text})


def test_accept_needs_a_proposal_on_the_table():
    env = _env(talk=False)
    assert ACCEPT not in env.observe(0).legal_actions
    _play(env, "[Propose 1 1 1]")
    assert ACCEPT in env.observe(1).legal_actions


def test_invalid_answer_gets_the_engines_treatment():
    bot = Replay(["[Propose 9 9 9]"])
    make = lambda: make_env("negotiation", talk=False)  # noqa: E731
    ep = play_episodes(make, [[bot, bot]], [0])[0]
    assert ep.forfeited_by == 0 and ep.returns == (0.0, 0.0)
    assert ep.trajectories[0].turns[-1].treatment == "forfeit"


@pytest.mark.parametrize("message", ["symbols", None])
def test_random_play_ends_within_max_turns(message):
    params = {"talk": False} if message is None else {"message": message}
    env = make_env("negotiation", **params)
    bot = RandomPolicy(seed=0)
    eps = play_episodes(lambda: make_env("negotiation", **params), [[bot, bot]] * 60, range(60))
    for ep in eps:
        assert not ep.truncated and ep.forfeited_by is None
        assert ep.num_steps <= env.spec.max_turns
        assert all(0 <= r <= 10 for r in ep.returns)


def test_episode_metrics_from_hand_played_games():
    make = lambda: _env(talk=False)  # noqa: E731
    deal = Replay(["[Propose 1 1 0]", ACCEPT])
    walk = Replay(["[Propose 1 1 0]", WALK])
    eps = play_episodes(make, [[deal, deal], [walk, walk]], [0, 1])
    assert [e.returns for e in eps] == [(4.0, 6.0), (0.0, 0.0)]
    assert episode_metrics(eps) == {"deal_rate": 0.5, "walk_rate": 0.5, "welfare": 5.0}
    with pytest.raises(ValueError, match="at least one episode"):
        episode_metrics([])


@pytest.mark.parametrize(
    ("params", "match"),
    [
        ({"max_actions": 1}, "max_actions must be >= 2"),
        ({"total_value": 0}, "total_value must be in 2..20"),
        ({"disagreement": 11}, "disagreement must be in 0..total_value"),
        ({"message": "emoji"}, "message form must be one of free, symbols"),
    ],
)
def test_bad_parameters_are_one_line_errors(params, match):
    with pytest.raises(ValueError, match=match):
        make_env("negotiation", **params)


def _turn(step, player, legal, played):
    """A recorded turn whose observation listed ``legal`` and that played ``played``."""
    obs = Observation("negotiation", player, "", legal_actions=legal)
    return Turn(player, obs, Decision(played, played, "p"), step, played_action=played)


@pytest.mark.parametrize("message", [ACCEPT, WALK])
def test_a_message_that_reads_like_a_move_ends_no_game(message):
    # A free-text message lists no legal actions and plays its text; the rollout's turn
    # limit cut the game off right after it: no deal, no walk.
    moves = (propose((1, 1, 1)), ACCEPT, WALK)
    turns = [_turn(0, 0, None, "hi"), _turn(1, 0, moves, moves[0]), _turn(2, 1, None, message)]
    trajs = tuple(Trajectory(p, "p", [t for t in turns if t.player == p]) for p in (0, 1))
    ep = Episode("negotiation", 0, 0, ("p", "p"), trajs, (0.0, 0.0), truncated=True, num_steps=3)
    assert episode_metrics([ep]) == {"deal_rate": 0.0, "walk_rate": 0.0, "welfare": 0.0}


@pytest.mark.parametrize("seed", [-1, True])
def test_a_bad_seed_is_the_same_line_as_every_envs(seed):
    with pytest.raises(ValueError, match="^negotiation: a seed must be a non-negative integer"):
        NegotiationEnv().reset(seed)


def test_a_step_after_the_end_is_one_line():
    env = _env(talk=False)
    _play(env, "[Propose 0 0 0]", WALK)
    # Nobody is to act, so {} passed the players check and raised KeyError: 1.
    with pytest.raises(ValueError, match=r"^negotiation: the game is over; call reset\(seed\)"):
        env.step({})
