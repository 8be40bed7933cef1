"""Rosters: which policy sits in which seat, and which of them learn.

A roster names its policies and gives each a kind: ``learner`` (trainable, with its
own optimisation, estimator and loss settings), ``frozen`` (a checkpoint, never
updated) or ``bot`` (a scripted player). Learning is declared by the kind, never
inferred. ``seats`` gives the policy of every seat, as a list (seat -> name) or a
mapping (name -> seats). Examples::

    shared-weight self-play   policies: {me: {kind: learner}}            seats: [me, me]
    one learner per role      policies: {first: {kind: learner}, second: {kind: learner}}
                              seats: [first, second]      lora: {rank: 8}  (adapters)
    against a fixed bot       policies: {me: {kind: learner}, nash: {kind: bot, name: nash}}
                              seats: [me, nash]           rotate: true

``rotate`` shifts the assignment by one seat per episode group (symmetric games), so
each policy plays every seat. A roster run is the one training loop with a ``Fixed``
seating and one ``Trainee`` per learner (its own estimator, loss parts and update);
planning parts (restarts, exploration) and the critic apply as in any run.
"""

from __future__ import annotations

import copy
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import torch
import yaml

from coplay.envs.gameref import GameRef
from coplay.models.build import build_policy
from coplay.models.loading import load_policy, save_policy
from coplay.models.lora import attach_roles, save_roles
from coplay.policies.lm import LMPolicy
from coplay.population.opponents import build_opponent
from coplay.report import atomic
from coplay.train.checkpoints import rundir
from coplay.train.config import ConfigError, RunConfig
from coplay.train.evaluate import SeatedPolicy, evaluate_roster
from coplay.train.hooks import Progress
from coplay.train.loop import Run
from coplay.train.parts.planning import planning_parts
from coplay.train.parts.seating import Fixed
from coplay.train.roster_config import (  # re-exported: the roster's public names live here
    BotEntry,
    FrozenEntry,
    LearnerEntry,
    RosterConfig,
    check_roster,
    load_roster,
    seats_from_roles,
    validate_roster,
)
from coplay.train.settings import merge, validate
from coplay.train.trainee import Trainee
from coplay.train.trainer import (
    LOGS,
    drive,
    eval_opponents,
    game_text,
    make_source,
    make_trainee,
    summarize,
    wants_exact,
)
from coplay.types import GameSpec, Policy

__all__ = [
    "BotEntry",
    "FrozenEntry",
    "LearnerEntry",
    "RosterConfig",
    "SeatedPolicy",
    "check_roster",
    "load_roster",
    "seats_from_roles",
    "setup_roster",
    "train_roster",
    "validate_roster",
]


# --- the roster at run time -------------------------------------------------------------


def _lm_copy(base: LMPolicy, name: str, seed: int) -> LMPolicy:
    return _lm_like(base, copy.deepcopy(base.model), base.tokenizer, name, seed)


def _lm_like(base: LMPolicy, model: Any, tokenizer: Any, name: str, seed: int) -> LMPolicy:
    """A policy of ``model`` played as the run's model section says (the base's mode,
    sampling, text settings and backend): a learner's own checkpoint brings weights
    and a tokenizer, not how the run plays."""
    return LMPolicy(
        model,
        tokenizer,
        policy_id=name,
        seed=seed,
        backend=base.backend_name,
        engine=base.engine,
        **base.play_settings,
    )


def _learner_policies(cfg: RosterConfig, base: LMPolicy, seed: int) -> dict[str, LMPolicy]:
    """One policy per learner: LoRA views on the shared base, or full copies."""
    if cfg.lora is not None:
        return dict(attach_roles(base, cfg.learners, cfg.lora, seed=seed))
    out = {}
    for i, name in enumerate(cfg.learners):
        init = cfg.policies[name].init
        if init:
            loaded = load_policy(init, seed=seed + i)
            weight = next(base.model.parameters())  # the run's device and dtype
            model = loaded.model.to(device=weight.device, dtype=weight.dtype)
            policy = _lm_like(base, model, loaded.tokenizer, name, seed + i)
        else:
            policy = _lm_copy(base, name, seed + i)
        out[name] = policy
    return out


LEARNER_SECTIONS = ("optim", "algo", "loss")
"""The run config's sections a learner entry may set for itself."""


def _learner_config(entry: LearnerEntry, run_cfg: RunConfig) -> RunConfig:
    """The run config with the learner's own settings over it, setting by setting: what
    its ``optim``, ``algo`` and ``loss`` sections give (a loss term's section too, key by
    key) replaces the run's, the rest stays the run's. An estimator's ``params`` are its
    own: a learner naming another estimator starts from that one's defaults. Validated
    again as a whole (the merged settings must fit the run: groups for a group baseline)."""
    given = entry.model_dump(mode="json", include=set(LEARNER_SECTIONS), exclude_unset=True)
    own = {k: v for k, v in given.items() if v is not None}  # ``optim: null``: the run's
    if not own:
        return run_cfg
    data = run_cfg.model_dump(mode="json")
    if own.get("algo", {}).get("estimator", run_cfg.algo.estimator) != run_cfg.algo.estimator:
        del data["algo"]["params"]
    return validate(merge(data, own))


