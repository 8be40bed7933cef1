"""Freed tensor memory kept by the process instead of handed back to the kernel.

PyTorch's CPU tensors come from the C library's ``malloc``. A forward pass of a batch
of games allocates and frees tens of megabytes of activations and KV caches, and
glibc's defaults return freed memory at the heap's top to the kernel once it passes
a threshold that follows the sizes seen so far (a few megabytes here). The next pass
then takes it back page by page: about 31,000 page faults in one rollout of 256
tic-tac-toe games with the default tiny model, a quarter of its time
(docs/results.md). With the thresholds fixed above a pass's churn, the same
rollout takes about 800.

``keep_freed_memory`` sets them once per process; ``HFBackend``, the backend that runs
a model's tensors in this process, calls it when it is built. The process then holds up to
``TRIM_BYTES`` of freed memory for its next pass; a tensor of ``MMAP_BYTES`` or more
is still mapped and unmapped on its own. A process started with any ``MALLOC_*``
setting or glibc tunable of its own keeps those and nothing is changed; so does one
whose C library has no ``mallopt`` (not glibc).
"""

from __future__ import annotations

import ctypes
import os
import sys

MMAP_BYTES = 4 * 2**20
"""Allocations below this come from the heap: a small model's per-pass tensors. A
large model's activations and logits above it are mapped and unmapped on their own,
as by default, so its peak memory stays where it was (``benchmarks/update_memory.py``)."""
TRIM_BYTES = 128 * 2**20
"""Freed memory at the heap's top kept for reuse, at most."""
PAD_BYTES = 16 * 2**20
"""Extra memory asked for whenever the heap grows, and left when it is trimmed."""

_M_TRIM_THRESHOLD, _M_TOP_PAD, _M_MMAP_THRESHOLD = -1, -2, -3  # glibc's malloc.h
_SETTINGS = (
    (_M_MMAP_THRESHOLD, MMAP_BYTES),
    (_M_TRIM_THRESHOLD, TRIM_BYTES),
    (_M_TOP_PAD, PAD_BYTES),
)
_kept: bool | None = None  # the outcome of the first call


def keep_freed_memory() -> bool:
    """Fix glibc's trim and mmap thresholds so freed tensor memory is reused, not
    returned to the kernel and faulted in again (see the module's text). Returns
    whether the settings are in force; only the first call in a process acts."""
    global _kept
    if _kept is None:
        _kept = _apply()
    return _kept


def _apply() -> bool:
    if not sys.platform.startswith("linux") or _user_settings():
        return False
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (AttributeError, OSError):
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    return all(mallopt(option, value) == 1 for option, value in _SETTINGS)


def _user_settings() -> bool:
    """Whether the process was started with malloc settings of its own."""
    return any(k.startswith("MALLOC_") for k in os.environ) or "malloc" in os.environ.get(
        "GLIBC_TUNABLES", ""
    )
