"""Simultaneous moves end to end: engine, rewards, exact evaluation, no peeking."""

import pytest

from coplay.envs.registry import make_env
from coplay.eval.exact import exploitability
from coplay.policies.scripted import RandomPolicy
from coplay.rollout.engine import play_episodes
from coplay.rollout.invalid import InvalidActionConfig
from coplay.types import Decision

GOOFSPIEL = ("openspiel:goofspiel", {"num_cards": 4, "imp_info": True})
IPD = (
    "openspiel:python_iterated_prisoners_dilemma",
    {"max_game_length": 4, "termination_probability": 0.0},
)


def maker(name, params):
    return lambda: make_env(name, **params)


class ByIndex:
    """Plays the legal action at a scripted index per step (clipped), recording what it saw."""

    version = 0

    def __init__(self, policy_id, indices, *, first_answer_invalid=False):
        self.policy_id, self.indices = policy_id, indices
        self.seen, self.calls = [], 0
        self.first_answer_invalid = first_answer_invalid

    def act(self, observations):
        out = []
        for obs in observations:
            self.calls += 1
            self.seen.append(obs)
            if self.first_answer_invalid and self.calls == 1:
                out.append(Decision("no idea", None, self.policy_id))
                continue
            step = sum(1 for o in self.seen if o.player == obs.player) - 1
            legal = obs.legal_actions
            action = legal[min(self.indices[min(step, len(self.indices) - 1)], len(legal) - 1)]
            out.append(Decision(action, action, self.policy_id))
        return out


@pytest.mark.parametrize(
    "game",
    [GOOFSPIEL, IPD, ("openspiel:matrix_rps", {}), ("openspiel:matching_pennies_3p", {})],
)
def test_every_player_acts_at_every_step(game):
    make = maker(*game)
    n = make().spec.num_players
    assert make().spec.simultaneous
    bot = RandomPolicy(seed=1)
    for ep in play_episodes(make, [[bot] * n] * 6, range(6)):
        steps = [[t.step for t in traj.turns] for traj in ep.trajectories]
        assert all(s == list(range(ep.num_steps)) for s in steps)
        assert all(
            sum(t.reward for t in tr.turns) == pytest.approx(tr.ret) for tr in ep.trajectories
        )


@pytest.mark.parametrize("game", [GOOFSPIEL, IPD])
def test_no_player_sees_the_others_choice_of_the_same_step(game):
    """Player 0 changes only its move at step k; player 1's view of step k is unchanged,
    while its view of step k + 1 reveals the difference (so the test can tell)."""
    make = maker(*game)
    base = play_episodes(make, [[ByIndex("a", [0]), ByIndex("b", [0])]], [5])[0]
    revealed = 0
    for k in range(base.num_steps - 1):
        other = ByIndex("a", [0] * k + [3] + [0] * 8)
        ep = play_episodes(make, [[other, ByIndex("b", [0])]], [5])[0]
        p1_base, p1_other = base.trajectories[1].turns, ep.trajectories[1].turns
        assert p1_other[k].observation == p1_base[k].observation
        if ep.trajectories[0].turns[k].played_action != base.trajectories[0].turns[k].played_action:
            revealed += p1_other[k + 1].observation.text != p1_base[k + 1].observation.text
    assert revealed > 0


def test_a_retried_player_is_shown_the_same_view_again():
    make = maker(*IPD)
    slow, quick = ByIndex("a", [1], first_answer_invalid=True), ByIndex("b", [1])
    ep = play_episodes(make, [[slow, quick]], [0], invalid=InvalidActionConfig(retries=1))[0]
    # Asked again after player 1 has chosen: the view is the one from before.
    assert slow.seen[1] == slow.seen[0]
    assert ep.trajectories[0].turns[0].treatment == "retry"


def test_iterated_dilemma_rewards_are_counted_once_per_round():
    env = make_env(IPD[0], **IPD[1])
    env.reset(0)
    c, d = env.observe(0).legal_actions
    assert env.step({0: c, 1: d}) == {0: 0.0, 1: 10.0}
    assert env.step({0: d, 1: d}) == {0: 1.0, 1: 1.0}
    assert env.returns() == [1.0, 11.0]


def test_repeated_game_takes_its_stage_game_by_name():
    env = make_env("openspiel:repeated_game", stage_game="matrix_pd", num_repetitions=3)
    assert env.spec.max_turns == 3 and env.spec.simultaneous
    with pytest.raises(ValueError, match="unknown OpenSpiel game 'nope'"):
        make_env("openspiel:repeated_game", stage_game="nope", num_repetitions=3)


def test_exact_evaluation_of_one_shot_matrix_games():
    # Uniform in the dilemma: each seat gets (5 + 0 + 10 + 1) / 4 = 4; defecting gets
    # (10 + 1) / 2 = 5.5, so NashConv = 2 * 1.5. Uniform is the equilibrium of RPS.
    pd = exploitability(RandomPolicy(), "openspiel:matrix_pd")
    assert pd.nash_conv == pytest.approx(3.0)
    assert pd.on_policy_values == pytest.approx((4.0, 4.0))
    assert pd.num_info_states == 2  # one per player: nobody's view depends on the other
    assert exploitability(RandomPolicy(), "openspiel:matrix_rps").nash_conv == pytest.approx(0.0)


class Spy(RandomPolicy):
    def __init__(self):
        super().__init__()
        self.queried = set()

    def action_probs(self, observations):
        self.queried |= {(o.player, o.text) for o in observations}
        return super().action_probs(observations)


def test_exact_evaluation_queries_the_views_the_env_shows():
    name, params = GOOFSPIEL
    spy = Spy()
    res = exploitability(spy, name, params=params)
    assert res.nash_conv > 0
    bot = RandomPolicy(seed=2)
    eps = play_episodes(maker(name, params), [[bot, bot]] * 30, range(30))
    shown = {(t.player, t.observation.text) for e in eps for t in e.turns}
    assert shown <= spy.queried
