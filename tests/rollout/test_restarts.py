"""Restarts: recorded histories rebuild the same positions in every game, lost games
give starts, and a restarted episode counts only what it earned after the restart."""

import math

import numpy as np
import pytest

from coplay.envs.registry import list_games, make_env
from coplay.policies.scripted import RandomPolicy
from coplay.rollout.engine import play_episodes
from coplay.rollout.live import replay
from coplay.rollout.restarts import (
    Start,
    draw,
    history,
    lost,
    lost_starts,
    opening_targets,
    opening_turn,
    remember,
)
from coplay.types import Decision, Episode, Observation, Opening, Trajectory, Turn

GAMES = [g.name for g in list_games()] + ["openspiel:goofspiel"]


def random_episodes(name: str, n: int = 6, **params) -> list[Episode]:
    make = lambda: make_env(name, **params)  # noqa: E731
    seats = [[RandomPolicy(seed=7)] * make().spec.num_players] * n
    return play_episodes(make, seats, range(n))


@pytest.mark.parametrize("name", GAMES)
def test_histories_rebuild_every_recorded_position(name):
    # Chance outcomes, private cards, free-text messages and simultaneous moves all
    # come back: each player sees at step t what it saw when the game was played.
    # Replaying to step t costs t steps: in long games (sokoban's 120 turns) every few
    # turns are checked, the last one always.
    for ep in random_episodes(name):
        every = max(1, len(ep.turns) // 24)
        for turn in [*ep.turns[::every], ep.turns[-1]]:
            env = make_env(name)
            env.reset(ep.seed)
            replay(env, history(ep, turn.step), ep.seed)
            assert env.observe(turn.player).text == turn.observation.text


class Script:
    """Plays a fixed list of actions in order (one game at a time)."""

    policy_id, version = "script", 0

    def __init__(self, actions):
        self.actions = list(actions)

    def act(self, observations):
        return [
            Decision(text=a, action=a, policy_id=self.policy_id)
            for a in (self.actions.pop(0) for _ in observations)
        ]


def test_a_restarted_game_starts_at_the_recorded_step_and_counts_only_later_reward():
    # Dense FrozenLake pays every step: replaying the same moves from the middle earns
    # the full game's return less what the replayed steps paid, and the turns' rewards
    # still add up to the returns.
    make = lambda: make_env("frozen_lake", reward="dense")  # noqa: E731
    whole = play_episodes(make, [[RandomPolicy(seed=3)]] * 20, range(20))
    ep = max(whole, key=lambda e: e.num_steps)
    step = ep.num_steps // 2
    prefix = history(ep, step)
    env = make()
    env.reset(ep.seed)
    earned = replay(env, prefix, ep.seed)[0]
    assert earned != 0.0
    later = [t.played_action for t in ep.turns if t.step >= step]
    (again,) = play_episodes(make, [[Script(later)]], [ep.seed], prefixes=[prefix])
    assert again.prefix == prefix and again.start_step == step
    assert [t.step for t in again.turns] == list(range(step, ep.num_steps))
    assert again.returns[0] == pytest.approx(ep.returns[0] - earned)
    assert sum(t.reward for t in again.turns) == pytest.approx(again.returns[0])


def test_a_history_that_does_not_fit_the_game_is_refused():
    env = make_env("tic_tac_toe")
    env.reset(0)
    with pytest.raises(ValueError, match="cannot replay step 1"):
        replay(env, (((0, "[0]"),), ((0, "[1]"),)), 0)
    env.reset(0)
    with pytest.raises(ValueError, match="'\\[0\\]' is not a legal action of player 1"):
        replay(env, (((0, "[0]"),), ((1, "[0]"),)), 0)


def test_history_of_a_restarted_episode_includes_its_replayed_prefix():
    ep = random_episodes("tic_tac_toe", n=1)[0]
    prefix = history(ep, 3)
    bot = RandomPolicy(seed=1)
    (again,) = play_episodes(
        lambda: make_env("tic_tac_toe"), [[bot, bot]], [ep.seed], prefixes=[prefix]
    )
    deeper = history(again, again.num_steps - 1)
    assert deeper[:3] == prefix and len(deeper) == again.num_steps - 1


def episode(returns, seats=("me", "bot")) -> Episode:
    trajs = tuple(Trajectory(player=p, policy_id=s) for p, s in enumerate(seats))
    return Episode(
        game="g", seed=5, group_id=0, seats=tuple(seats), trajectories=trajs, returns=tuple(returns)
    )


def test_lost_means_another_seat_scored_more_or_short_of_the_best_alone():
    assert lost(episode((-1.0, 1.0)), 0, best=1.0)
    assert not lost(episode((0.0, 0.0)), 0, best=1.0)  # a draw is no loss
    assert not lost(episode((1.0, -1.0)), 0, best=1.0)
    assert lost(episode((0.5,), seats=("me",)), 0, best=1.0)
    assert not lost(episode((1.0,), seats=("me",)), 0, best=1.0)


def test_lost_starts_take_the_learners_lost_seats_only():
    eps = random_episodes("tic_tac_toe", n=40)
    for ep in eps:  # seat 0 is "me", seat 1 someone else
        ep.trajectories[0].policy_id = "me"
    rng = np.random.default_rng(0)
    starts = lost_starts(eps, {"me"}, best=1.0, rng=rng)
    lost_seeds = [e.seed for e in eps if e.returns[0] < e.returns[1]]
    assert [s.seed for s in starts] == lost_seeds and lost_seeds
    for st in starts:
        assert st.seat == 0
        ep = eps[st.seed]
        assert len(st.prefix) in {t.step for t in ep.trajectories[0].turns}


def test_lost_starts_skip_restarted_games_unless_asked_for_them():
    # A restarted game lost again would feed positions after its (possibly assigned,
    # off-policy) first move back into the buffer: only fresh games count by default.
    fresh = random_episodes("tic_tac_toe", n=30)
    bot = RandomPolicy(seed=2)
    prefixes = [history(ep, 2) for ep in fresh]
    again = play_episodes(
        lambda: make_env("tic_tac_toe"),
        [[bot, bot]] * len(fresh),
        [ep.seed for ep in fresh],
        prefixes=prefixes,
    )
    for ep in (*fresh, *again):
        ep.trajectories[0].policy_id = "me"
    lost_again = [e for e in again if e.returns[0] < e.returns[1]]
    assert lost_again
    assert lost_starts(again, {"me"}, best=1.0, rng=np.random.default_rng(0)) == []
    kept = lost_starts(again, {"me"}, best=1.0, rng=np.random.default_rng(0), fresh_only=False)
    assert [s.seed for s in kept] == [e.seed for e in lost_again]
    assert all(s.prefix[:2] == history(fresh[s.seed], 2) for s in kept)
    mixed = lost_starts([*fresh, *again], {"me"}, best=1.0, rng=np.random.default_rng(0))
    assert len(mixed) == sum(e.returns[0] < e.returns[1] for e in fresh)


def test_a_restart_from_the_initial_state_is_not_a_fresh_game():
    # Its prefix is empty, but its first move was assigned (exploring starts).
    from dataclasses import replace as copy_with

    fresh = random_episodes("tic_tac_toe", n=30)
    for ep in fresh:
        ep.trajectories[0].policy_id = "me"
    restarted = [copy_with(ep, opening=Opening(player=0, index=1)) for ep in fresh]
    rng = np.random.default_rng
    assert lost_starts(restarted, {"me"}, best=1.0, rng=rng(0)) == []
    kept = lost_starts(restarted, {"me"}, best=1.0, rng=rng(0), fresh_only=False)
    assert kept == lost_starts(fresh, {"me"}, best=1.0, rng=rng(0)) and kept


def test_the_buffer_keeps_the_latest_and_draws_without_replacement_when_it_can():
    starts = [Start(seed=i, seat=0, prefix=()) for i in range(10)]
    assert remember(starts[:6], starts[6:], capacity=5) == starts[5:]
    rng = np.random.default_rng(0)
    drawn = draw(starts, 10, rng)
    assert sorted(s.seed for s in drawn) == list(range(10))
    assert len(draw(starts[:2], 5, rng)) == 5
    assert draw([], 3, rng) == [] and draw(starts, 0, rng) == []


def opened(group_id, choice, ret, width=3, player=0):
    """A restarted one-player episode whose assigned first move was ``choice``."""
    dec = Decision(
        text=f"[{choice}]",
        action=f"[{choice}]",
        policy_id="me",
        choice_ids=tuple((i,) for i in range(width)),
        choice_index=choice,
        logprobs=(-1.0,),
    )
    obs = Observation(game="g", player=player, text="x", legal_actions=("[0]", "[1]", "[2]"))
    turn = Turn(player=player, observation=obs, decision=dec, step=2, played_action=dec.action)
    traj = Trajectory(player=player, policy_id="me", turns=[turn], ret=ret)
    return Episode(
        game="g",
        seed=1,
        group_id=group_id,
        seats=("me",),
        trajectories=(traj,),
        returns=(ret,),
        prefix=(((0, "[0]"),), ((0, "[1]"),)),
        opening=Opening(player=player, index=choice),
    )


def test_opening_targets_are_the_best_moves_of_each_restarted_group():
    eps = [
        opened(7, 0, -1.0),
        opened(7, 1, 0.0),
        opened(7, 2, 1.0),
        opened(7, 2, -1.0),  # move 2 averages 0: tied with move 1
        opened(8, 0, 1.0),
        opened(8, 1, 1.0),  # every move did equally well: no target
        random_episodes("tic_tac_toe", n=1)[0],  # no opening: no target
    ]
    targets = opening_targets(eps)
    assert targets == {(i, 0): (0.0, 0.5, 0.5) for i in range(4)}
    assert opening_turn(eps[0]) is eps[0].trajectories[0].turns[0]
    assert opening_turn(eps[6]) is None


def test_a_move_the_group_did_not_try_is_left_to_the_policy():
    # Three legal moves and two copies: move 1 untried. The greedy target splits the
    # tried moves' share (all to move 2) and marks move 1 NaN, not 0: nothing was
    # learned about it (the policy-iteration term keeps the policy's probability there).
    targets = opening_targets([opened(7, 0, -1.0), opened(7, 2, 1.0)])
    assert list(targets) == [(0, 0), (1, 0)] and targets[(0, 0)] is targets[(1, 0)]
    low, untried, high = targets[(0, 0)]
    assert (low, high) == (0.0, 1.0) and math.isnan(untried)


def test_the_target_is_uniform_over_the_best_tried_moves_only():
    eps = [opened(7, 0, 1.0, width=5), opened(7, 2, 1.0, width=5), opened(7, 3, -1.0, width=5)]
    target = opening_targets(eps)[(0, 0)]
    assert [t for t in target if not math.isnan(t)] == [0.5, 0.5, 0.0]
    assert [math.isnan(t) for t in target] == [False, True, False, False, True]


def test_history_before_a_restarts_first_step_is_part_of_its_prefix():
    ep = random_episodes("tic_tac_toe", n=1)[0]
    prefix = history(ep, 3)
    bot = RandomPolicy(seed=1)
    (again,) = play_episodes(
        lambda: make_env("tic_tac_toe"), [[bot, bot]], [ep.seed], prefixes=[prefix]
    )
    assert history(again, 1) == prefix[:1] and history(again, 3) == prefix


def test_a_learner_that_lost_without_a_turn_gives_no_start():
    # Seat 0 lost a game in which it never moved: no position of its own to restart at.
    assert lost_starts([episode((-1.0, 1.0))], {"me"}, best=1.0, rng=np.random.default_rng(0)) == []


def test_the_start_is_any_of_the_lost_seats_turns():
    eps = random_episodes("tic_tac_toe", n=40)
    ep = next(e for e in eps if e.returns[0] < e.returns[1] and len(e.trajectories[0].turns) >= 3)
    ep.trajectories[0].policy_id = "me"
    picked = {
        len(lost_starts([ep], {"me"}, best=1.0, rng=np.random.default_rng(s))[0].prefix)
        for s in range(60)
    }
    assert picked == {t.step for t in ep.trajectories[0].turns}


def test_a_fresh_game_is_played_under_its_own_seed_as_group_id():
    from dataclasses import replace as copy_with

    from coplay.rollout.restarts import is_fresh

    ep = random_episodes("tic_tac_toe", n=1)[0]
    assert is_fresh(ep)
    assert not is_fresh(copy_with(ep, group_id=ep.seed + 1))  # a restart from the start
    assert not is_fresh(copy_with(ep, opening=Opening(player=0, index=0)))
    assert not is_fresh(copy_with(ep, prefix=history(ep, 1)))


def test_an_opening_is_the_first_turn_only_when_played_at_the_start_step():
    from dataclasses import replace as copy_with

    ep = opened(7, 0, 1.0)
    assert opening_turn(ep) is ep.trajectories[0].turns[0]
    late = copy_with(ep, prefix=ep.prefix[:1])  # the game starts at step 1, the turn is 2
    assert opening_turn(late) is None


def test_groups_of_different_games_are_kept_apart():
    # Two games whose group ids coincide: each group tried one move, so neither has a target.
    from dataclasses import replace as copy_with

    eps = [opened(7, 0, -1.0), copy_with(opened(7, 2, 1.0), game="h")]
    assert opening_targets(eps) == {}
