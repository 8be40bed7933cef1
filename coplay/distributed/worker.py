"""A rollout worker: a Ray actor that plays whole groups with its own policies, and
samples a text policy's answers for its sampled evaluation (``tally``).

The driver ships each policy once, as the object it is (a language model with its
weights, a frozen snapshot, a scripted bot), and after every update only the new
weights, by version, through Ray's object store (``Shipment``). A worker keeps what
it was sent and fetches only what is newer; a worker that Ray restarted after a crash
starts empty and fetches everything again from the same shipments, so a replayed
task needs nothing but its arguments.

Workers reserve CPUs only, and Ray hides the GPUs from such an actor. A learner on a
GPU therefore ships its policy and weights with every tensor on the CPU (``for_workers``,
``cpu_weights``): a CUDA tensor cannot even be unpickled where CUDA is not visible.
"""

from __future__ import annotations

import io
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import ray
import torch
from ray import cloudpickle  # Ray's own: what its object store pickles with

from coplay.backends.memory import keep_freed_memory
from coplay.envs.gameref import GameRef
from coplay.eval.sampled import Tally, sample_tallies
from coplay.rollout.invalid import InvalidActionConfig
from coplay.rollout.source import LocalSource, Plan
from coplay.types import Episode, Observation, Policy


@dataclass(frozen=True)
class Shipment:
    """How a worker gets one policy id at one version."""

    token: int
    """Which driver-side object the id names (random: a new object, a new token)."""
    version: int
    """The version to play at."""
    policy: Any
    """Object ref of the policy as the driver first shipped it."""
    weights: Any | None
    """Object ref of the weights at ``version`` where it differs from the shipped
    policy's own, else None."""


@dataclass(frozen=True)
class Packed:
    """A policy saved by ``torch.save``, so that a worker loads every tensor onto its CPU
    wherever the driver held it (``map_location``)."""

    data: bytes

    def load(self) -> Any:
        return torch.load(io.BytesIO(self.data), map_location="cpu", weights_only=False)


def off_cpu(model: torch.nn.Module | None) -> bool:
    """Whether ``model`` holds a parameter or buffer on another device than the CPU."""
    if model is None:
        return False
    return any(t.device.type != "cpu" for t in (*model.parameters(), *model.buffers()))


def for_workers(policy: Any) -> Any:
    """What to ship as ``policy``: the object itself where its model (if any) is on the
    CPU, else the object ``Packed``, every tensor to be loaded onto a worker's CPU. The
    driver's own copy stays where it is: ``torch.save`` reads each tensor to the host."""
    if not off_cpu(getattr(policy, "model", None)):
        return policy
    buf = io.BytesIO()
    torch.save(policy, buf, pickle_module=cloudpickle)
    return Packed(buf.getvalue())


def cpu_weights(state_dict: Mapping[str, torch.Tensor]) -> Mapping[str, torch.Tensor]:
    """``state_dict`` with every tensor on the CPU (the same dict where they are)."""
    if all(t.device.type == "cpu" for t in state_dict.values()):
        return state_dict
    return {k: t.detach().to("cpu") for k, t in state_dict.items()}


class RolloutWorker:
    """Plays sub-plans of whole groups with the batched engine of its process."""

    def __init__(
        self, game: GameRef, invalid: InvalidActionConfig | None, max_turns: int | None
    ) -> None:
        torch.set_num_threads(1)  # one core per worker: Ray reserves one for it
        # This process runs the model's passes; its backends arrive unpickled, which
        # skips the constructor that would otherwise apply the settings.
        keep_freed_memory()
        self.source = LocalSource(game, invalid=invalid, max_turns=max_turns)
        self.policies: dict[str, Policy] = {}
        self.tokens: dict[str, int] = {}

    def play(self, plan: Plan, shipments: Mapping[str, Shipment]) -> tuple[Episode, ...]:
        """The plan's episodes, in its order, played at the shipped versions."""
        for pid in plan.policy_ids:
            self._receive(pid, shipments[pid])
        policies = {pid: self.policies[pid] for pid in plan.policy_ids}
        return self.source.play(plan, policies).episodes

    def tally(
        self,
        pid: str,
        shipment: Shipment,
        observations: Sequence[Observation],
        k: int,
        seed: int,
    ) -> list[Tally]:
        """``sample_tallies`` of the shipped policy at ``observations`` (whole chunks of
        the driver's list): what the driver would sample there itself."""
        self._receive(pid, shipment)
        return sample_tallies(self.policies[pid], observations, k=k, seed=seed)

    def _receive(self, pid: str, shipment: Shipment) -> None:
        policy = self.policies.get(pid)
        stale = policy is not None and getattr(policy, "version", 0) != shipment.version
        if policy is None or self.tokens[pid] != shipment.token or (stale and not shipment.weights):
            policy = ray.get(shipment.policy)
            policy = self.policies[pid] = policy.load() if isinstance(policy, Packed) else policy
            self.tokens[pid] = shipment.token
        if getattr(policy, "version", 0) != shipment.version:
            policy.backend.load_weights(ray.get(shipment.weights), shipment.version)

    def pid(self) -> int:
        """Its process id (a test kills it)."""
        return os.getpid()

    def node_id(self) -> str:
        """The Ray node it runs on."""
        return ray.get_runtime_context().get_node_id()
