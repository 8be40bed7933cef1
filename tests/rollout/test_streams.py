"""Per-seat streams: SplitMix64 values, a plain-integer reference, splitting, ranges."""

import numpy as np
import pytest

from coplay.rollout import streams
from coplay.rollout.streams import SeatStream, exponentials, seeds, uniforms

MASK = (1 << 64) - 1


def splitmix(x: int) -> int:
    """SplitMix64's output for state ``x`` (Steele, Lea and Flood, 2014), in Python ints."""
    x = (x + 0x9E3779B97F4A7C15) & MASK
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & MASK
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & MASK
    return x ^ (x >> 31)


def reference_bits(stream: int, seat: int, n: int) -> int:
    """The ``n``-th 64-bit draw of ``seat`` in ``stream``: a hash of the three."""
    key = splitmix(splitmix(stream & MASK) ^ seat)
    return splitmix(key ^ splitmix(n))


def reference_uniform(stream: int, seat: int, n: int) -> float:
    return ((reference_bits(stream, seat, n) >> 11) + 0.5) * 2.0**-53


def test_the_mix_is_splitmix64():
    # The first two outputs of SplitMix64 seeded with 0, as published with it.
    states = np.array([0, 0x9E3779B97F4A7C15], dtype=np.uint64)
    assert [int(x) for x in streams._mix(states)] == [0xE220A8397B1DCDAF, 0x6E789E6AA1B965F4]
    assert splitmix(0) == 0xE220A8397B1DCDAF


@pytest.mark.parametrize("stream", [0, 7, 2**40 + 3, -5])
def test_uniforms_match_a_plain_integer_reference(stream):
    for seat in (0, 1, 3):
        got = uniforms([SeatStream(stream, seat)], [6])
        assert got.tolist() == [reference_uniform(stream, seat, n) for n in range(6)]


def test_a_seats_draws_differ_along_its_counter():
    s = SeatStream(7, 0)
    u = uniforms([s], [1000])
    assert len(set(u.tolist())) == 1000
    assert s.drawn == 1000
    assert len(set(exponentials([SeatStream(7, 0)], [1000]).tolist())) == 1000


def test_draws_split_over_calls_equal_one_call():
    whole = uniforms([SeatStream(3, 1)], [3])
    s = SeatStream(3, 1)
    parts = np.concatenate([uniforms([s], [1]), uniforms([s], [2])])
    assert parts.tolist() == whole.tolist()
    assert s.drawn == 3
    # A size of 0 takes nothing and moves nothing.
    s = SeatStream(3, 1)
    assert uniforms([s], [0]).shape == (0,) and s.drawn == 0
    assert uniforms([s], [3]).tolist() == whole.tolist()


def test_a_batch_of_seats_draws_what_each_seat_draws_alone():
    keys = [(7, 0), (7, 1), (8, 0), (7, 0), (9, 2)]  # (7, 0) twice: two objects
    sizes = [2, 3, 1, 0, 4]
    batch = [SeatStream(*k) for k in keys]
    batch[1].drawn = 5  # a stream part-way along
    got = uniforms(batch, sizes)
    want = []
    for (stream, seat), k, start in zip(keys, sizes, [0, 5, 0, 0, 0], strict=True):
        alone = SeatStream(stream, seat)
        alone.drawn = start
        want += uniforms([alone], [k]).tolist()
    assert got.tolist() == want
    assert [s.drawn for s in batch] == [2, 8, 1, 0, 4]


def test_different_seats_and_streams_draw_differently():
    firsts = {
        (stream, seat): uniforms([SeatStream(stream, seat)], [4]).tolist()
        for stream in (0, 1, 2, 1000)
        for seat in (0, 1, 2)
    }
    flat = [u for draws in firsts.values() for u in draws]
    assert len(set(flat)) == len(flat)


def test_uniforms_lie_in_the_open_unit_interval_and_are_uniform():
    u = uniforms([SeatStream(s, p) for s in range(10) for p in range(2)], [2000] * 20)
    assert u.shape == (40000,)
    assert (u > 0).all() and (u < 1).all()
    # mean 1/2 and variance 1/12; the sd of the mean is 0.0014 at 40000 draws
    assert u.mean() == pytest.approx(0.5, abs=0.01)
    assert u.var() == pytest.approx(1 / 12, abs=0.005)
    counts = np.bincount((u * 10).astype(int), minlength=10)
    assert counts.min() > 3600 and counts.max() < 4400  # 4000 expected, sd 60


def unsplitmix(y: int) -> int:
    """The state whose SplitMix64 output is ``y``: each step of the mix undone."""

    def unshift(v: int, k: int) -> int:
        x = v
        for _ in range(64 // k + 1):
            x = v ^ (x >> k)
        return x

    y = (unshift(y, 31) * pow(0x94D049BB133111EB, -1, 2**64)) & MASK
    y = (unshift(y, 27) * pow(0xBF58476D1CE4E5B9, -1, 2**64)) & MASK
    return (unshift(y, 30) - 0x9E3779B97F4A7C15) & MASK


def test_the_largest_draw_stays_below_one():
    # The stream whose seat 0 draws all 64 bits set first, found by undoing the hash:
    # ((2**53 - 1) + 0.5) rounds to 2**53, which made that uniform exactly 1.0 and
    # below(n) return n, one past the last legal action.
    key = unsplitmix(MASK) ^ splitmix(0)
    stream = unsplitmix(unsplitmix(key))
    assert reference_bits(stream, 0, 0) == MASK
    (u,) = uniforms([SeatStream(stream, 0)], [1])
    assert 0.5 < u < 1.0
    assert SeatStream(stream, 0).below(3) == 2
    assert exponentials([SeatStream(stream, 0)], [1])[0] > 0


def test_exponentials_are_positive_with_mean_and_variance_one():
    e = exponentials([SeatStream(s, 0) for s in range(20)], [2000] * 20)
    assert (e > 0).all()
    # sd of the mean 0.005 at 40000 draws
    assert e.mean() == pytest.approx(1.0, abs=0.03)
    assert e.var() == pytest.approx(1.0, abs=0.1)
    # the same stream's uniforms, transformed
    assert e[:5].tolist() == pytest.approx((-np.log(uniforms([SeatStream(0, 0)], [5]))).tolist())


def test_below_draws_each_index_of_the_range():
    s = SeatStream(11, 1)
    picks = [s.below(3) for _ in range(3000)]
    assert s.drawn == 3000
    assert set(picks) == {0, 1, 2}
    assert all(800 < picks.count(i) < 1200 for i in range(3))  # 1000 expected, sd 26
    assert picks[:5] == [int(reference_uniform(11, 1, n) * 3) for n in range(5)]


def test_seeds_are_62_bit_one_draw_per_stream():
    batch = [SeatStream(4, 0), SeatStream(4, 1), SeatStream(5, 0)]
    got = seeds(batch)
    assert got == [
        reference_bits(stream, seat, 0) >> 2 for stream, seat in ((4, 0), (4, 1), (5, 0))
    ]
    assert all(0 <= x < 2**62 for x in got)
    assert [s.drawn for s in batch] == [1, 1, 1]
    assert seeds(batch) != got  # the next draw
