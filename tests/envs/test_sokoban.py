"""Sokoban: generated levels are well formed and solvable; pushes and rewards by hand."""

from collections import deque

import pytest

from coplay.envs import make_env
from coplay.envs.grid import MOVES
from coplay.envs.sokoban import Level, Sokoban
from coplay.policies.scripted import RandomPolicy
from coplay.rollout.engine import play_episodes
from coplay.types import Env, GameKind


def bfs_solve(level: Level) -> int | None:
    """Fewest moves that put every box on a target (a reference, independent of the game)."""
    start = (level.player, level.boxes)
    seen, queue = {start}, deque([(start, 0)])
    while queue:
        (player, boxes), depth = queue.popleft()
        if boxes == level.targets:
            return depth
        for dr, dc in MOVES.values():
            nxt = (player[0] + dr, player[1] + dc)
            new_boxes = boxes
            if nxt in boxes:
                beyond = (nxt[0] + dr, nxt[1] + dc)
                if beyond not in level.floor or beyond in boxes:
                    continue
                new_boxes = (boxes - {nxt}) | {beyond}
            elif nxt not in level.floor:
                continue
            state = (nxt, new_boxes)
            if state not in seen:
                seen.add(state)
                queue.append((state, depth + 1))
    return None


def room(rows: list[str], reward: str = "sparse", hints: bool = False) -> Sokoban:
    """A Sokoban env set to a hand-drawn room in the game's own symbols (no spaces)."""
    cells = {(r, c): ch for r, row in enumerate(rows) for c, ch in enumerate(row)}
    boxes = frozenset(p for p, ch in cells.items() if ch in "$*")
    env = Sokoban(size=len(rows), num_boxes=len(boxes), reward=reward, hints=hints)
    env.level = Level(
        size=len(rows),
        floor=frozenset(p for p, ch in cells.items() if ch != "#"),
        targets=frozenset(p for p, ch in cells.items() if ch in ".*+"),
        boxes=boxes,
        player=next(p for p, ch in cells.items() if ch in "@+"),
        solution=(),
    )
    env.player, env.boxes = env.level.player, boxes
    return env


def test_spec_and_protocol():
    env = make_env("sokoban")
    assert isinstance(env, Env)
    spec = env.spec
    assert (spec.name, spec.num_players, spec.kind) == ("sokoban", 1, GameKind.COOPERATIVE)
    assert (spec.max_turns, spec.min_return, spec.max_return) == (120, 0.0, 1.0)
    dense = make_env("sokoban", num_boxes=2, max_steps=50, reward="dense").spec
    assert (dense.min_return, dense.max_return) == (pytest.approx(-0.5), pytest.approx(1.2))


@pytest.mark.parametrize(("size", "boxes"), [(6, 1), (7, 2), (8, 3)])
def test_levels_are_well_formed_with_no_box_on_a_target(size, boxes):
    env = make_env("sokoban", size=size, num_boxes=boxes)
    for seed in range(15):
        env.reset(seed)
        lv = env.level
        assert len(lv.boxes) == len(lv.targets) == boxes
        assert not lv.boxes & lv.targets, f"seed {seed}: a box starts on a target"
        assert lv.boxes <= lv.floor and lv.targets <= lv.floor and lv.player in lv.floor
        assert lv.player not in lv.boxes
        ring = {(0, i) for i in range(size)} | {(size - 1, i) for i in range(size)}
        ring |= {(i, 0) for i in range(size)} | {(i, size - 1) for i in range(size)}
        assert not ring & lv.floor


def test_every_level_is_solved_by_its_reverse_walk_and_by_search():
    env = make_env("sokoban", size=6, num_boxes=1)
    for seed in range(30):
        env.reset(seed)
        shortest = bfs_solve(env.level)
        assert shortest is not None and 1 <= shortest <= len(env.level.solution)
        for move in env.level.solution:
            env.step({0: move})
            if env.is_terminal():
                break
        assert env.is_terminal() and env.returns() == [1.0], f"seed {seed}"


def test_two_box_levels_are_solvable_by_search():
    env = make_env("sokoban", size=7, num_boxes=2)
    for seed in range(8):
        env.reset(seed)
        assert bfs_solve(env.level) is not None


def test_same_seed_same_level_and_seeds_vary():
    a, b = make_env("sokoban"), make_env("sokoban")
    a.reset(5)
    b.reset(5)
    assert a.observe(0) == b.observe(0) and a.level == b.level
    keys = set()
    for seed in range(20):
        a.reset(seed)
        keys.add(a.observe(0).info_key)
    assert len(keys) > 15


def test_push_onto_target_solves_with_hand_computed_rewards():
    env = room(["#####", "#___#", "#@$.#", "#___#", "#####"], reward="dense")
    assert env.step({0: "[Right]"}) == {0: pytest.approx(-0.01 + 0.1 + 1.0)}
    assert env.is_terminal() and env.returns() == [pytest.approx(1.09)]
    sparse = room(["#####", "#___#", "#@$.#", "#___#", "#####"])
    assert sparse.step({0: "[Right]"}) == {0: 1.0}


