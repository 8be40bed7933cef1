"""Per-seat random streams: every draw indexed by (game stream, seat, draw number).

A game given a stream seed draws each seat's samples from that seat's own stream, so
the game plays the same whatever other games share its batch, and a plan split over
several engines (``coplay.distributed``) plays what one engine plays. The draws are
counter-based: the n-th draw of a seat is a hash of (stream, seat, n), as in the
counter-based generators of Salmon et al. (2011, "Parallel random numbers: as easy
as 1, 2, 3"). So a batch's draws are one vectorised pass over its rows, with no
generator object per seat to build (a numpy Generator takes tens of microseconds to
seed, more than a Kuhn game's whole play). The hash is SplitMix64's finaliser
(Steele, Lea and Flood, 2014), whose outputs pass BigCrush on consecutive inputs.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

_MASK = (1 << 64) - 1
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)
_BELOW_ONE = np.nextafter(1.0, 0.0)


def _mix(x: np.ndarray) -> np.ndarray:
    """SplitMix64 of each entry of a uint64 array (wrapping arithmetic)."""
    x = x + _GOLDEN
    x = (x ^ (x >> np.uint64(30))) * _M1
    x = (x ^ (x >> np.uint64(27))) * _M2
    return x ^ (x >> np.uint64(31))


class SeatStream:
    """The random stream of one seat of one game: its draws so far and its key."""

    __slots__ = ("drawn", "player", "stream")

    def __init__(self, stream: int, player: int) -> None:
        self.stream = stream
        self.player = player
        self.drawn = 0
        """Draws taken so far; the next one is draw number ``drawn``."""

    def below(self, n: int) -> int:
        """One index drawn uniformly from ``range(n)``."""
        return int(uniforms([self], [1])[0] * n)


def _bits(streams: Sequence[SeatStream], sizes: Sequence[int]) -> np.ndarray:
    """``sizes[i]`` 64-bit draws of ``streams[i]``, flat in row order; each stream
    moves on by its size."""
    n = len(streams)
    counts = np.fromiter(sizes, dtype=np.int64, count=n)
    seeds = np.fromiter((s.stream & _MASK for s in streams), dtype=np.uint64, count=n)
    seats = np.fromiter((s.player for s in streams), dtype=np.uint64, count=n)
    start = np.fromiter((s.drawn for s in streams), dtype=np.int64, count=n)
    for s, k in zip(streams, sizes, strict=True):
        s.drawn += int(k)
    keys = _mix(_mix(seeds) ^ seats)  # one key per (stream, seat)
    firsts = np.cumsum(counts) - counts
    index = np.repeat(start - firsts, counts) + np.arange(int(counts.sum()))
    return _mix(np.repeat(keys, counts) ^ _mix(index.astype(np.uint64)))


def uniforms(streams: Sequence[SeatStream], sizes: Sequence[int]) -> np.ndarray:
    """Uniforms in the open interval (0, 1), ``sizes[i]`` of them from ``streams[i]``,
    flat in row order (each stream moves on by its size).

    >>> a, b = SeatStream(7, 0), SeatStream(7, 1)
    >>> both = uniforms([a, b], [2, 1])
    >>> alone = uniforms([SeatStream(7, 1)], [1])  # b's first draw, in another batch
    >>> bool(both[2] == alone[0]), bool(both[0] != both[2]), a.drawn, b.drawn
    (True, True, 2, 1)
    """
    bits = _bits(streams, sizes)
    # Above 2**52 adding 0.5 rounds to even, so the top 53-bit draw would give 1.0
    # exactly, and an inverse-CDF draw (``SeatStream.below``) one index past the end.
    return np.minimum(((bits >> np.uint64(11)).astype(np.float64) + 0.5) * 2.0**-53, _BELOW_ONE)


def exponentials(streams: Sequence[SeatStream], sizes: Sequence[int]) -> np.ndarray:
    """Standard exponentials, ``sizes[i]`` of them from ``streams[i]``, flat."""
    return -np.log(uniforms(streams, sizes))


def seeds(streams: Sequence[SeatStream]) -> list[int]:
    """One 62-bit seed from each stream (each moves on by one), for a generator that
    draws for a whole batch at once."""
    return [int(b >> np.uint64(2)) for b in _bits(streams, [1] * len(streams))]
