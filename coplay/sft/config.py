"""``coplay sft``'s settings: the ``sft`` section, beside the run config it reads.

``build_sft_config`` reads a preset, a file and overrides as ``coplay train`` does;
``sft.*`` keys go to ``SftSettings``, the rest to the run config. Of the run config's
``optim`` section SFT applies how an update runs (``OPTIM_APPLIED``: activation
checkpointing, the fused AdamW step, vocabulary gradients in place); its rates, epochs
and batch sizes are ``coplay train``'s (a preset's are for the RL that follows),
refused as overrides and left out of config.yaml.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from coplay.models.lora import LoraSettings
from coplay.train.config import ConfigError, RunConfig
from coplay.train.config_errors import format_validation_error, refuse_bool_numbers
from coplay.train.settings import (
    apply_override,
    load_preset,
    load_yaml,
    merge,
    parse_override,
    split_override,
    validate,
    warn_ignored,
)

SECTION = "sft"
"""The config section (and override prefix, ``sft.epochs=3``) of these settings."""


class SftSettings(BaseModel):
    """How the fine-tuning runs (the model and game come from the run config)."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)

    epochs: int = Field(3, gt=0)
    """Passes over the dataset."""
    batch_size: int = Field(8, gt=0)
    """Conversations per optimizer step."""
    # Finite: ``gt`` refuses NaN but not inf, which would train on NaN.
    lr: float = Field(1e-3, gt=0.0, allow_inf_nan=False)
    """AdamW learning rate (1e-3 suits the tiny model; real checkpoints want ~1e-5)."""
    weight_decay: float = Field(0.0, ge=0.0, allow_inf_nan=False)
    """AdamW weight decay."""
    max_grad_norm: float = Field(1.0, gt=0.0, allow_inf_nan=False)
    """Gradient clipping threshold."""
    max_tokens: int | None = Field(None, gt=0)
    """Longest conversation in tokens (default: the model's context length); a longer
    one is an error naming its line. At most the model's positions where they are a
    learned table (GPT-2's)."""
    micro_batch_tokens: int | None = Field(None, gt=0)
    """Padded tokens per forward and backward pass, a trained position weighing its
    vocabulary-wide rows (default: what fits the RL learner's activation budget at
    this model's size, ``coplay.train.micro``). A step's conversations are cut into
    such passes and their gradients added, so it changes no result beyond rounding."""
    lora: LoraSettings | None = None
    """None: full fine-tuning; a section (``sft.lora={}`` for the defaults) trains a
    LoRA adapter, merged into the saved checkpoint."""


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid")
    sft: SftSettings


@dataclass(frozen=True)
class SftConfig:
    run: RunConfig
    """Game (tokenizer corpus, the game the checkpoint records), model and seed."""
    sft: SftSettings


def build_sft_config(
    *, preset: str | None, file: str | Path | None, overrides: Sequence[str] = ()
) -> SftConfig:
    """Preset, file, then overrides; ``sft.*`` keys go to ``SftSettings``, the rest to
    the run config (validated as ``coplay train`` validates it)."""
    data: dict[str, Any] = load_preset(preset) if preset else {}
    given = [load_yaml(file)] if file else []  # what a setting the run ignores is said of
    if given:
        data = merge(data, given[0])
    # SFT teaches a model to write: its checkpoint plays in text mode (whatever the
    # preset, which is about choice-mode RL) unless an override says otherwise, and
    # the tiny model gets the text path's tokenizer and chat template.
    data = apply_override(data, "model.mode=text")
    for item in overrides:
        data = apply_override(data, item)
    section = {SECTION: data.pop(SECTION, None) or {}}
    try:  # validated under its section's name, so errors read ``sft.epochs: ...``
        sft = _Section.model_validate(section)
    except ValidationError as err:
        raise ConfigError(format_validation_error(err)) from None
    # As in the run config: pydantic reads ``sft.epochs=true`` as 1.
    refuse_bool_numbers(section, sft)
    run = validate(data)
    warn_ignored(run, [*given, *map(parse_override, overrides)])
    refuse_optim_overrides(overrides)
    return SftConfig(run=run, sft=sft.sft)


OPTIM_APPLIED = ("fused", "activation_checkpointing", "vocab_grads_in_place")
"""The ``optim`` keys SFT applies: how an update runs, the same in either trainer."""
SFT_INSTEAD = {
    "lr": "pass sft.lr instead",
    "weight_decay": "pass sft.weight_decay instead",
    "max_grad_norm": "pass sft.max_grad_norm instead",
    "epochs": "pass sft.epochs instead",
    "minibatch_size": "pass sft.batch_size instead",
    "micro_batch_size": "pass sft.micro_batch_tokens instead",
    "micro_batch_tokens": "pass sft.micro_batch_tokens instead",
    "lr_schedule": "coplay sft keeps sft.lr constant; leave it out",
    "final_lr_frac": "coplay sft keeps sft.lr constant; leave it out",
    "warmup_updates": "coplay sft keeps sft.lr constant; leave it out",
}
"""What to set instead of each other ``optim`` key on the ``coplay sft`` command line."""


def refuse_optim_overrides(overrides: Sequence[str]) -> None:
    """Refuse an override of an ``optim`` key SFT does not apply: it was recorded in
    config.yaml and ignored. A preset's or file's are left alone: they are the recipe
    of the ``coplay train`` that follows, as kuhn-text's ``optim.lr`` is."""
    for item in overrides:
        parts, value = split_override(item)
        if parts[0] != "optim":
            continue
        keys = parts[1:2] or (list(value) if isinstance(value, dict) else [])
        for key in keys:
            if key not in OPTIM_APPLIED:
                advice = SFT_INSTEAD.get(key, "leave it out")
                raise ConfigError(
                    f"optim.{key} is a coplay train setting that coplay sft does not read; {advice}"
                )
