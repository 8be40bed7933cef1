"""Timers that wrap functions in place, for the benchmarks that split a run's time.

``Clock`` counts each wrapped function's *exclusive* seconds (its own, less those of
the wrapped functions it calls) and its calls; ``patched`` puts a wrapper in place
of a function, a method or a module's function for as long as it is entered, and
takes it off again.
"""

from __future__ import annotations

import collections
import functools
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager


class Clock:
    """Exclusive seconds and calls per label of the functions it wraps."""

    def __init__(self) -> None:
        self.secs: dict[str, float] = collections.defaultdict(float)
        self.calls: collections.Counter[str] = collections.Counter()
        self._inner: list[float] = []  # per open call: its wrapped callees' seconds

    def wrap(self, fn: Callable, label: str) -> Callable:
        @functools.wraps(fn)
        def timed(*args, **kwargs):
            start = time.perf_counter()
            self._inner.append(0.0)
            try:
                return fn(*args, **kwargs)
            finally:
                took = time.perf_counter() - start
                self.secs[label] += took - self._inner.pop()
                self.calls[label] += 1
                if self._inner:
                    self._inner[-1] += took

        return timed

    def reset(self) -> None:
        self.secs.clear()
        self.calls.clear()

    def overhead(self, n: int = 20_000) -> float:
        """Seconds one wrapper adds to its caller (an empty function, wrapped)."""
        plain, timed = (lambda: None), self.wrap(lambda: None, "")
        out = []
        for fn in (plain, timed):
            start = time.perf_counter()
            for _ in range(n):
                fn()
            out.append(time.perf_counter() - start)
        self.reset()
        return max(0.0, (out[1] - out[0]) / n)


@contextmanager
def patched(owner: object, name: str, clock: Clock, label: str) -> Iterator[None]:
    """``owner.name`` wrapped by ``clock`` while inside; for a module function, every
    module that imported it by name too (each calls its own reference)."""
    original = getattr(owner, name)
    timed = clock.wrap(original, label)
    holders = [owner]
    if isinstance(owner, type(sys)):
        # Read from each module's own namespace: a lazy module's ``getattr`` imports.
        holders += [
            m
            for m in list(sys.modules.values())
            if m is not owner and getattr(m, "__dict__", {}).get(name) is original
        ]
    saved = [(h, h.__dict__.get(name, _MISSING)) for h in holders]
    for h in holders:
        setattr(h, name, timed)
    try:
        yield
    finally:
        for h, before in saved:
            if before is _MISSING:
                delattr(h, name)
            else:
                setattr(h, name, before)


_MISSING = object()
