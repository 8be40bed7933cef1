"""Roster files: which policy sits in which seat, validated with one-line errors.

A roster names its policies and gives each a kind: ``learner`` (trainable, with its
own optimisation, estimator and loss settings), ``frozen`` (a checkpoint, never
updated) or ``bot`` (a scripted player). ``seats`` gives the policy of every seat, as
a list (seat -> name) or a mapping (name -> seats). ``coplay/train/roster.py`` builds
and trains what a ``RosterConfig`` describes.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SerializeAsAny,
    ValidationError,
    field_validator,
    model_validator,
)

from coplay.algos.losses.compose import LossConfig
from coplay.models.lora import LoraSettings, check_role_names
from coplay.population.opponents import SCRIPTED_NAMES
from coplay.train.config import AlgoConfig, ConfigError, OptimConfig
from coplay.train.config_errors import (
    format_validation_error,
    refuse_bool_numbers,
    refuse_huge_numbers,
)
from coplay.train.parts.sections import open_loss
from coplay.train.settings import load_yaml


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)


class LearnerEntry(_Strict):
    """A trainable language model; unset settings fall back to the run config's."""

    kind: Literal["learner"]
    init: str | None = None
    """Checkpoint to start from (its weights and tokenizer, played as the run's model
    section says: device, mode, sampling, text); None starts from the run's model
    (model.path or tiny)."""
    optim: OptimConfig | None = None
    """This learner's optimiser settings (lr, epochs, minibatch ...)."""
    algo: AlgoConfig | None = None
    """This learner's advantage estimator and sample filters."""
    loss: SerializeAsAny[LossConfig] | None = None
    """This learner's loss terms (registered terms too, as in the run's loss)."""

    @field_validator("loss", mode="before")
    @classmethod
    def _open_loss(cls, value: Any) -> Any:
        return open_loss(LossConfig).model_validate(value) if isinstance(value, dict) else value


class FrozenEntry(_Strict):
    """A saved checkpoint that plays but never learns."""

    kind: Literal["frozen"]
    path: str
    """Checkpoint folder or run directory."""

    @field_validator("path")
    @classmethod
    def _exists(cls, path: str) -> str:
        if not Path(path).exists():
            raise ValueError(f"frozen checkpoint {path!r} does not exist")
        return path


class BotEntry(_Strict):
    """A scripted player."""

    kind: Literal["bot"]
    name: str
    """One of the scripted players (random, nash, perfect, optimal)."""

    @field_validator("name")
    @classmethod
    def _known(cls, name: str) -> str:
        if name not in SCRIPTED_NAMES:
            raise ValueError(f"unknown bot {name!r}; bots: {', '.join(SCRIPTED_NAMES)}")
        return name


Entry = Annotated[LearnerEntry | FrozenEntry | BotEntry, Field(discriminator="kind")]


class RosterConfig(_Strict):
    """Policies by name, the policy of every seat, and how seats rotate."""

    policies: dict[str, Entry]
    """Policy name -> entry; the name is also the policy id in episodes."""
    seats: list[str]
    """Policy name per seat, or a mapping policy name -> list of seats."""
    rotate: bool = False
    """Shift the assignment by one seat per episode group (symmetric games)."""
    lora: LoraSettings | None = None
    """When set, learners are LoRA adapters on one shared, frozen base model."""

    @field_validator("seats", mode="before")
    @classmethod
    def _seats_from_roles(cls, seats: Any) -> Any:
        return seats_from_roles(seats) if isinstance(seats, dict) else seats

    @model_validator(mode="after")
    def _consistent(self) -> RosterConfig:
        check_roster(self)
        return self

    @property
    def learners(self) -> list[str]:
        return [n for n, e in self.policies.items() if isinstance(e, LearnerEntry)]


def seats_from_roles(roles: dict[str, Sequence[int]]) -> list[str]:
    """``{"a": [0, 2], "b": [1]}`` -> ``["a", "b", "a"]``; every seat exactly once."""
    owner: dict[int, str] = {}
    for name, seats in roles.items():
        for s in seats if isinstance(seats, list | tuple) else [seats]:
            if not isinstance(s, int) or isinstance(s, bool) or s < 0:
                raise ValueError(f"seat {s!r} of policy {name!r} is not a seat index >= 0")
            if s in owner:
                raise ValueError(f"seat {s} is assigned twice ({owner[s]!r} and {name!r})")
            owner[s] = name
    for s in range(len(owner)):
        if s not in owner:
            raise ValueError(f"seat {s} is not assigned (seats are numbered from 0)")
    return [owner[s] for s in range(len(owner))]


def check_roster(cfg: RosterConfig) -> None:
    """Every seat names a known policy, every policy is seated, learners can train."""
    if not cfg.seats:
        raise ValueError("seats is empty; give the policy of every seat")
    for seat, name in enumerate(cfg.seats):
        if name not in cfg.policies:
            known = ", ".join(cfg.policies) or "none"
            raise ValueError(f"seat {seat} names unknown policy {name!r}; policies: {known}")
    for name, entry in cfg.policies.items():
        if name not in cfg.seats:
            raise ValueError(f"{entry.kind} {name!r} is listed but never seated")
    if not cfg.learners:
        raise ValueError("the roster has no policy of kind 'learner'; nothing would train")
    if cfg.lora is not None:
        check_role_names(cfg.learners)
        with_init = [n for n in cfg.learners if cfg.policies[n].init]
        if with_init:
            raise ValueError(
                f"learner {with_init[0]!r} sets init, but LoRA learners share the run's base"
            )


def validate_roster(data: dict[str, Any]) -> RosterConfig:
    """A ``RosterConfig`` from a raw mapping; errors are one line (``ConfigError``)."""
    refuse_huge_numbers(data, "roster")
    try:
        cfg = RosterConfig.model_validate(data)
    except ValidationError as err:
        raise ConfigError(
            format_validation_error(err, data).replace("config", "roster", 1)
        ) from None
    refuse_bool_numbers(data, cfg, "roster")
    return cfg


def load_roster(path: str | Path) -> RosterConfig:
    """A roster from a YAML file."""
    return validate_roster(load_yaml(path, "roster file"))
