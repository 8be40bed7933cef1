"""FrozenLake: walk across a frozen lake to the goal without falling into a hole.

One player, on a ``size`` x ``size`` map generated from the seed of ``reset``: the
start is the top-left corner, the goal G the bottom-right one, and every other tile
is a hole H with probability ``hole_prob``. Maps are rejection-sampled until a path
of ice joins start and goal (Gymnasium's ``generate_random_map`` does the same);
after ``MAX_MAP_TRIES`` failures a random monotone path is cleared, so every map is
solvable. The same seed gives the same map and, when ``slippery``, the same slides.

Moves: ``[Up] [Down] [Left] [Right]`` are always legal. A move into the edge of the
map leaves the player where it is and still uses a step. On slippery ice the player
goes the intended way or to either side of it, each with probability 1/3 (as in
Gymnasium), never backwards. Stepping on G or H ends the game; the engine truncates
it after ``max_steps`` moves (``spec.max_turns``).

Rewards (``reward=``):

- ``"sparse"``: 1 for reaching G, else 0. Returns lie in [0, 1].
- ``"dense"``: each move earns ``(d_before - d_after) / d_start``, where ``d`` is the
  shortest path over ice to G in moves (a move into a hole earns 0), plus 1 for
  reaching G. A successful episode returns 2 whatever its detours; returns lie in
  [(1 - size) / 2, 2].

``returns()`` is the sum of the rewards ``step`` has paid, at any time, so turn rewards
sum to the return also when an episode is truncated.

Rendering (``@`` you, ``S`` start, ``F`` ice, ``H`` hole, ``G`` goal)::

    @ F F F
    F H F H
    F F F H
    H F F G

``Observation.info_key`` is the map with the player on it: equal keys are equal states.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from coplay.envs import grid
from coplay.envs.chance import check_seed
from coplay.envs.grid import MOVES, Cell, shift
from coplay.types import Episode, GameKind, GameSpec, Observation

GAME = "frozen_lake"
MAX_MAP_TRIES = 100
"""Maps drawn before a random right/down path is cleared through the last one."""
SIZES = range(2, 13)
"""Map sides allowed; 12 x 12 keeps the prompt well inside the tiny model's context."""


@dataclass(frozen=True)
class Lake:
    """One generated map: its side, holes and every ice tile's distance to the goal."""

    size: int
    holes: frozenset[Cell]
    distance: dict[Cell, int]
    """Shortest path in moves over ice to the goal, for every tile connected to it."""

    @property
    def start(self) -> Cell:
        return (0, 0)

    @property
    def goal(self) -> Cell:
        return (self.size - 1, self.size - 1)


def goal_distances(size: int, holes: frozenset[Cell]) -> dict[Cell, int]:
    """Breadth-first distances to the bottom-right goal over non-hole tiles."""
    goal = (size - 1, size - 1)
    dist = {goal: 0}
    queue = deque([goal])
    while queue:
        r, c = queue.popleft()
        for direction in MOVES.values():
            nxt = shift((r, c), direction)
            inside = 0 <= nxt[0] < size and 0 <= nxt[1] < size
            if inside and nxt not in holes and nxt not in dist:
                dist[nxt] = dist[(r, c)] + 1
                queue.append(nxt)
    return dist


def _monotone_path(size: int, rng: np.random.Generator) -> set[Cell]:
    """A random right/down path from the start to the goal."""
    steps = [(0, 1)] * (size - 1) + [(1, 0)] * (size - 1)
    rng.shuffle(steps)
    cell, path = (0, 0), {(0, 0)}
    for dr, dc in steps:
        cell = (cell[0] + dr, cell[1] + dc)
        path.add(cell)
    return path


def generate_lake(size: int, hole_prob: float, rng: np.random.Generator) -> Lake:
    """A random solvable map; start and goal are never holes."""
    ends = {(0, 0), (size - 1, size - 1)}
    holes: frozenset[Cell] = frozenset()
    for _ in range(MAX_MAP_TRIES):
        draws = rng.random((size, size)) < hole_prob
        holes = frozenset(
            (r, c) for r in range(size) for c in range(size) if draws[r, c] and (r, c) not in ends
        )
        dist = goal_distances(size, holes)
        if (0, 0) in dist:
            return Lake(size, holes, dist)
    holes = holes - _monotone_path(size, rng)
    return Lake(size, holes, goal_distances(size, holes))


def render_lake(lake: Lake, player: Cell) -> list[str]:
    """Map rows, one character per tile separated by spaces."""

    def tile(cell: Cell) -> str:
        if cell == player:
            return "@"
        if cell in lake.holes:
            return "H"
        return {lake.start: "S", lake.goal: "G"}.get(cell, "F")

    n = lake.size
    return [" ".join(tile((r, c)) for c in range(n)) for r in range(n)]


@dataclass(frozen=True)
class Move:
    """One transition, what the reward functions read."""

    d_start: int
    d_before: int
    d_after: int | None
    """None when the player fell into a hole."""
    reached_goal: bool


def sparse_reward(move: Move) -> float:
    """1 for reaching the goal, else 0."""
    return 1.0 if move.reached_goal else 0.0


