"""Host tensors sent to the model's device without waiting for the device's work.

``tensor.to("cuda")`` is a blocking copy: PyTorch synchronizes the stream after it,
so an index or mask built between two model calls holds the host until every kernel
queued before it has run. The host then neither queues the next kernels nor steps
games while the device works, and a small model's pass costs its launches plus its
run time instead of the larger of the two. ``to_device`` copies from page-locked
memory (PyTorch's cached pinned blocks, kept until the copy is done) without
blocking, which waits for nothing; on any other device it is ``tensor.to``.
"""

from __future__ import annotations

import os

import torch


def to_device(t: torch.Tensor, device: torch.device | str) -> torch.Tensor:
    """``t`` (a host tensor) on ``device``; on a CUDA device the copy is queued on the
    current stream and the host goes on at once. Copying from ordinary pageable
    memory instead may wait for the stream first (CUDA's rules for staged copies)."""
    device = torch.device(device)
    if device.type != "cuda" or t.device.type != "cpu":
        return t.to(device)
    return t.pin_memory().to(device, non_blocking=True)


class HostCopy:
    """A device tensor's copy on the host, queued now and read later (``get``).

    On a CUDA device the copy goes into page-locked memory behind the work already
    queued, and an event marks its end: the host is free until ``get``, which waits
    for that event alone, not for work queued after it (another batch's pass). On
    the CPU it is the tensor itself; other devices copy at once."""

    def __init__(self, t: torch.Tensor) -> None:
        self._done: torch.cuda.Event | None = None
        if t.device.type == "cuda":
            self._host = torch.empty(t.shape, dtype=t.dtype, pin_memory=True)
            self._host.copy_(t, non_blocking=True)
            self._done = torch.cuda.Event()
            # On the copy's device: a bare record() marks the current device's stream.
            self._done.record(torch.cuda.current_stream(t.device))
        else:
            self._host = t.cpu()

    def get(self) -> torch.Tensor:
        """The host tensor, once the copy is done."""
        if self._done is not None:
            self._done.synchronize()
            self._done = None
        return self._host


def set_host_threads(device: str, threads: int | None) -> None:
    """torch's intra-op threads for a process whose model runs on ``device``:
    ``threads`` where given (``model.threads``), else one with a CUDA device unless
    ``OMP_NUM_THREADS`` says otherwise, else torch's default (one per core), which a
    CPU run after a GPU run in one process gets back.

    With a GPU the host's share of the work is small tensor ops (indices, masks,
    sampling over a few hundred rows) between launches, and at one thread per core
    each of them wakes a pool of threads for microseconds of work: on a 16-core GPU
    machine the choice-mode rollout ran 1.11-1.27x faster at one thread than at 16
    (docs/results.md). On the CPU the model's own matrices are the work, which
    threads do split."""
    global _torch_threads
    if threads is None and torch.device(device).type != "cuda":
        threads = _torch_threads  # a CPU run after a GPU one in this process gets the cores back
    elif threads is None and "OMP_NUM_THREADS" not in os.environ:
        threads = 1
    if threads is not None:
        _torch_threads = _torch_threads or torch.get_num_threads()
        torch.set_num_threads(threads)


_torch_threads: int | None = None
"""torch's thread count before a run first set its own; None until then."""
