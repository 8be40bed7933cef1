"""A value model (critic) for estimators that read per-turn values, such as GAE.

The critic is a separate copy of the policy's transformer trunk with a scalar head
on the hidden state of the prompt's last token, as in PPO for language models
(Ouyang et al., 2022): sharing the trunk with the policy would let the value loss
pull on the policy's features. It sees exactly the prompt the policy saw, so in
shared-weight self-play the seat is known from the observation text. The head starts
at zero, so the first values are 0 and the first advantages are plain returns.

    critic = make_critic(policy, cfg.critic)
    fill_values(critic, episodes)                     # Turn.value for every turn
    metrics = critic_update(critic, turns, targets)   # regress on lambda-returns
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
from peft import PeftModel
from pydantic import BaseModel, ConfigDict, Field
from torch import nn

from coplay.models.devices import to_device
from coplay.models.lora import base_model_copy
from coplay.policies.lm import LMPolicy
from coplay.policies.prefixes import left_pad
from coplay.train.learner import disable_dropout
from coplay.train.micro import auto_budget, prompt_passes
from coplay.types import Episode, Turn


class CriticConfig(BaseModel):
    """Value-model settings; used only when the estimator needs values (``gae``)."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)

    lr: float = Field(1e-3, gt=0.0, allow_inf_nan=False)
    """Adam learning rate of the value model, scaled at each update by the policy's
    schedule (``optim.lr_schedule`` and ``optim.warmup_updates``)."""
    clip: float | None = Field(None, gt=0.0)
    """PPO value clipping: the new value may move at most this far from the value
    recorded at rollout (None: no clipping)."""
    max_grad_norm: float = Field(1.0, gt=0.0)
    """Gradient clipping threshold of the value model."""
    batch_size: int = Field(256, gt=0)
    """Turns per value-model step (it takes as many passes as the policy's epochs)."""
    micro_batch_tokens: int | None = Field(None, gt=0)
    """Most padded tokens per forward/backward pass of the value model, each distinct
    prompt counted once (None: what fits the learner's activation budget by the model's
    size, ``coplay.train.micro.auto_budget``); a step's gradients add up over its passes."""


class ValueModel(nn.Module):
    """Transformer trunk plus a linear head on the last token's hidden state."""

    def __init__(self, trunk: nn.Module, hidden_size: int) -> None:
        super().__init__()
        self.trunk = trunk
        self.head = nn.Linear(hidden_size, 1)
        nn.init.zeros_(self.head.weight)
        nn.init.zeros_(self.head.bias)

    def forward(self, ids: torch.Tensor, attn: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
        """Values of left-padded prompts, shape (B,)."""
        hidden = self.trunk(input_ids=ids, attention_mask=attn, position_ids=pos).last_hidden_state
        return self.head(hidden[:, -1]).squeeze(-1)


@dataclass
class Critic:
    """The value model, its optimizer, and the policy whose prompts it reads."""

    model: ValueModel
    optimizer: torch.optim.Optimizer
    policy: LMPolicy
    cfg: CriticConfig
    tokens: int
    """Padded tokens per pass (``CriticConfig.micro_batch_tokens``, resolved)."""


def make_critic(policy: LMPolicy, cfg: CriticConfig) -> Critic:
    """A value model initialised from a copy of the policy's trunk."""
    trunk = _trunk(policy.model)
    # A LoRA role's trunk is rebuilt from the config, its dropout back on: it would
    # regress in training mode on values read in eval mode.
    disable_dropout(trunk)
    model = ValueModel(trunk, policy.model.config.hidden_size).to(policy.device)
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=0.0)
    tokens = cfg.micro_batch_tokens or auto_budget(policy.model.config)
    return Critic(model=model, optimizer=opt, policy=policy, cfg=cfg, tokens=tokens)


def _trunk(model: nn.Module) -> nn.Module:
    """A copy of ``model``'s transformer trunk. A LoRA role's model is the peft model
    every role shares: its trunk is the plain base (each adapter starts at zero, so the
    base is the role's policy), not the peft wrapper, whose call runs the whole causal
    model, nor the adapter layers, which belong to the roles."""
    if isinstance(model, PeftModel):
        inner = model.get_base_model()
        return base_model_copy(model).to(inner.dtype).base_model
    return copy.deepcopy(model.base_model)


