"""One base model, one LoRA adapter per role (peft), all in one process.

``attach_roles`` wraps a policy's model in a ``peft`` model holding one adapter per
role and returns one policy *view* per role. A view is an ``LMPolicy`` over the shared
model that activates its own adapter before every ``act`` and ``action_probs``, and
whose ``scorer`` activates it around every ``score``, so two roles cost one copy of
the base weights plus two small adapters.

Batching: the rollout engine groups pending observations by policy object, and each
role is a different view, so the decisions of different roles are never mixed in one
forward pass: each role's batch is one forward pass with its adapter active (peft
applies one active adapter to a whole batch). Calls run one after the other in one
thread, so switching the active adapter between them is safe.

Training: the base is frozen (peft sets ``requires_grad=False`` on it); each role has
its own optimizer over its own adapter's weights only
(``coplay.train.learner.make_adapter_learner``), so
one role's update never moves another role's weights, and each role may have its own
learning rate and schedule. Every adapter starts with ``lora_B = 0``, i.e. exactly as
the base model, which is also why the base (adapters disabled) is the KL reference.

Saving: ``save_roles`` writes the base as a plain checkpoint folder (``base/``) and
each adapter with peft's ``save_pretrained`` next to it (``<role>/``);
``load_roles`` reads them back, each adapter's files checked first
(``coplay.models.adapter_folder``).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import replace
from itertools import pairwise
from pathlib import Path

import torch
from peft import LoraConfig, PeftModel, get_peft_model
from pydantic import BaseModel, ConfigDict, Field
from transformers import AutoModelForCausalLM

from coplay.models.adapter_folder import load_adapter
from coplay.models.loading import PlayedGame, load_policy, read_meta, save_policy, write_meta
from coplay.policies.lm import LMPolicy
from coplay.policies.scorer import Scorer
from coplay.types import Decision, Observation

LLAMA_PROJECTIONS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
"""Attention and MLP projections of Llama-style models (the tiny model and most
local checkpoints)."""

BASE = "base"
"""The folder of the shared base model, beside one folder per role."""

RESERVED_ROLES = {
    BASE: "the folder of the shared base model",
    "default": "peft saves the adapter of that name outside a folder of its own",
}
"""Role names that would collide with the saved layout, and why."""


class LoraSettings(BaseModel):
    """Shape of every role's LoRA adapter."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)

    rank: int = Field(8, gt=0)
    """Rank r of each low-rank update B @ A."""
    alpha: float = Field(16.0, gt=0.0)
    """Scale of the update is alpha / rank."""
    dropout: float = Field(0.0, ge=0.0, lt=1.0)
    """Dropout on the adapter input; keep 0 so sampled and recomputed log-probs agree."""
    targets: tuple[str, ...] = LLAMA_PROJECTIONS
    """Names of the linear modules that get an adapter."""


def peft_config(cfg: LoraSettings) -> LoraConfig:
    """The peft `LoraConfig` of these settings; the trainer and `coplay sft` both wrap with it."""
    return LoraConfig(
        r=cfg.rank,
        lora_alpha=cfg.alpha,
        lora_dropout=cfg.dropout,
        target_modules=list(cfg.targets),
        task_type="CAUSAL_LM",
    )


PEFT_PARTS = frozenset(
    {"base_model", "base_layer", "lora_A", "lora_B", "lora_embedding_A", "lora_embedding_B"}
    | {"lora_magnitude_vector", "lora_dropout"}
)
"""The parts peft adds to a wrapped model's parameter names."""


def name_parts(model: torch.nn.Module) -> frozenset[str]:
    """Every dot-separated part of ``model``'s parameter and buffer names (``model``,
    ``layers``, ``0``, ``mlp``, ``weight``...), and the parts peft adds to them."""
    names = [n for n, _ in model.named_parameters()] + [n for n, _ in model.named_buffers()]
    return frozenset(part for name in names for part in name.split(".")) | PEFT_PARTS


