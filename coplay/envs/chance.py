"""Seeded chance draws that cost one generator per seed, not one per game.

A game reset with seed ``s`` draws every chance outcome exactly as
``np.random.default_rng(s).choice(n, p=probs)`` would: one uniform per chance node,
inverted through the normalised cumulative distribution. So the same seed deals the
same cards, and the deals are those of a fresh generator per game. Games of one group
share their seed; the uniforms a seed has produced are kept, so building its
generator (tens of microseconds, more than a Kuhn deal) happens once per seed.
"""

from __future__ import annotations

import math
from bisect import bisect_right
from collections.abc import Sequence
from itertools import accumulate

import numpy as np

_KEPT = 4096
"""Seeds whose uniforms are kept at once; older ones are forgotten (and rebuilt if met
again): a run's seeds move on every iteration, so the memory stays small."""


class _Uniforms:
    """The uniforms ``default_rng(seed).random()`` returns, in order, drawn on demand."""

    def __init__(self, seed: int) -> None:
        self._rng = np.random.default_rng(seed)
        self._values: list[float] = []

    def at(self, i: int) -> float:
        if i >= len(self._values):
            # A block per call: ``random(n)`` returns the next n values ``random()``
            # would, one by one, and a small game's deal fits in one block.
            self._values += self._rng.random(max(_BLOCK, i + 1 - len(self._values))).tolist()
        return self._values[i]


_BLOCK = 8


_STREAMS: dict[int, _Uniforms] = {}


def _uniforms(seed: int) -> _Uniforms:
    stream = _STREAMS.get(seed)
    if stream is None:
        stream = _Uniforms(seed)
        if len(_STREAMS) >= _KEPT:
            _STREAMS.clear()
        _STREAMS[seed] = stream
    return stream


def check_seed(seed: object, *, owner: str | None = None) -> int:
    """``seed`` as an int, or one error line: numpy's seed sequences take only
    non-negative integers (a bool is refused, though Python counts it as one)."""
    if not isinstance(seed, int | np.integer) or isinstance(seed, bool) or seed < 0:
        where = f"{owner}: " if owner else ""
        raise ValueError(f"{where}a seed must be a non-negative integer, got {seed!r}")
    return int(seed)


class ChanceDraws:
    """The chance outcomes of one game from ``seed``: ``choose(probs)`` per chance node."""

    def __init__(self, seed: int) -> None:
        self._seed = check_seed(seed)
        # Built at the first chance node: a game without any (tic-tac-toe) never
        # pays for its seed's generator.
        self._stream: _Uniforms | None = None
        self._drawn = 0

    def choose(self, probs: Sequence[float]) -> int:
        """Index drawn with probabilities ``probs``, as ``Generator.choice(n, p=probs)``.

        >>> draws, rng = ChanceDraws(7), np.random.default_rng(7)
        >>> [draws.choose([0.5, 0.3, 0.2]) for _ in range(6)]
        [1, 2, 1, 0, 0, 2]
        >>> [int(rng.choice(3, p=[0.5, 0.3, 0.2])) for _ in range(6)]
        [1, 2, 1, 0, 0, 2]
        """
        if self._stream is None:
            self._stream = _uniforms(self._seed)
        u = self._stream.at(self._drawn)
        self._drawn += 1
        return bisect_right(_cdf(tuple(probs)), u)


def is_distribution(probs: Sequence[float]) -> bool:
    """Whether ``probs`` can be drawn from: finite, none negative, some positive. A game
    given a probability out of [0, 1] (the iterated dilemma's termination_probability=2)
    lists a negative one, which numpy's ``choice`` refuses and the cumulative sum would
    turn into a certain outcome."""
    return all(math.isfinite(p) and p >= 0 for p in probs) and sum(probs) > 0


_CDFS: dict[tuple, list[float]] = {}


def _cdf(probs: tuple) -> list[float]:
    """numpy's cumsum of ``probs`` divided by its last entry (the same floats), kept:
    a game's chance nodes repeat a few distributions (a deck, a die)."""
    cdf = _CDFS.get(probs)
    if cdf is None:
        if not is_distribution(probs):
            raise ValueError(f"chance probabilities {list(probs)} are no distribution")
        sums = list(accumulate(float(p) for p in probs))
        cdf = [c / sums[-1] for c in sums]
        if len(_CDFS) >= _KEPT:
            _CDFS.clear()
        _CDFS[probs] = cdf
    return cdf