def _trainee(name: str, policy: LMPolicy, entry: LearnerEntry, run_cfg: RunConfig, lora: bool):
    try:
        cfg = _learner_config(entry, run_cfg)
    except ConfigError as err:
        raise ConfigError(f"learner {name!r}: {err}") from None
    return make_trainee(policy, cfg, adapter=lora)


def build_members(
    cfg: RosterConfig, run_cfg: RunConfig, spec: GameSpec, text_corpus, actions
) -> tuple[list[Trainee], dict[str, Policy]]:
    """Every member: a trainee per learner (from the run's model), frozen checkpoints
    and bots; returns the trainees and every policy by name."""
    if len(cfg.seats) != spec.num_players:
        raise ValueError(
            f"the roster seats {len(cfg.seats)} players but {spec.name!r} has {spec.num_players}"
        )
    if cfg.lora is not None and run_cfg.magnet is not None:
        raise ValueError("magnet needs a copy of the weights; LoRA learners use the base")
    seed, game = run_cfg.train.seed, run_cfg.game
    base = build_policy(run_cfg.model, corpus=text_corpus, actions=actions, seed=seed)
    lms = _learner_policies(cfg, base, seed)
    trainees, policies = [], {}
    for i, (name, entry) in enumerate(cfg.policies.items()):
        if isinstance(entry, LearnerEntry):
            trainees.append(_trainee(name, lms[name], entry, run_cfg, cfg.lora is not None))
            policies[name] = lms[name]
            continue
        spec_str = entry.path if isinstance(entry, FrozenEntry) else entry.name
        policy = build_opponent(spec_str, game.name, seed=seed + 100 + i, params=game.params)
        policy.policy_id = name
        policies[name] = policy
    return trainees, policies


def setup_roster(cfg: RosterConfig, run_cfg: RunConfig, out: Path, *, fresh: bool = True) -> Run:
    """The run's parts for a roster. A fresh run creates ``out`` with its config,
    roster and empty logs; a resumed one writes nothing here."""
    if run_cfg.train.opponent is not None:
        raise ValueError(
            f"train.opponent is {run_cfg.train.opponent.name!r}, but a roster seats the "
            "opponents; leave train.opponent unset"
        )
    torch.manual_seed(run_cfg.train.seed)
    game = GameRef(run_cfg.game.name, run_cfg.game.params)
    spec = game.make().spec
    text = game_text(game.make, seed=run_cfg.train.seed)
    trainees, policies = build_members(cfg, run_cfg, spec, text.texts, text.actions)
    evals = eval_opponents(run_cfg)
    source = make_source(run_cfg, game)  # before anything is written, as in ``setup``
    if fresh:  # a resumed run writes nothing until its state has loaded
        rundir.start(out, run_cfg, LOGS)
        # What the roster gives, not the defaults of what it leaves out: a learner's
        # unset settings are the run config's, on resume too (which may change them).
        roster_yaml = yaml.safe_dump(
            cfg.model_dump(mode="json", exclude_unset=True), sort_keys=False
        )
        atomic.write_text(out / "roster.yaml", roster_yaml)
    rng = np.random.default_rng(run_cfg.train.seed)
    planning = planning_parts(run_cfg.rollout)
    return Run(
        cfg=run_cfg,
        out=out,
        game=game,
        spec=spec,
        source=source,
        seating=Fixed(tuple(cfg.seats), cfg.rotate),
        trainees=trainees,
        policies=policies,
        rng=rng,
        planning=planning,
        plan_states={name: part.init() for name, part in planning.items()},
        eval_opponents=evals,
        exact=wants_exact(run_cfg, spec),
        scope=True,
    )


def save_learners(run: Run, folder: Path, *, lora: bool) -> None:
    """LoRA: the base plus one adapter per learner; otherwise one checkpoint each.
    Written to a temporary folder and renamed: a kill leaves the old folder or none."""
    learners = {t.name: t.policy for t in run.trainees}
    game = run.cfg.game.played()
    with atomic.atomic_dir(folder) as tmp:
        if lora:
            save_roles(learners, tmp, game=game)
        else:
            for name, policy in learners.items():
                save_policy(policy, tmp / name, game=game)


def train_roster(
    cfg: RosterConfig,
    run_cfg: RunConfig,
    out: str | Path,
    *,
    progress: Progress | None = None,
    resume: bool = False,
    stop_after: int | None = None,
) -> dict[str, Any]:
    """Train every learner of the roster; writes metrics, checkpoints and a summary.

    Resume, ``stop_after`` and Ctrl-C behave as in ``train``: the same loop and hooks."""
    if resume:
        rundir.check_resume(run_cfg, Path(out))  # before anything is written
    run = setup_roster(cfg, run_cfg, Path(out), fresh=not resume)
    final = partial(save_learners, lora=cfg.lora is not None)
    end, ev, wall = drive(
        run,
        evaluate=evaluate_roster,
        save=None,
        final=final,
        progress=progress,
        resume=resume,
        stop_after=stop_after,
    )
    return summarize(run, end, ev, wall)
