"""Dilemma: payoff arithmetic per round, simultaneous talk and choices, history."""

import pytest

from coplay.envs.dilemma import COOPERATE as C
from coplay.envs.dilemma import DEFECT as D
from coplay.envs.dilemma import DilemmaEnv, episode_metrics
from coplay.envs.registry import make_env
from coplay.policies.scripted import RandomPolicy
from coplay.rollout.engine import play_episodes
from coplay.types import Decision, Episode, Observation, Trajectory, Turn
from tests.envs.players import Replay


def test_payoffs_add_up_round_by_round():
    env = DilemmaEnv(talk=False)
    rewards = [env.step({0: a, 1: b}) for a, b in [(C, C), (C, D), (D, C), (D, D), (C, C)]]
    assert [r[0] for r in rewards] == [3.0, 0.0, 5.0, 1.0, 3.0]
    assert [r[1] for r in rewards] == [3.0, 5.0, 0.0, 1.0, 3.0]
    assert env.is_terminal() and env.returns() == [12.0, 12.0]


def test_custom_payoffs_and_rounds():
    env = DilemmaEnv(talk=False, rounds=2, temptation=4, reward=2, punishment=1, sucker=-1)
    env.step({0: D, 1: C})
    env.step({0: D, 1: D})
    assert env.returns() == [5.0, 0.0]
    assert env.spec.min_return == -2.0 and env.spec.max_return == 8.0


def test_both_players_talk_then_choose_at_once():
    env = DilemmaEnv(rounds=2)
    assert env.players_to_act() == [0, 1] and env.observe(0).legal_actions is None
    assert env.step({0: "I [Defect] never", 1: "trust me"}) == {0: 0.0, 1: 0.0}
    assert env.observe(1).legal_actions == (C, D)
    assert env.step({0: C, 1: D}) == {0: 0.0, 1: 5.0}
    text0, text1 = env.observe(0).text, env.observe(1).text
    assert 'Round 1: you said "I (Defect) never", other said "trust me".' in text0
    assert "You [Cooperate], other [Defect]: you got 0." in text0
    assert 'Round 1: you said "trust me", other said "I (Defect) never".' in text1
    assert "You [Defect], other [Cooperate]: you got 5." in text1
    assert "Round 2 of 2" in text0 and "Send the other player a message." in text0


def test_current_round_messages_are_hidden_until_both_have_spoken():
    env = DilemmaEnv(rounds=2)
    env.step({0: "a", 1: "b"})
    env.step({0: C, 1: C})
    before = env.observe(0).text
    assert "Round 2:" not in before
    env.step({0: "secret plan", 1: "other plan"})
    assert 'Round 2: you said "secret plan", other said "other plan".' in env.observe(0).text


def test_symbol_messages():
    env = DilemmaEnv(message="symbols", rounds=1)
    assert env.observe(0).legal_actions == ("[Say I will cooperate]", "[Say I will defect]")
    env.step({0: "[Say I will cooperate]", 1: "[Say I will defect]"})
    assert 'other said "I will defect"' in env.observe(0).text


@pytest.mark.parametrize("text", ["[Cooperate", "[Betray]", "cooperate", "[Say I will cooperate]"])
def test_malformed_choices_parse_to_none(text):
    env = DilemmaEnv(talk=False)
    assert env.parse_action(0, text) is None
    with pytest.raises(ValueError, match="player 0: .* is not legal now"):
        env.step({0: text, 1: C})


def test_invalid_choice_forfeits_through_the_engine():
    good, bad = Replay(["hi", C]), Replay(["hi", "[Betray]"])
    ep = play_episodes(lambda: make_env("dilemma"), [[good, bad]], [0])[0]
    assert ep.forfeited_by == 1 and ep.num_steps == 1
    assert ep.trajectories[1].turns[-1].treatment == "forfeit"


def test_random_play_lasts_exactly_the_rounds():
    bot = RandomPolicy(seed=0)
    for params in ({"message": "symbols"}, {"talk": False}):
        env = make_env("dilemma", **params)
        eps = play_episodes(lambda p=params: make_env("dilemma", **p), [[bot, bot]] * 20, range(20))
        assert all(e.num_steps == env.spec.max_turns and not e.truncated for e in eps)
        assert all(0 <= r <= 25 for e in eps for r in e.returns)


