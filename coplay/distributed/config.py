"""Where the Ray workers run (the ``ray`` section), and the check that Ray is there."""

from __future__ import annotations

import socket
from importlib.util import find_spec

from pydantic import BaseModel, ConfigDict, Field


class RayConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)

    address: str | None = None
    """Address of a running Ray cluster to join (``auto``, ``ray://host:10001``, or
    ``host:6379``); None (unset) starts a private local Ray when workers are asked for."""
    num_cpus: int | None = Field(None, gt=0)
    """CPUs a private local Ray may use (default: one per rollout worker); ignored
    when joining a cluster, whose nodes declare their own."""
    worker_cpus: float = Field(1.0, gt=0, allow_inf_nan=False)
    """CPUs each rollout worker reserves (Ray's ``num_cpus`` of the actor)."""
    max_restarts: int = Field(3, ge=-1)
    """Times Ray restarts a worker that died (-1: always); its unfinished groups are
    played again."""


def check_room(cfg: RayConfig, workers: int) -> None:
    """Refuse a private local Ray too small for ``workers``: Ray keeps a worker it cannot
    place waiting, and the run hung without a word. A cluster's nodes declare their own
    CPUs (``num_cpus`` is ignored there)."""
    if cfg.address is not None or cfg.num_cpus is None or workers <= 0:
        return
    room = int(cfg.num_cpus // cfg.worker_cpus)
    if room < workers:
        raise ValueError(
            f"ray.num_cpus={cfg.num_cpus} holds {room} of {workers} rollout workers "
            f"reserving ray.worker_cpus={cfg.worker_cpus:g} each: raise ray.num_cpus, "
            "lower ray.worker_cpus or leave ray.num_cpus unset"
        )


REACH_TIMEOUT_S = 5.0
"""Seconds a cluster's address has to accept a connection before a run is refused."""


def check_reachable(address: str | None, *, timeout: float = REACH_TIMEOUT_S) -> None:
    """Refuse a cluster address where nothing accepts a connection (a ``ConnectionError``,
    one line): Ray retries it for minutes without a word (a mistyped port kept a run
    waiting over two minutes). ``auto`` and ``local`` are Ray's own to resolve, and an
    address without a numeric port is left to Ray's own error."""
    if address is None or address in ("auto", "local"):
        return
    host, colon, port = address.removeprefix("ray://").rpartition(":")
    if not colon or not port.isdigit() or not host:
        return
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=timeout).close()
    except OSError as err:
        reason = f"no answer in {timeout:g} s" if isinstance(err, TimeoutError) else err.strerror
        raise ConnectionError(
            f"ray.address={address}: nothing accepts a connection at {host}:{port} "
            f"({reason or type(err).__name__}); start the cluster there (ray start --head) "
            "or correct the address"
        ) from None


def require_ray(asked_by: str) -> None:
    """A one-line error naming the extra to install when Ray is missing."""
    if find_spec("ray") is None:
        raise ValueError(f"{asked_by} needs Ray, which is not installed: pip install 'coplay[ray]'")