def _values(critic: Critic, prompts: Sequence[tuple[int, ...]]) -> torch.Tensor:
    """Values of ``prompts``, shape (B,): each distinct prompt run once (a small game's
    turns repeat a few states), read for every copy."""
    index: dict[tuple[int, ...], int] = {}
    inverse = [index.setdefault(p, len(index)) for p in prompts]
    pad = critic.policy.tokenizer.pad_token_id or 0
    ids, attn, pos = (x.to(critic.policy.device) for x in left_pad(list(index), pad))
    values = critic.model(ids, attn, pos)
    if len(index) == len(prompts):
        return values
    return values[torch.tensor(inverse, device=values.device)]


def _prompts(critic: Critic, turns: Sequence[Turn]) -> list[tuple[int, ...]]:
    return [tuple(critic.policy.prompt_ids(t.observation)) for t in turns]


@torch.no_grad()
def fill_values(critic: Critic, episodes: Sequence[Episode]) -> None:
    """Write the critic's value onto ``Turn.value`` for every turn of every episode,
    in passes within the critic's token budget."""
    turns = [t for ep in episodes for traj in ep.trajectories for t in traj.turns]
    prompts = _prompts(critic, turns)
    critic.model.eval()
    for rows in prompt_passes(prompts, tokens=critic.tokens):
        values = _values(critic, [prompts[i] for i in rows]).tolist()
        for i, v in zip(rows, values, strict=True):
            turns[i].value = float(v)


def value_loss(
    values: torch.Tensor, old: torch.Tensor, targets: torch.Tensor, clip: float | None
) -> torch.Tensor:
    """``0.5 * mean((V - R)^2)``; with ``clip``, PPO's pessimistic clipped form
    ``0.5 * mean(max((V - R)^2, (old + clamp(V - old, -c, c) - R)^2))``."""
    err = (values - targets) ** 2
    if clip is not None:
        clipped = old + (values - old).clamp(-clip, clip)
        err = torch.maximum(err, (clipped - targets) ** 2)
    return 0.5 * err.mean()


def critic_update(
    critic: Critic,
    turns: Sequence[Turn],
    targets: Sequence[float],
    rng: np.random.Generator,
    *,
    epochs: int = 1,
    lr_scale: float = 1.0,
) -> dict[str, float]:
    """Regress the values of ``turns`` (recorded in ``Turn.value``) on ``targets`` at
    ``CriticConfig.lr`` times ``lr_scale`` (the policy's schedule at this update)."""
    if not turns:
        return {}
    if len(turns) != len(targets):
        raise ValueError(f"{len(turns)} turns but {len(targets)} value targets")
    device = critic.policy.device
    old_all = to_device(torch.tensor([t.value for t in turns], dtype=torch.float32), device)
    tgt_all = to_device(torch.tensor(targets, dtype=torch.float32), device)
    prompts = _prompts(critic, turns)
    losses = []
    lr = critic.cfg.lr * lr_scale
    for group in critic.optimizer.param_groups:
        group["lr"] = lr
    critic.model.train()
    for _ in range(epochs):
        order = rng.permutation(len(turns))
        for start in range(0, len(turns), critic.cfg.batch_size):
            idx = order[start : start + critic.cfg.batch_size]
            critic.optimizer.zero_grad(set_to_none=True)
            step = 0.0
            # The step's mean loss as a sum of its passes' shares: gradients add up.
            for rows in prompt_passes([prompts[i] for i in idx], tokens=critic.tokens):
                part = idx[rows]
                values = _values(critic, [prompts[i] for i in part])
                index = to_device(torch.as_tensor(part), device)
                loss = value_loss(values, old_all[index], tgt_all[index], critic.cfg.clip)
                loss = loss * (len(part) / len(idx))
                loss.backward()
                step += float(loss.detach())
            torch.nn.utils.clip_grad_norm_(critic.model.parameters(), critic.cfg.max_grad_norm)
            critic.optimizer.step()
            losses.append(step)
    critic.model.eval()
    return {
        "critic/loss": float(np.mean(losses)),
        "critic/steps": float(len(losses)),
        "critic/lr": lr,
    }