def test_reset_starts_over_and_the_seed_changes_nothing():
    env = DilemmaEnv()
    start = env.observe(0).text
    env.step({0: "x", 1: "y"})
    env.reset(123)
    assert env.observe(0).text == start and env.players_to_act() == [0, 1]


def test_episode_metrics_from_hand_played_games():
    nice, mean = Replay(["hi", C]), Replay(["hi", C, "hi", D])
    eps = play_episodes(lambda: make_env("dilemma", rounds=2), [[nice, mean]], [0])
    # Rounds: (C, C) then (C, D): returns 3 + 0 and 3 + 5.
    assert eps[0].returns == (3.0, 8.0)
    assert episode_metrics(eps) == {
        "cooperation_rate": 0.75,
        "mutual_cooperation_rate": 0.5,
        "mean_return": 5.5,
    }
    with pytest.raises(ValueError, match="at least one episode"):
        episode_metrics([])


def test_a_round_a_forfeit_ended_is_no_round_of_the_metrics():
    nice, quitter = Replay([C]), Replay([C, "[Betray]"])
    (ep,) = play_episodes(lambda: make_env("dilemma", talk=False), [[nice, quitter]], [0])
    assert ep.forfeited_by == 1 and ep.num_steps == 1  # one round played, one forfeited
    metrics = episode_metrics([ep])
    assert (metrics["cooperation_rate"], metrics["mutual_cooperation_rate"]) == (1.0, 1.0)


@pytest.mark.parametrize(
    ("params", "match"),
    [
        ({"reward": 6}, "T > R > P > S"),
        ({"temptation": 7}, "2R > T \\+ S"),
        ({"rounds": 0}, "rounds must be in 1..50"),
        ({"rounds": 2.5}, "parameter 'rounds' of game 'dilemma' must be int"),
    ],
)
def test_bad_parameters_are_one_line_errors(params, match):
    with pytest.raises(ValueError, match=match):
        make_env("dilemma", **params)


def _turn(step, player, legal, played):
    """A recorded turn whose observation listed ``legal`` and that played ``played``."""
    obs = Observation("dilemma", player, "", legal_actions=legal)
    return Turn(player, obs, Decision(played, played, "p"), step, played_action=played)


def test_a_message_that_reads_like_a_choice_is_no_round():
    # Free-text messages list no legal actions; their played action is the text.
    turns = [[_turn(0, p, None, D), _turn(1, p, (C, D), C)] for p in (0, 1)]
    trajs = tuple(Trajectory(p, "p", turns[p], ret=3.0) for p in (0, 1))
    ep = Episode("dilemma", 0, 0, ("p", "p"), trajs, (3.0, 3.0), num_steps=2)
    metrics = episode_metrics([ep])
    assert (metrics["cooperation_rate"], metrics["mutual_cooperation_rate"]) == (1.0, 1.0)


def test_the_mean_return_is_what_the_game_paid_without_penalties():
    turns = [[_turn(0, p, (C, D), C)] for p in (0, 1)]
    penalised = Trajectory(0, "p", turns[0], ret=3.0 - 1.0, shaping=-1.0)
    trajs = (penalised, Trajectory(1, "p", turns[1], ret=3.0))
    ep = Episode("dilemma", 0, 0, ("p", "p"), trajs, (2.0, 3.0), num_steps=1)
    assert episode_metrics([ep])["mean_return"] == 3.0


@pytest.mark.parametrize("payoff", ["temptation", "reward", "punishment", "sucker"])
@pytest.mark.parametrize("value", [float("inf"), float("-inf"), float("nan")])
def test_a_payoff_that_is_not_finite_is_refused_by_name(payoff, value):
    with pytest.raises(ValueError, match=f"^payoff {payoff} must be a finite number"):
        make_env("dilemma", **{payoff: value})


@pytest.mark.parametrize("seed", [-1, True])
def test_a_bad_seed_is_the_same_line_as_every_envs(seed):
    with pytest.raises(ValueError, match="^dilemma: a seed must be a non-negative integer"):
        DilemmaEnv().reset(seed)


def test_a_step_after_the_end_is_one_line():
    env = DilemmaEnv(talk=False, rounds=1)
    env.step({0: C, 1: D})
    # Nobody is to act, so {} passed the players check and raised KeyError: 0.
    with pytest.raises(ValueError, match=r"^dilemma: the game is over; call reset\(seed\)"):
        env.step({})
