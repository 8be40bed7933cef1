"""PSRO's members: the first one made for a new run, and every one reloaded on resume."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from coplay.envs.probe import resolve_factory
from coplay.models.build import build_policy
from coplay.policies.scripted import RandomPolicy, TablePolicy
from coplay.population.metagame import freeze, reload_frozen
from coplay.population.oracles import member_folder
from coplay.train.trainer import game_text
from coplay.types import Policy

if TYPE_CHECKING:
    from coplay.population.psro_config import PsroConfig


@dataclass(frozen=True)
class InitialMember:
    """How PSRO's first member is made for a new run, and made again on resume."""

    build: Callable[[PsroConfig, Path], Policy]
    """Member 0 of a run in ``out`` (saved under ``out/members/00`` where it has weights)."""
    reload: Callable[[PsroConfig, Path], Policy]
    """The same member again when the run in ``out`` resumes."""


def _random_member(cfg: PsroConfig, out: Path) -> Policy:
    return RandomPolicy(seed=cfg.run.train.seed, policy_id="psro:00")


def _lm_member(cfg: PsroConfig, out: Path) -> Policy:
    """The untrained tiny/local LM of ``cfg.run``, frozen under ``out/members/00``."""
    seed, game = cfg.run.train.seed, cfg.run.game
    text = game_text(resolve_factory(game.name, game.params), seed=seed)
    policy = build_policy(cfg.run.model, corpus=text.texts, actions=text.actions, seed=seed)
    return freeze(policy, member_folder(out, 0), "psro:00", seed=seed, game=game.played())


def _reload_lm_member(cfg: PsroConfig, out: Path) -> Policy:
    return reload_frozen(
        member_folder(out, 0), "psro:00", seed=cfg.run.train.seed, device=cfg.run.model.device
    )


INITIAL_MEMBERS: dict[str, InitialMember] = {
    "lm": InitialMember(build=_lm_member, reload=_reload_lm_member),
    "random": InitialMember(build=_random_member, reload=_random_member),
}


def initial_member(cfg: PsroConfig, out: Path) -> Policy:
    """The first member, as ``cfg.initial`` names it."""
    return INITIAL_MEMBERS[cfg.initial].build(cfg, out)


def reload_member(cfg: PsroConfig, out: Path, index: int) -> Policy:
    """Member ``index`` as it joined: the first member as ``cfg.initial`` makes it
    again, an exact oracle's table, or a frozen LM reloaded from its folder with the
    seed ``freeze`` gave it."""
    if index == 0:
        return INITIAL_MEMBERS[cfg.initial].reload(cfg, out)
    name, folder = f"psro:{index:02d}", member_folder(out, index)
    if (folder / "table.json").is_file():
        return TablePolicy(json.loads((folder / "table.json").read_text()), policy_id=name)
    return reload_frozen(folder, name, seed=cfg.run.train.seed + index, device=cfg.run.model.device)