def test_blocked_moves_change_nothing_but_cost_a_step():
    env = room(["######", "#____#", "#_@$$#", "#..__#", "#____#", "######"], reward="dense")
    before = env.observe(0)
    assert env.step({0: "[Right]"}) == {0: pytest.approx(-0.01)}  # box against box
    assert env.observe(0) == before
    env.step({0: "[Up]"})  # a free move
    env.step({0: "[Up]"})  # into the wall
    assert env.player == (1, 2)
    assert env.returns() == [pytest.approx(-0.03)]


def test_pushing_a_box_off_a_target_costs_what_pushing_it_on_paid():
    env = room(["######", "#_@*_#", "#___$#", "#.___#", "#____#", "######"], reward="dense")
    assert env.step({0: "[Right]"}) == {0: pytest.approx(-0.11)}
    assert env.step({0: "[Left]"}) == {0: pytest.approx(-0.01)}
    text = env.observe(0).text
    assert "Boxes on targets: 0/2." in text and "# _ @ . $ #" in text


def test_rendering_marks_player_and_boxes_on_targets():
    env = room(["#####", "#+*_#", "#_$.#", "#_._#", "#####"])
    rows = env.observe(0).text.split("Map:\n")[1].splitlines()[:5]
    assert rows == ["# # # # #", "# + * _ #", "# _ $ . #", "# _ . _ #", "# # # # #"]
    assert env.observe(0).info_key == "/".join(rows)


def test_hints_give_each_box_and_free_target_relative_to_the_player():
    rows = ["######", "#_$__#", "#_*_.#", "#__@_#", "######"]
    plain, hinted = room(rows), room(rows, hints=True)
    text = hinted.observe(0).text
    assert "From you: box 2 up, 1 left; box 1 up, 1 left; target 1 up, 1 right.\n" in text
    assert "From you" not in plain.observe(0).text
    assert hinted.observe(0).info_key == plain.observe(0).info_key  # same state, same key
    hinted.step({0: "[Right]"})
    assert "target 1 up\n" in hinted.observe(0).text.replace(".\n", "\n")


def test_parse_action_and_bad_steps():
    env = make_env("sokoban")
    assert env.parse_action(0, "[LEFT]") == "[Left]" and env.parse_action(0, "[Pull]") is None
    with pytest.raises(ValueError, match="names no move"):
        env.step({0: "[Pull]"})
    with pytest.raises(ValueError, match="player must be 0"):
        env.parse_action(2, "[Up]")


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"size": 4}, "size must be an integer in 5..12, got 4"),
        ({"num_boxes": 0}, "num_boxes must be an integer in 1..4"),
        ({"size": 5, "num_boxes": 3}, "3 boxes do not fit a 5x5 room; at most 2"),
        ({"reward": "gym"}, "reward must be one of sparse, dense"),
        ({"reward": {"dense": 1}}, "reward must be one of sparse, dense, got {'dense': 1}"),
        ({"max_steps": -3}, "max_steps must be a positive integer"),
        ({"hints": "yes"}, "hints must be true or false"),
        ({"boxes": 2}, "unknown parameter\\(s\\) boxes for game 'sokoban'"),
    ],
)
def test_bad_parameters_are_one_line_errors(params, message):
    with pytest.raises(ValueError, match=message):
        make_env("sokoban", **params)


def test_engine_truncates_and_turn_rewards_sum_to_returns():
    make = lambda: make_env("sokoban", max_steps=15, reward="dense")  # noqa: E731
    eps = play_episodes(make, [[RandomPolicy(seed=2)]] * 16, list(range(16)))
    spec = make().spec
    for ep in eps:
        assert ep.truncated == (ep.num_steps == 15) and ep.num_steps <= 15
        assert sum(t.reward for t in ep.trajectories[0].turns) == pytest.approx(ep.returns[0])
        assert spec.min_return <= ep.returns[0] <= spec.max_return
    assert any(ep.truncated for ep in eps)


def test_success_rate_counts_solved_episodes():
    from coplay.envs.sokoban import episode_metrics

    bot = RandomPolicy(seed=0)
    eps = play_episodes(lambda: make_env("sokoban"), [[bot]] * 30, range(30))
    # The +1 bonus is paid only on the move that solves the level.
    solved = sum(e.trajectories[0].turns[-1].reward > 0.5 for e in eps)
    assert episode_metrics(eps)["success_rate"] == pytest.approx(solved / 30)
    assert 0 < solved < 30


def test_the_outcome_is_whether_the_room_was_solved():
    eps = play_episodes(
        lambda: make_env("sokoban", reward="dense", max_steps=30),
        [[RandomPolicy(seed=0)]] * 30,
        range(30),
    )
    assert [e.trajectories[0].outcome for e in eps] == [float(not e.truncated) for e in eps]
    assert any(e.truncated for e in eps) and not all(e.truncated for e in eps)


def test_a_forfeited_episode_is_not_solved():
    from coplay.envs.sokoban import episode_metrics
    from tests.envs.players import Replay

    # A forfeit ends the episode untruncated, as a solved room does; only one is solved.
    solver = Replay(list(make_env("sokoban").level.solution))  # reset(0)'s level
    eps = play_episodes(lambda: make_env("sokoban"), [[solver], [Replay(["nonsense"])]], [0, 0])
    assert [e.forfeited_by for e in eps] == [None, 0]
    assert not any(e.truncated for e in eps)
    assert episode_metrics(eps)["success_rate"] == 0.5
