"""FrozenLake: seeded solvable maps, hand-computed moves and rewards, slides, engine play."""

from collections import Counter

import pytest

from coplay.envs import make_env
from coplay.envs.frozen_lake import FrozenLake, Lake, goal_distances
from coplay.policies.scripted import RandomPolicy
from coplay.rollout.engine import play_episodes
from coplay.types import Env, GameKind


def map_rows(env: FrozenLake) -> list[list[str]]:
    """The map as the player reads it from the observation."""
    text = env.observe(0).text
    rows = text.split("Map:\n")[1].split("\nYour legal")[0].splitlines()
    return [row.split(" ") for row in rows]


def reachable(rows: list[list[str]]) -> bool:
    """Flood fill over non-hole tiles from the top-left to the bottom-right corner."""
    n = len(rows)
    seen, todo = {(0, 0)}, [(0, 0)]
    while todo:
        r, c = todo.pop()
        for nr, nc in ((r + 1, c), (r - 1, c), (r, c + 1), (r, c - 1)):
            if 0 <= nr < n and 0 <= nc < n and rows[nr][nc] != "H" and (nr, nc) not in seen:
                seen.add((nr, nc))
                todo.append((nr, nc))
    return (n - 1, n - 1) in seen


def with_lake(env: FrozenLake, size: int, holes: set[tuple[int, int]]) -> FrozenLake:
    """Put ``env`` at the start of a hand-made map."""
    env.reset(0)
    env.lake = Lake(size, frozenset(holes), goal_distances(size, frozenset(holes)))
    env.position = (0, 0)
    return env


def test_spec_and_protocol():
    env = make_env("frozen_lake")
    assert isinstance(env, Env)
    spec = env.spec
    assert (spec.name, spec.num_players, spec.kind) == ("frozen_lake", 1, GameKind.COOPERATIVE)
    assert (spec.max_turns, spec.min_return, spec.max_return) == (64, 0.0, 1.0)
    dense = make_env("frozen_lake", size=5, reward="dense", max_steps=9).spec
    assert (dense.max_turns, dense.min_return, dense.max_return) == (9, -2.0, 2.0)


def test_same_seed_same_map_and_seeds_vary():
    a, b = make_env("frozen_lake", size=5), make_env("frozen_lake", size=5)
    a.reset(11)
    b.reset(11)
    assert a.observe(0) == b.observe(0)
    maps = set()
    for seed in range(20):
        a.reset(seed)
        maps.add(a.observe(0).info_key)
    assert len(maps) > 10


@pytest.mark.parametrize(("size", "hole_prob"), [(4, 0.2), (6, 0.5), (8, 0.9)])
def test_every_map_is_solvable_and_has_start_and_goal(size, hole_prob):
    env = make_env("frozen_lake", size=size, hole_prob=hole_prob)
    for seed in range(40):
        env.reset(seed)
        rows = map_rows(env)
        assert rows[0][0] == "@" and rows[-1][-1] == "G"
        assert reachable(rows), f"seed {seed}: no path"


def test_moves_rewards_and_goal_by_hand():
    # . . .      start top-left, hole in the middle, goal bottom-right;
    # . H .      shortest path 4 moves.
    # . . G
    for reward, expected in (("sparse", [0.0, 0.0, 0.0, 0.0, 1.0]), ("dense", None)):
        env = with_lake(FrozenLake(size=3, reward=reward), 3, {(1, 1)})
        got = [env.step({0: a})[0] for a in ("[Up]", "[Right]", "[Right]", "[Down]", "[Down]")]
        if expected is None:  # bump 0, then 3 of 4 shortest-path moves 1/4 each, goal +1
            expected = [0.0, 0.25, 0.25, 0.25, 1.25]
        assert got == pytest.approx(expected)
        assert env.is_terminal() and env.players_to_act() == []
        assert env.returns() == [pytest.approx(sum(expected))]


def test_a_hole_ends_the_game_with_no_reward():
    env = with_lake(FrozenLake(size=3, reward="dense"), 3, {(1, 1)})
    assert env.step({0: "[Down]"}) == {0: pytest.approx(0.25)}  # 4 -> 3 moves from G
    assert env.step({0: "[Right]"}) == {0: 0.0}
    assert env.is_terminal() and env.returns() == [pytest.approx(0.25)]
    with pytest.raises(ValueError, match="episode is over"):
        env.step({0: "[Up]"})


def test_slippery_moves_go_ahead_or_sideways_a_third_each():
    env = make_env("frozen_lake", size=3, hole_prob=0.0, slippery=True)
    outcomes = Counter()
    for seed in range(300):
        env.reset(seed)
        env.step({0: "[Down]"})
        outcomes[env.position] += 1
    # Down -> (1, 0); sideways right -> (0, 1); sideways left bumps the edge -> (0, 0).
    assert set(outcomes) == {(1, 0), (0, 1), (0, 0)}
    assert all(70 <= outcomes[cell] <= 130 for cell in outcomes), outcomes
    assert "slippery" in env.observe(0).text


def test_slides_are_reproducible_from_the_seed():
    moves = ["[Right]", "[Down]"] * 4
    paths = []
    for _ in range(2):
        env = make_env("frozen_lake", size=5, hole_prob=0.0, slippery=True)
        env.reset(7)
        paths.append([env.step({0: m}) and env.position for m in moves])
    assert paths[0] == paths[1]