def check_role_names(roles: Sequence[str], parts: frozenset[str] = frozenset()) -> None:
    """Roles must be distinct, non-empty, not pieces of peft's ``lora_`` prefix (peft
    would confuse such adapter names with its own parameter names), one folder name
    each (no dot or slash), and none of ``RESERVED_ROLES``; with the model's
    ``name_parts``, none of them either: saving one adapter, peft drops every key
    with another adapter's name as a part, so a role named ``0`` or ``mlp`` would take
    a layer's or every MLP's weights out of the other roles' files."""
    if not roles:
        raise ValueError("attach_roles needs at least one role")
    if len(set(roles)) != len(roles):
        raise ValueError(f"role names must be distinct, got {list(roles)}")
    bad = [r for r in roles if not r or r in "lora_" or any(c in r for c in "./\\")]
    if bad:
        raise ValueError(
            f"role name {bad[0]!r} cannot name an adapter "
            "(empty, a dot or slash, or part of 'lora_')"
        )
    reserved = [r for r in roles if r in RESERVED_ROLES]
    if reserved:
        name = reserved[0]
        raise ValueError(
            f"role name {name!r} is reserved ({RESERVED_ROLES[name]}); rename the role"
        )
    clash = [r for r in roles if r in parts]
    if clash:
        raise ValueError(
            f"role name {clash[0]!r} is also a part of the model's parameter names, which "
            "peft would cut out of the other roles' saved adapters; rename the role"
        )


class AdapterPolicy(LMPolicy):
    """A role's view of a shared peft model: activates ``adapter`` before every call."""

    def __init__(
        self, model: PeftModel, tokenizer, *, adapter: str, trainable: bool = True, **kwargs
    ) -> None:
        super().__init__(model, tokenizer, **kwargs)
        self.adapter = adapter
        self.trainable = trainable

    def activate(self) -> None:
        """Make this role's adapter the active one; peft also makes it the only adapter
        with gradients (or none, for a view loaded for inference)."""
        if self.model.active_adapter != self.adapter:
            self.model.set_adapter(self.adapter, inference_mode=not self.trainable)

    def act(self, observations: Sequence[Observation]) -> list[Decision]:
        self.activate()
        return super().act(observations)

    def act_streamed(self, observations: Sequence[Observation], streams) -> list[Decision]:
        self.activate()
        return super().act_streamed(observations, streams)

    def submit(self, observations: Sequence[Observation], streams=None):
        self.activate()  # the pass is queued with this role's adapter
        return super().submit(observations, streams)

    def act_forced(
        self, observations: Sequence[Observation], indices: Sequence[int]
    ) -> list[Decision]:
        self.activate()
        return super().act_forced(observations, indices)

    def action_probs(self, observations: Sequence[Observation]) -> list[dict[str, float]]:
        self.activate()
        return super().action_probs(observations)

    @property
    def scorer(self) -> Scorer:
        """Scores with this role's adapter active."""
        return replace(super().scorer, context=self._active)

    @contextmanager
    def _active(self) -> Iterator[None]:
        self.activate()
        yield

    def adapter_parameters(self) -> list[torch.nn.Parameter]:
        """This role's adapter weights (and nothing of the base or other roles): peft
        keeps each adapter under its name as the key of a ``lora_*`` module dict
        (``...q_proj.lora_A.<role>.weight``); the role's name elsewhere in a parameter's
        name (a layer index, ``model``) is no match."""
        return [p for n, p in self.model.named_parameters() if self._is_mine(n.split("."))]

    def _is_mine(self, parts: list[str]) -> bool:
        return any(a.startswith("lora_") and b == self.adapter for a, b in pairwise(parts))


class BaseView(LMPolicy):
    """The shared base with every adapter disabled: the policy all roles start from."""

    def act(self, observations: Sequence[Observation]) -> list[Decision]:
        with self.model.disable_adapter():
            return super().act(observations)

    def act_streamed(self, observations: Sequence[Observation], streams) -> list[Decision]:
        with self.model.disable_adapter():
            return super().act_streamed(observations, streams)

    def submit(self, observations: Sequence[Observation], streams=None):
        with self.model.disable_adapter():  # the pass is queued without adapters
            return super().submit(observations, streams)

    def act_forced(
        self, observations: Sequence[Observation], indices: Sequence[int]
    ) -> list[Decision]:
        with self.model.disable_adapter():
            return super().act_forced(observations, indices)

    @property
    def scorer(self) -> Scorer:
        """Scores with every adapter disabled."""
        return replace(super().scorer, context=self.model.disable_adapter)

    def action_probs(self, observations: Sequence[Observation]) -> list[dict[str, float]]:
        with self.model.disable_adapter():
            return super().action_probs(observations)


