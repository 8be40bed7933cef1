"""Sokoban: push every box onto a target in a walled room.

One player, in a ``size`` x ``size`` room generated from the seed of ``reset`` the way
the gym-sokoban generator does it (Schrader, 2018), in three stages:

1. *topology*: a random walk carves floor out of solid wall, a small pattern of
   tiles at each step (the outer ring always stays wall);
2. *placement*: ``num_boxes`` targets, each with its box on it, and the player on
   free floor: a solved room;
3. *reverse play*: ``WALKS`` random walks of the player (keeping its direction with
   probability 1 - ``TURN_PROB``), who *pulls* along any box right behind it. Of all
   states reached with no box on a target, the level is the one whose boxes are
   furthest (summed Manhattan distance) from their own targets, ties going to the
   player furthest from the nearest box (right after a pull it stands where one
   push undoes it).

Every pull undoes a push, so playing a reverse walk backwards solves the level:
every level is solvable (``Level.solution`` holds that move list). A room whose walks
never move every box off the targets is rejected and the next attempt uses the same
random stream, so a seed always gives the same level. On 6x6 rooms with one box the
shortest solutions average 4.7 moves (seeds 0-199; 16% take 1 or 2 moves).

Moves: ``[Up] [Down] [Left] [Right]`` are always legal. Walking into a box pushes it
when the tile behind it is free floor; a move into a wall, or a push against a wall
or another box, leaves everything where it is and still uses a step. The game ends
when every box is on a target; the engine truncates it after ``max_steps`` moves
(``spec.max_turns``). Pushing a box into a corner can make a level unsolvable: the
episode then runs until truncated, as in gym-sokoban.

Rewards (``reward=``):

- ``"sparse"``: 1 when the last box reaches a target, else 0. Returns in [0, 1].
- ``"dense"``: gym-sokoban's shaping divided by 10: -0.01 per move, +0.1 for pushing
  a box onto a target, -0.1 for pushing one off, +1 on solving. Returns lie in
  [-0.01 * max_steps, 1 + 0.1 * num_boxes].

``returns()`` is the sum of the rewards ``step`` has paid, at any time.

Rendering (XSB symbols with ``_`` for floor): ``#`` wall, ``_`` floor, ``.`` target,
``$`` box, ``*`` box on a target, ``@`` you, ``+`` you on a target::

    # # # # # #
    # _ _ # # #
    # _ $ _ _ #
    # . @ _ _ #
    # # # # # #

With ``hints=True`` the observation adds where each box and target lies relative to
the player, in words (``box: 1 down, 2 left``). The map holds the same facts, but a
small model must first learn to read 2-D positions out of a 1-D token sequence before
it can act on them; the hint line lets it learn the pushing rules directly (measured in
docs/results.md). It is an observation option, not a change of the game.

``Observation.info_key`` is the rendered room: equal keys are equal states.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from coplay.envs import grid
from coplay.envs.chance import check_seed
from coplay.envs.grid import ACTIONS, MOVES, Cell, shift
from coplay.types import Episode, GameKind, GameSpec, Observation

GAME = "sokoban"
SIZES = range(5, 13)
BOXES = range(1, 5)
MAX_ATTEMPTS = 1000
"""Rooms tried before giving up; generation practically never needs more than a few."""
PATTERNS: tuple[tuple[Cell, ...], ...] = (
    ((0, 0),),
    ((0, -1), (0, 0), (0, 1)),
    ((-1, 0), (0, 0), (1, 0)),
    ((0, 0), (0, 1), (1, 0), (1, 1)),
    ((0, 0), (0, 1), (1, 0)),
)
"""Floor carved around the walker at each step of the topology walk."""
TURN_PROB = 0.35
"""Chance that a walk changes direction at a step (gym-sokoban's value for the topology)."""
CARVE_STEPS = 5
"""Topology walk steps per unit of room side."""
WALKS = 8
"""Reverse walks per room, each ``4 * floor tiles`` moves long."""
OPPOSITE = {"[Up]": "[Down]", "[Down]": "[Up]", "[Left]": "[Right]", "[Right]": "[Left]"}


@dataclass(frozen=True)
class Level:
    """A generated level: static room plus the start positions and a known solution."""

    size: int
    floor: frozenset[Cell]
    targets: frozenset[Cell]
    boxes: frozenset[Cell]
    player: Cell
    solution: tuple[str, ...]
    """Moves that solve the level from the start (not necessarily the shortest)."""


def carve_room(size: int, rng: np.random.Generator) -> frozenset[Cell]:
    """Floor tiles carved by a random walk inside the outer wall ring."""
    inside = range(1, size - 1)
    cell = (int(rng.integers(1, size - 1)), int(rng.integers(1, size - 1)))
    direction = list(MOVES.values())[int(rng.integers(4))]
    floor: set[Cell] = set()
    for _ in range(CARVE_STEPS * size):
        if rng.random() < TURN_PROB:
            direction = list(MOVES.values())[int(rng.integers(4))]
        nxt = shift(cell, direction)
        if nxt[0] in inside and nxt[1] in inside:
            cell = nxt
        for offset in PATTERNS[int(rng.integers(len(PATTERNS)))]:
            tile = shift(cell, offset)
            if tile[0] in inside and tile[1] in inside:
                floor.add(tile)
    return frozenset(floor)


@dataclass
class _Reverse:
    """The state of a reverse walk: boxes keyed by the target each started on."""

    player: Cell
    boxes: dict[Cell, Cell]
    moves: list[str]


def reverse_move(state: _Reverse, floor: frozenset[Cell], action: str) -> None:
    """Step the player unless blocked, dragging along a box right behind it."""
    direction = MOVES[action]
    nxt = shift(state.player, direction)
    occupied = set(state.boxes.values())
    if nxt not in floor or nxt in occupied:
        return
    behind = (state.player[0] - direction[0], state.player[1] - direction[1])
    if behind in occupied:
        origin = next(t for t, b in state.boxes.items() if b == behind)
        state.boxes[origin] = state.player
    state.player = nxt
    state.moves.append(action)


def difficulty(state: _Reverse) -> tuple[int, int]:
    """Summed distance of the boxes from their own targets, then of the player from
    the nearest box (Manhattan)."""
    boxes = state.boxes.items()
    spread = sum(abs(t[0] - b[0]) + abs(t[1] - b[1]) for t, b in boxes)
    p = state.player
    return spread, min(abs(b[0] - p[0]) + abs(b[1] - p[1]) for _, b in boxes)


def reverse_play(
    size: int,
    floor: frozenset[Cell],
    targets: frozenset[Cell],
    player: Cell,
    rng: np.random.Generator,
) -> Level | None:
    """The hardest state random reverse walks reach with no box on a target, or None."""
    best: tuple[tuple[int, int], Cell, frozenset[Cell], tuple[str, ...]] | None = None
    for _ in range(WALKS):
        state = _Reverse(player, {t: t for t in sorted(targets)}, [])
        action = ACTIONS[int(rng.integers(4))]
        for _ in range(4 * len(floor)):
            if rng.random() < TURN_PROB:
                action = ACTIONS[int(rng.integers(4))]
            reverse_move(state, floor, action)
            if any(b in targets for b in state.boxes.values()):
                continue
            score = difficulty(state)
            if best is None or score > best[0]:
                best = (score, state.player, frozenset(state.boxes.values()), tuple(state.moves))
    if best is None:
        return None
    _, start, boxes, moves = best
    solution = tuple(OPPOSITE[m] for m in reversed(moves))
    return Level(size, floor, targets, boxes, start, solution)


def generate_level(size: int, num_boxes: int, rng: np.random.Generator) -> Level:
    """A random solvable level with no box on a target."""
    for _ in range(MAX_ATTEMPTS):
        floor = carve_room(size, rng)
        if len(floor) < 2 * num_boxes + 3:
            continue
        tiles = sorted(floor)
        picks = rng.choice(len(tiles), size=num_boxes + 1, replace=False)
        targets = frozenset(tiles[int(i)] for i in picks[:-1])
        level = reverse_play(size, floor, targets, tiles[int(picks[-1])], rng)
        if level is not None:
            return level
    raise RuntimeError(f"{GAME}: no level with {num_boxes} boxes in {MAX_ATTEMPTS} rooms")


def render_room(level: Level, player: Cell, boxes: frozenset[Cell]) -> list[str]:
    """Room rows in XSB symbols (``_`` for floor), tiles separated by spaces."""

    def tile(cell: Cell) -> str:
        if cell not in level.floor:
            return "#"
        on_target = cell in level.targets
        if cell == player:
            return "+" if on_target else "@"
        if cell in boxes:
            return "*" if on_target else "$"
        return "." if on_target else "_"

    n = level.size
    return [" ".join(tile((r, c)) for c in range(n)) for r in range(n)]


@dataclass(frozen=True)
class Push:
    """One transition, what the reward functions read."""

    on_target_before: int
    on_target_after: int
    solved: bool


def sparse_reward(push: Push) -> float:
    """1 on solving, else 0."""
    return 1.0 if push.solved else 0.0


def dense_reward(push: Push) -> float:
    """gym-sokoban's shaping / 10: step cost, box on/off target, solving bonus."""
    return -0.01 + 0.1 * (push.on_target_after - push.on_target_before) + sparse_reward(push)


REWARDS: dict[str, Callable[[Push], float]] = {"sparse": sparse_reward, "dense": dense_reward}
RETURN_BOUNDS: dict[str, Callable[[int, int], tuple[float, float]]] = {
    "sparse": lambda boxes, steps: (0.0, 1.0),
    # Boxes start off the targets, so on/off rewards net to >= 0 and <= 0.1 * boxes.
    "dense": lambda boxes, steps: (-0.01 * steps, 1.0 + 0.1 * boxes),
}


class Sokoban(grid.SinglePlayer):
    """The Sokoban ``Env`` (see the module docstring for generation, rules and rewards)."""

    game_name = GAME

    def __init__(
        self,
        *,
        size: int = 6,
        num_boxes: int = 1,
        max_steps: int | None = None,
        reward: str = "sparse",
        hints: bool = False,
    ) -> None:
        self.size = grid.check_int(GAME, "size", size, SIZES)
        if not isinstance(hints, bool):
            raise ValueError(f"{GAME}: hints must be true or false, got {hints!r}")
        self.hints = hints
        self.num_boxes = grid.check_int(GAME, "num_boxes", num_boxes, BOXES)
        if num_boxes > (size - 2) ** 2 // 4:
            raise ValueError(
                f"{GAME}: {num_boxes} boxes do not fit a {size}x{size} room; "
                f"at most {(size - 2) ** 2 // 4}"
            )
        self._reward = REWARDS[grid.check_choice(GAME, "reward", reward, REWARDS)]
        steps = grid.check_max_steps(GAME, max_steps, 120)
        low, high = RETURN_BOUNDS[reward](num_boxes, steps)
        self.spec = GameSpec(
            name=GAME,
            num_players=1,
            kind=GameKind.COOPERATIVE,
            max_turns=steps,
            perfect_information=True,
            min_return=low,
            max_return=high,
        )
        self.reset(0)

    def reset(self, seed: int) -> None:
        """Generate the level from ``seed``; the game has no chance after that."""
        rng = np.random.default_rng(check_seed(seed, owner=GAME))
        self.level = generate_level(self.size, self.num_boxes, rng)
        self.player, self.boxes = self.level.player, self.level.boxes
        self._total = 0.0
        self._done = False

    def on_target(self) -> int:
        """Boxes on targets now."""
        return len(self.boxes & self.level.targets)

    def observe(self, player: int) -> Observation:
        grid.check_player(GAME, player)
        rows = render_room(self.level, self.player, self.boxes)
        text = (
            f"Sokoban {self.size}x{self.size}. Push every box onto a target; "
            "boxes can be pushed, not pulled.\n"
            "Legend: # wall, _ floor, . target, $ box, * box on target, @ you, + you on target.\n"
            "Map:\n" + "\n".join(rows) + "\n"
            f"Boxes on targets: {self.on_target()}/{self.num_boxes}.\n"
        )
        if self.hints:
            text += hint_line(self.player, self.boxes, self.level.targets)
        return self._observation(text, rows)

    def step(self, actions: dict[int, str]) -> dict[int, float]:
        """Walk or push; a blocked move changes nothing. Returns player 0's reward."""
        direction = MOVES[grid.single_move(GAME, actions, self._done)]
        before = self.on_target()
        nxt = shift(self.player, direction)
        if nxt in self.boxes:
            beyond = shift(nxt, direction)
            if beyond in self.level.floor and beyond not in self.boxes:
                self.boxes = (self.boxes - {nxt}) | {beyond}
                self.player = nxt
        elif nxt in self.level.floor:
            self.player = nxt
        push = Push(before, self.on_target(), self.on_target() == self.num_boxes)
        self._done = push.solved
        reward = self._reward(push)
        return self._pay(reward)

    def outcomes(self) -> list[float]:
        """1 for a solved room, else 0: the sparse reward, which the ``dense`` return
        holds beside its step costs and box rewards."""
        return [1.0 if self.on_target() == self.num_boxes else 0.0]


def offset_words(origin: Cell, cell: Cell) -> str:
    """Where ``cell`` lies from ``origin`` in words: ``1 down, 2 left``; ``here`` if equal."""
    dr, dc = cell[0] - origin[0], cell[1] - origin[1]
    parts = [f"{abs(dr)} {'down' if dr > 0 else 'up'}"] if dr else []
    parts += [f"{abs(dc)} {'right' if dc > 0 else 'left'}"] if dc else []
    return ", ".join(parts) or "here"


def hint_line(player: Cell, boxes: frozenset[Cell], targets: frozenset[Cell]) -> str:
    """Every box and every free target relative to the player (the ``hints`` option)."""
    items = [f"box {offset_words(player, b)}" for b in sorted(boxes)]
    items += [f"target {offset_words(player, t)}" for t in sorted(targets - boxes)]
    return "From you: " + "; ".join(items) + ".\n"


def make_sokoban(**params: object) -> Sokoban:
    """Registry factory: ``make_env("sokoban", size=7, num_boxes=2)``."""
    grid.check_known_params(GAME, params, Sokoban)
    return Sokoban(**params)  # type: ignore[arg-type]


def episode_metrics(episodes: Sequence[Episode]) -> dict[str, float]:
    """``success_rate``: the share of episodes that ended solved, read from the
    outcome (1 for a solved room). Not from "not truncated": a forfeit also ends an
    episode untruncated, and its outcome is None."""
    if not episodes:
        raise ValueError("episode_metrics needs at least one episode")
    solved = sum(e.trajectories[0].outcome == 1.0 for e in episodes)
    return {"success_rate": solved / len(episodes)}