def test_info_key_is_the_state_and_text_follows_it():
    env = make_env("frozen_lake", size=4, hole_prob=0.0)
    env.reset(3)
    start = env.observe(0)
    env.step({0: "[Right]"})
    moved = env.observe(0)
    env.step({0: "[Left]"})
    assert env.observe(0) == start and moved.info_key != start.info_key
    assert start.info_key == "@ F F F/F F F F/F F F F/F F F G"


def test_parse_action_and_bad_steps():
    env = make_env("frozen_lake")
    assert env.parse_action(0, "go [ up ]") == "[Up]"
    assert env.parse_action(0, "jump") is None
    with pytest.raises(ValueError, match="player must be 0"):
        env.observe(1)
    with pytest.raises(ValueError, match="names no move"):
        env.step({0: "[Jump]"})
    with pytest.raises(ValueError, match="player 0 only"):
        env.step({1: "[Up]"})
    with pytest.raises(ValueError, match="a seed must be a non-negative integer"):
        env.reset(-1)


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"size": 1}, "size must be an integer in 2..12, got 1"),
        ({"size": "4"}, "size must be an integer"),
        ({"hole_prob": 1.0}, "hole_prob must be a number in \\[0, 1\\)"),
        ({"hole_prob": False}, "hole_prob must be a number in \\[0, 1\\), got False"),
        ({"slippery": 1}, "slippery must be true or false"),
        ({"reward": "shaped"}, "reward must be one of sparse, dense, got 'shaped'"),
        ({"reward": ["dense"]}, "reward must be one of sparse, dense, got \\['dense'\\]"),
        ({"max_steps": 0}, "max_steps must be a positive integer"),
        ({"holes": 3}, "unknown parameter\\(s\\) holes for game 'frozen_lake'; available: size"),
    ],
)
def test_bad_parameters_are_one_line_errors(params, message):
    with pytest.raises(ValueError, match=message):
        make_env("frozen_lake", **params)


@pytest.mark.parametrize("reward", ["sparse", "dense"])
def test_engine_truncates_and_turn_rewards_sum_to_returns(reward):
    # 6x6 without holes needs 10 moves: 5 steps always truncate.
    make = lambda: make_env("frozen_lake", size=6, hole_prob=0.0, max_steps=5, reward=reward)  # noqa: E731
    eps = play_episodes(make, [[RandomPolicy(seed=1)]] * 20, list(range(20)))
    for ep in eps:
        assert ep.truncated and ep.num_steps == 5
        turns = ep.trajectories[0].turns
        assert sum(t.reward for t in turns) == pytest.approx(ep.returns[0])
    spec = make().spec
    assert all(spec.min_return <= e.returns[0] <= spec.max_return for e in eps)
    if reward == "dense":
        assert len({e.returns[0] for e in eps}) > 1


@pytest.mark.parametrize("reward", ["sparse", "dense"])
def test_success_rate_is_the_share_that_reached_the_goal(reward):
    from coplay.envs.frozen_lake import episode_metrics
    from coplay.policies.scripted import RandomPolicy
    from coplay.rollout.engine import play_episodes

    bot = RandomPolicy(seed=0)
    eps = play_episodes(lambda: make_env("frozen_lake", reward=reward), [[bot]] * 200, range(200))
    bot2 = RandomPolicy(seed=0)
    sparse = play_episodes(
        lambda: make_env("frozen_lake", reward="sparse"), [[bot2]] * 200, range(200)
    )
    # Same seeds, same random moves: the goal is reached in the same episodes.
    want = sum(e.returns[0] == 1.0 for e in sparse) / 200
    assert episode_metrics(eps)["success_rate"] == pytest.approx(want)


def test_the_outcome_is_the_sparse_reward_the_dense_return_holds():
    # Same seeds, same random moves: the dense games' outcomes are the sparse returns.
    eps = {
        reward: play_episodes(
            lambda r=reward: make_env("frozen_lake", reward=r),
            [[RandomPolicy(seed=0)]] * 100,
            range(100),
        )
        for reward in ("sparse", "dense")
    }
    outcomes = [e.trajectories[0].outcome for e in eps["dense"]]
    assert outcomes == [e.returns[0] for e in eps["sparse"]]
    assert 0 < sum(outcomes) < 100
    # Progress pays even in a game that falls in a hole: the return alone hides it.
    assert any(e.returns[0] > 0 for e, o in zip(eps["dense"], outcomes, strict=True) if o == 0)


def test_a_penalised_run_that_reaches_the_goal_succeeds():
    from coplay.envs.frozen_lake import episode_metrics
    from coplay.rollout.invalid import InvalidActionConfig
    from tests.envs.players import Replay

    # No holes: after the penalty's random move (staying put or one step away), right
    # and down in turn reach the far corner within 8 moves.
    walker = Replay(["nonsense"] + ["[Right]", "[Down]"] * 4)
    (ep,) = play_episodes(
        lambda: make_env("frozen_lake", hole_prob=0.0),
        [[walker]],
        [0],
        invalid=InvalidActionConfig(on_fail="penalty", penalty=-0.5),
    )
    assert ep.trajectories[0].turns[0].treatment == "penalty"
    assert not ep.truncated and ep.returns[0] == pytest.approx(0.5)  # 1 less the penalty
    assert episode_metrics([ep])["success_rate"] == 1.0