def dense_reward(move: Move) -> float:
    """Progress along the shortest path (a fraction of the start's distance), +1 at the goal."""
    if move.d_after is None:
        return 0.0
    return (move.d_before - move.d_after) / move.d_start + sparse_reward(move)


REWARDS: dict[str, Callable[[Move], float]] = {"sparse": sparse_reward, "dense": dense_reward}
RETURN_BOUNDS: dict[str, Callable[[int], tuple[float, float]]] = {
    "sparse": lambda size: (0.0, 1.0),
    # The last ice tile is at most size^2 - 1 moves from the goal, the start at least
    # 2 (size - 1): progress is at least 1 - (size + 1) / 2.
    "dense": lambda size: ((1 - size) / 2, 2.0),
}


def _check_params(size: object, hole_prob: object, slippery: object) -> None:
    grid.check_int(GAME, "size", size, SIZES)
    # A bool is an int to Python; false as a probability is a typo, not 0.
    number = isinstance(hole_prob, int | float) and not isinstance(hole_prob, bool)
    if not number or not 0.0 <= hole_prob < 1.0:
        raise ValueError(f"{GAME}: hole_prob must be a number in [0, 1), got {hole_prob!r}")
    if not isinstance(slippery, bool):
        raise ValueError(f"{GAME}: slippery must be true or false, got {slippery!r}")


class FrozenLake(grid.SinglePlayer):
    """The FrozenLake ``Env`` (see the module docstring for rules and rewards)."""

    game_name = GAME

    def __init__(
        self,
        *,
        size: int = 4,
        hole_prob: float = 0.2,
        slippery: bool = False,
        max_steps: int | None = None,
        reward: str = "sparse",
    ) -> None:
        _check_params(size, hole_prob, slippery)
        self.size, self.hole_prob, self.slippery = size, float(hole_prob), slippery
        self._reward = REWARDS[grid.check_choice(GAME, "reward", reward, REWARDS)]
        low, high = RETURN_BOUNDS[reward](size)
        self.spec = GameSpec(
            name=GAME,
            num_players=1,
            kind=GameKind.COOPERATIVE,
            max_turns=grid.check_max_steps(GAME, max_steps, 4 * size * size),
            perfect_information=True,
            min_return=low,
            max_return=high,
        )
        self.reset(0)

    def reset(self, seed: int) -> None:
        """Generate the map from ``seed``; slides draw from a second stream of the same seed."""
        map_seq, slide_seq = np.random.SeedSequence(check_seed(seed, owner=GAME)).spawn(2)
        self.lake = generate_lake(self.size, self.hole_prob, np.random.default_rng(map_seq))
        self._slides = np.random.default_rng(slide_seq)
        self.position: Cell = self.lake.start
        self._total = 0.0
        self._done = False

    def observe(self, player: int) -> Observation:
        grid.check_player(GAME, player)
        rows = render_lake(self.lake, self.position)
        slippery = (
            "The ice is slippery: a move may slide to either side.\n" if self.slippery else ""
        )
        text = (
            f"FrozenLake {self.size}x{self.size}. Walk to the goal G; a hole H ends the game.\n"
            f"{slippery}Legend: @ you, S start, F ice, H hole, G goal.\n"
            "Map:\n" + "\n".join(rows) + "\n"
        )
        return self._observation(text, rows)

    def step(self, actions: dict[int, str]) -> dict[int, float]:
        """Move (or slide); a move off the map stays put. Returns player 0's reward."""
        direction = MOVES[grid.single_move(GAME, actions, self._done)]
        if self.slippery:
            sideways = [(direction[1], direction[0]), (-direction[1], -direction[0])]
            direction = [direction, *sideways][int(self._slides.integers(3))]
        before, (r, c) = self.position, shift(self.position, direction)
        if 0 <= r < self.size and 0 <= c < self.size:
            self.position = (r, c)
        fell = self.position in self.lake.holes
        move = Move(
            d_start=self.lake.distance[self.lake.start],
            d_before=self.lake.distance[before],
            d_after=None if fell else self.lake.distance[self.position],
            reached_goal=self.position == self.lake.goal,
        )
        self._done = fell or move.reached_goal
        reward = self._reward(move)
        return self._pay(reward)

    def outcomes(self) -> list[float]:
        """1 for standing on the goal, else 0: the sparse reward, which the ``dense``
        return holds beside its progress rewards."""
        return [1.0 if self.position == self.lake.goal else 0.0]


def make_frozen_lake(**params: object) -> FrozenLake:
    """Registry factory: ``make_env("frozen_lake", size=8, slippery=True)``."""
    grid.check_known_params(GAME, params, FrozenLake)
    return FrozenLake(**params)  # type: ignore[arg-type]


def episode_metrics(episodes: Sequence[Episode]) -> dict[str, float]:
    """``success_rate``: the share of episodes that reached the goal, read from the
    outcome (1 on the goal; None after a forfeit). Not from the return, which holds
    the invalid-action penalties: a penalised run that reached the goal returns less
    than 1."""
    if not episodes:
        raise ValueError("episode_metrics needs at least one episode")
    reached = sum(e.trajectories[0].outcome == 1.0 for e in episodes)
    return {"success_rate": reached / len(episodes)}
