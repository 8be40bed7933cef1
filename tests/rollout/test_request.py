"""Rollout requests: plain data answered by the policy they name; objects sharing a key
are asked apart."""

import pickle

import pytest

from coplay.envs.registry import make_env
from coplay.policies.scripted import RandomPolicy
from coplay.rollout.engine import play_episodes
from coplay.rollout.request import RolloutRequest, answer, policy_key, shared_keys
from tests.rollout.bots import FirstLegal, Logged, SteeredFirst, kuhn


def test_distinct_objects_under_one_key_are_kept_apart():
    # Scripted bots built by hand share their default id ('random'): each keeps its
    # own generator, as two seeds must, and its own call.
    log = []
    x, y = Logged("same", log), Logged("same", log)
    assert shared_keys([[x, y], [x, x]]) == {("same", 0)}
    assert shared_keys([[x, x]]) == frozenset()
    play_episodes(kuhn, [[x, y]] * 3, [0, 1, 2])
    assert log == [("same", 0, 3), ("same", 0, 3)]
    a, b = RandomPolicy(seed=1), RandomPolicy(seed=2)
    both = play_episodes(kuhn, [[a, b]] * 20, range(20))
    a, b = RandomPolicy(seed=1), RandomPolicy(seed=2)
    alone = play_episodes(kuhn, [[a, RandomPolicy(seed=2, policy_id="other")]] * 20, range(20))
    assert [e.trajectories[0].turns for e in both] == [e.trajectories[0].turns for e in alone]


def test_a_request_is_plain_data_answered_by_the_policy_it_names():
    env = make_env("tic_tac_toe")
    env.reset(0)
    obs = env.observe(0)
    request = RolloutRequest("steered", 0, (obs, obs, obs), (None, 4, None))
    assert pickle.loads(pickle.dumps(request)) == request
    assert request.key == ("steered", 0) and policy_key(FirstLegal()) == ("first", 0)
    me = SteeredFirst()
    decisions = answer(me, request)
    assert [d.action for d in decisions] == ["[0]", "[4]", "[0]"]
    assert me.forced == [[4]]  # the told move alone goes through act_forced
    with pytest.raises(ValueError, match="has 3 observations but 1 forced entries"):
        RolloutRequest("steered", 0, (obs, obs, obs), (None,))


class Short(FirstLegal):
    """Answers every observation but the last."""

    policy_id = "short"

    def act(self, observations):
        return super().act(observations)[:-1]

    def act_forced(self, observations, indices):
        return []


def test_a_policy_answering_too_few_decisions_is_named_in_one_line():
    # It failed as zip()'s "argument 2 is shorter than argument 1", naming nothing.
    with pytest.raises(ValueError, match=r"^policy 'short' gave 1 decisions where it was asked "):
        play_episodes(kuhn, [[Short(), Short()]] * 2, [0, 1])
    env = make_env("tic_tac_toe")
    env.reset(0)
    obs = env.observe(0)
    told = RolloutRequest("short", 0, (obs,), (4,))
    with pytest.raises(
        ValueError, match=r"^policy 'short' gave 0 decisions where it was asked for 1"
    ):
        answer(Short(), told)