def _view(
    policy: LMPolicy, model: PeftModel, role: str, seed: int, *, trainable: bool = True
) -> AdapterPolicy:
    return AdapterPolicy(
        model,
        policy.tokenizer,
        adapter=role,
        trainable=trainable,
        policy_id=role,
        seed=seed,
        backend=policy.backend_name,
        engine=policy.engine,
        **policy.play_settings,
    )


def attach_roles(
    policy: LMPolicy, roles: Sequence[str], cfg: LoraSettings, *, seed: int = 0
) -> dict[str, AdapterPolicy]:
    """Wrap ``policy.model`` (modified in place) with one adapter per role; one view each.

    Each view's ``policy_id`` is its role name; view ``i`` samples with seed ``seed + i``.
    """
    if isinstance(policy.model, PeftModel):
        raise ValueError("the policy's model already carries adapters; attach roles to a base")
    check_role_names(roles, name_parts(policy.model))
    peft_cfg = peft_config(cfg)
    model = get_peft_model(policy.model, peft_cfg, adapter_name=roles[0])
    for role in roles[1:]:
        model.add_adapter(role, peft_cfg)
    model.eval()
    return {role: _view(policy, model, role, seed + i) for i, role in enumerate(roles)}


def base_view(view: AdapterPolicy) -> BaseView:
    """The shared base of a role view, adapters disabled (a KL reference for free)."""
    return BaseView(view.model, view.tokenizer, policy_id=BASE, **view.play_settings)


def base_model_copy(model: PeftModel) -> torch.nn.Module:
    """A plain (adapter-free) copy of the shared base, for saving as a checkpoint."""
    inner = model.get_base_model()
    state = {
        k.replace(".base_layer.", "."): v for k, v in inner.state_dict().items() if "lora_" not in k
    }
    plain = AutoModelForCausalLM.from_config(inner.config)
    plain.load_state_dict(state)
    return plain


def save_roles(
    views: dict[str, AdapterPolicy], folder: str | Path, *, game: PlayedGame | None = None
) -> Path:
    """Write ``folder/base`` (a plain checkpoint) and ``folder/<role>`` (peft adapters).

    The base's record lists the roles (``lora_roles``): it is the untrained start of
    every role, which ``coplay eval`` will not score by mistake. Each adapter folder
    gets a record too (its role, the game), so it can be evaluated on its own."""
    if not views:
        raise ValueError("save_roles needs at least one role view")
    folder = Path(folder)
    first = next(iter(views.values()))
    base = LMPolicy(
        base_model_copy(first.model), first.tokenizer, policy_id=BASE, **first.play_settings
    )
    save_policy(base, folder / BASE, game=game)
    meta = read_meta(folder / BASE)
    write_meta(folder / BASE, meta | {"lora_roles": list(views)})
    first.model.save_pretrained(folder, selected_adapters=list(views))
    for role, view in views.items():  # the base's record is version 0: each role its own
        write_meta(folder / role, meta | {"policy_id": role, "role": role, "version": view.version})
    return folder


def load_roles(
    folder: str | Path, roles: Sequence[str], *, trainable: bool = False, seed: int = 0
) -> dict[str, AdapterPolicy]:
    """Views of the roles saved by ``save_roles`` in ``folder``, on one base model."""
    check_role_names(roles)
    folder = Path(folder)
    missing = [r for r in roles if not (folder / r / "adapter_config.json").is_file()]
    if missing:
        raise FileNotFoundError(f"no adapter for role {missing[0]!r} in {folder}")
    base = load_policy(folder / BASE, seed=seed)
    check_role_names(roles, name_parts(base.model))  # such a role's adapters were cut
    model = base.model
    for role in roles:
        model = load_adapter(model, folder / role, role, trainable=trainable)
    model.eval()
    views = {
        role: _view(base, model, role, seed + i, trainable=trainable)
        for i, role in enumerate(roles)
    }
    for role, view in views.items():  # each role's updates so far, as load_policy's
        view.version = int(read_meta(folder / role).get("version", 0))
    return views
