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
each policy plays every seat. ``train_roster`` reuses the trainer's pieces: one
``play_episodes`` call per iteration, then per learner its estimator on the episodes,
``collect_samples`` of its own policy id and its own ``update``.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
import yaml

from coplay.algos.advantages import Estimator, make_estimator
from coplay.envs.probe import resolve_factory
from coplay.eval.exact import exploitability
from coplay.eval.matches import play_match
from coplay.models.loading import build_policy, load_policy, save_policy
from coplay.models.lora import attach_roles, save_roles
from coplay.policies.lm import LMPolicy
from coplay.population.opponents import build_opponent
from coplay.report import atomic, sinks
from coplay.rollout.engine import play_episodes
from coplay.train.checkpoints import rundir
from coplay.train.checkpoints.roster_state import load_roster_state, save_roster_state
from coplay.train.config import AlgoConfig, RunConfig
from coplay.train.learner import (
    Learner,
    collect_samples,
    make_adapter_learner,
    make_learner,
    update,
)
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
from coplay.train.trainer import (
    filter_samples,
    game_text,
    informative_seats,
    rollout_metrics,
    wants_exact,
)
from coplay.types import Env, Episode, GameSpec, Observation, Policy

__all__ = [
    "BotEntry",
    "FrozenEntry",
    "LearnerEntry",
    "Member",
    "Roster",
    "RosterConfig",
    "RosterRun",
    "SeatedPolicy",
    "check_roster",
    "load_roster",
    "seats_from_roles",
    "train_roster",
    "validate_roster",
]

Progress = Callable[[int, dict[str, float]], None]


# --- the roster at run time -------------------------------------------------------------


@dataclass
class Member:
    """One seated policy; learners also carry their learner and estimator."""

    name: str
    policy: Policy
    learner: Learner | None = None
    estimator: Estimator | None = None
    adv_state: Any = None
    algo: AlgoConfig | None = None


@dataclass
class Roster:
    """Members by name and the name of every seat."""

    members: dict[str, Member]
    seats: tuple[str, ...]
    rotate: bool = False

    @property
    def learners(self) -> list[Member]:
        return [m for m in self.members.values() if m.learner is not None]

    def seating(self, group: int) -> list[Policy]:
        """Policies per seat for episode group ``group``: seat s gets
        ``seats[(s - group) % n]`` when rotating, ``seats[s]`` otherwise."""
        n = len(self.seats)
        shift = group % n if self.rotate else 0
        return [self.members[self.seats[(s - shift) % n]].policy for s in range(n)]

    def seatings(self, games: int, group_size: int = 1) -> list[list[Policy]]:
        """One seating per game; games of one group (same seed) share their seating."""
        return [self.seating(i // group_size) for i in range(games)]


class SeatedPolicy:
    """A joint policy answering each observation with the policy of its player's seat:
    the strategy profile that exact evaluation reads (each information state belongs
    to one player)."""

    def __init__(self, seats: Sequence[Policy]) -> None:
        missing = [p.policy_id for p in seats if not hasattr(p, "action_probs")]
        if missing:
            raise TypeError(f"policy {missing[0]!r} cannot report action probabilities")
        self.seats = list(seats)

    def action_probs(self, observations: Sequence[Observation]) -> list[dict[str, float]]:
        out: list[dict[str, float] | None] = [None] * len(observations)
        for seat, policy in enumerate(self.seats):
            idx = [i for i, o in enumerate(observations) if o.player == seat]
            if idx:
                answers = policy.action_probs([observations[i] for i in idx])
                for i, probs in zip(idx, answers, strict=True):
                    out[i] = probs
        for obs, probs in zip(observations, out, strict=True):
            if probs is None:
                raise ValueError(f"player {obs.player} has no seat among {len(self.seats)}")
        return out  # type: ignore[return-value]


def _lm_copy(base: LMPolicy, name: str, seed: int) -> LMPolicy:
    return LMPolicy(
        copy.deepcopy(base.model),
        base.tokenizer,
        policy_id=name,
        mode=base.mode,
        temperature=base.temperature,
        max_new_tokens=base.max_new_tokens,
        seed=seed,
    )


def _learner_policies(cfg: RosterConfig, base: LMPolicy, seed: int) -> dict[str, LMPolicy]:
    """One policy per learner: LoRA views on the shared base, or full copies."""
    if cfg.lora is not None:
        return dict(attach_roles(base, cfg.learners, cfg.lora, seed=seed))
    out = {}
    for i, name in enumerate(cfg.learners):
        init = cfg.policies[name].init
        if init:
            policy = load_policy(init, seed=seed + i)
            policy.policy_id = name
        else:
            policy = _lm_copy(base, name, seed + i)
        out[name] = policy
    return out


def _learner_member(name: str, policy: LMPolicy, entry: LearnerEntry, run_cfg: RunConfig, lora):
    optim, algo = entry.optim or run_cfg.optim, entry.algo or run_cfg.algo
    loss = entry.loss or run_cfg.loss
    est = make_estimator(algo.estimator, **algo.params)
    if est.needs_values:
        raise ValueError(
            f"learner {name!r}: estimator {algo.estimator!r} needs a critic, "
            "which rosters do not run; pick one without values"
        )
    if est.needs_groups and run_cfg.rollout.group_size < 2:
        raise ValueError(
            f"learner {name!r}: estimator {algo.estimator!r} takes its baseline from the "
            "other games of a group: set rollout.group_size >= 2"
        )
    iters, tis_cap = run_cfg.train.iterations, run_cfg.rollout.tis_cap
    learner = (
        make_adapter_learner(policy, loss, optim, iterations=iters, tis_cap=tis_cap)
        if lora
        else make_learner(
            policy,
            loss,
            optim,
            iterations=iters,
            reference_ema=run_cfg.reference.ema,
            tis_cap=tis_cap,
        )
    )
    return Member(name, policy, learner, est, est.init(), algo)


def build_roster(
    cfg: RosterConfig, run_cfg: RunConfig, spec: GameSpec, text_corpus, actions
) -> Roster:
    """Build every member: learners (from the run's model), frozen checkpoints, bots."""
    if len(cfg.seats) != spec.num_players:
        raise ValueError(
            f"the roster seats {len(cfg.seats)} players but {spec.name!r} has {spec.num_players}"
        )
    if cfg.lora is not None and run_cfg.reference.ema > 0:
        raise ValueError("reference.ema > 0 needs a magnet copy; LoRA learners use the base")
    seed, game = run_cfg.train.seed, run_cfg.game
    base = build_policy(run_cfg.model, corpus=text_corpus, actions=actions, seed=seed)
    lms = _learner_policies(cfg, base, seed)
    members: dict[str, Member] = {}
    for i, (name, entry) in enumerate(cfg.policies.items()):
        if isinstance(entry, LearnerEntry):
            members[name] = _learner_member(name, lms[name], entry, run_cfg, cfg.lora is not None)
            continue
        spec_str = entry.path if isinstance(entry, FrozenEntry) else entry.name
        policy = build_opponent(spec_str, game.name, seed=seed + 100 + i, params=game.params)
        policy.policy_id = name
        members[name] = Member(name, policy)
    return Roster(members=members, seats=tuple(cfg.seats), rotate=cfg.rotate)


# --- the training loop ------------------------------------------------------------------


@dataclass
class RosterRun:
    """Everything a roster run holds between iterations."""

    cfg: RosterConfig
    run_cfg: RunConfig
    out: Path
    make_env: Callable[[], Env]
    spec: GameSpec
    roster: Roster
    rng: np.random.Generator
    eval_opponents: dict[str, Policy] = field(default_factory=dict)
    exact: bool = False


def setup_roster(
    cfg: RosterConfig, run_cfg: RunConfig, out: Path, *, fresh: bool = True
) -> RosterRun:
    """Build the environment factory, every member and the evaluation opponents.

    A fresh run creates ``out`` with its config, roster and an empty metrics file; a
    resumed one writes nothing here."""
    if run_cfg.train.opponent != "self":
        raise ValueError(
            f"train.opponent is {run_cfg.train.opponent!r}, but a roster seats the "
            "opponents; leave train.opponent as 'self'"
        )
    if run_cfg.rollout.explore:
        raise ValueError("rollout.explore is not supported with a roster yet; set it to 0")
    if run_cfg.rollout.restart_share:
        raise ValueError("rollout.restart_share is not supported with a roster yet; set it to 0")
    torch.manual_seed(run_cfg.train.seed)
    game = run_cfg.game

    make = resolve_factory(game.name, game.params)
    spec = make().spec
    text = game_text(make, seed=run_cfg.train.seed)
    roster = build_roster(cfg, run_cfg, spec, text.texts, text.actions)
    evals = {
        name: build_opponent(name, game.name, seed=run_cfg.train.seed + 2 + i, params=game.params)
        for i, name in enumerate(run_cfg.train.eval_opponents)
    }
    if fresh:  # a resumed run writes nothing until its state has loaded (see _begin)
        rundir.start(out, run_cfg, ("metrics.jsonl",))
        roster_yaml = yaml.safe_dump(cfg.model_dump(mode="json"), sort_keys=False)
        atomic.write_text(out / "roster.yaml", roster_yaml)
    return RosterRun(
        cfg=cfg,
        run_cfg=run_cfg,
        out=out,
        make_env=make,
        spec=spec,
        roster=roster,
        rng=np.random.default_rng(run_cfg.train.seed),
        eval_opponents=evals,
        exact=wants_exact(run_cfg, spec),
    )


def scoped(metrics: dict[str, float], name: str) -> dict[str, float]:
    """``{"loss/kl": x}`` -> ``{"loss/<name>/kl": x}``: per-member metric names."""
    out = {}
    for key, value in metrics.items():
        ns, _, rest = key.partition("/")
        out[f"{ns}/{name}/{rest}" if rest else f"{name}/{ns}"] = value
    return out


def collect_roster(run: RosterRun, iteration: int) -> tuple[list[Episode], dict[str, float]]:
    """One iteration's episodes with the roster's seatings; per-learner rollout metrics."""
    r, seed = run.run_cfg.rollout, run.run_cfg.train.seed
    base = (seed * 1_000_003 + iteration) * r.games_per_iter
    seeds = [base + i // r.group_size for i in range(r.games_per_iter)]
    t0 = time.perf_counter()
    episodes = play_episodes(
        run.make_env,
        run.roster.seatings(r.games_per_iter, r.group_size),
        seeds,
        invalid=run.run_cfg.game.invalid,
        max_turns=run.run_cfg.game.max_turns,
        rng=run.rng,
    )
    seconds = time.perf_counter() - t0
    m: dict[str, float] = {"perf/rollout_s": seconds}
    for member in run.roster.learners:
        m |= scoped(rollout_metrics(episodes, member.name, seconds), member.name)
    return episodes, m


def learn_member(member: Member, episodes: Sequence[Episode], rng) -> dict[str, float]:
    """The member's estimator on the episodes, then its update on its own decisions."""
    est = member.estimator.estimate(episodes, member.adv_state)
    member.adv_state = est.state
    keep = informative_seats(episodes) if member.algo.filter_flat_groups else None
    samples = collect_samples(episodes, est.advantages, member.name, keep=keep)
    samples, filtered = filter_samples(member.algo, samples, keep, episodes)
    return {**est.metrics, **filtered, **update(member.learner, samples, rng)}


def evaluate_roster(run: RosterRun) -> dict[str, float]:
    """Exact exploitability of the seated profile (and of every learner that plays all
    seats) where the game allows it; matches of every learner against each opponent."""
    m: dict[str, float] = {}
    roster, game = run.roster, run.run_cfg.game
    n = run.spec.num_players
    if run.exact:
        res = exploitability(SeatedPolicy(roster.seating(0)), game.name, params=game.params)
        m["eval/exploitability"], m["eval/nash_conv"] = res.exploitability, res.nash_conv
        for seat, v in enumerate(res.on_policy_values):
            m[f"eval/value_seat{seat}"] = v
    for member in roster.learners:
        if run.exact and (roster.rotate or set(roster.seats) == {member.name}):
            res = exploitability(member.policy, game.name, params=game.params)
            m[f"eval/{member.name}/exploitability"] = res.exploitability
        for i, (opp_name, opp) in enumerate(run.eval_opponents.items()):
            if run.exact:
                m |= exact_values(run, member, opp, opp_name)
            match = play_match(
                run.make_env,
                member.policy,
                [opp] * (n - 1),
                episodes=run.run_cfg.train.eval_episodes,
                seed=10_000 + i,
                invalid=game.invalid,
            )
            m[f"eval/{member.name}/{opp_name}/mean_return"] = match.mean_return.value
            for seat, ret in enumerate(match.mean_return_by_seat):
                m[f"eval/{member.name}/{opp_name}/return_seat{seat}"] = ret
    return m


def exact_values(run: RosterRun, member: Member, opp: Policy, opp_name: str) -> dict[str, float]:
    """Exact expected return of ``member`` in each seat it holds (unrotated seating)
    with ``opp`` in every other seat: no match noise."""
    m, game, n = {}, run.run_cfg.game, run.spec.num_players
    for seat in sorted({s for s, name in enumerate(run.roster.seats) if name == member.name}):
        profile = [opp] * n
        profile[seat] = member.policy
        res = exploitability(SeatedPolicy(profile), game.name, params=game.params)
        m[f"eval/{member.name}/{opp_name}/exact_value_seat{seat}"] = res.on_policy_values[seat]
    return m


def save_learners(run: RosterRun, folder: Path) -> None:
    """LoRA: the base plus one adapter per learner; otherwise one checkpoint each.
    Written to a temporary folder and renamed: a kill leaves the old folder or none."""
    learners = {m.name: m.policy for m in run.roster.learners}
    game = run.run_cfg.game.played()
    with atomic.atomic_dir(folder) as tmp:
        if run.cfg.lora is not None:
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

    ``resume`` continues from the state saved in ``out`` (every ``train.save_every``
    iterations and at the end); the result equals an uninterrupted run.
    ``stop_after`` ends after that iteration with the state saved. As in ``train``,
    the metrics row comes before the state (the commit point), and Ctrl-C raises
    ``RunInterrupted`` naming the last saved iteration.
    """
    if resume:
        rundir.check_resume(run_cfg, Path(out))  # before anything is written
    run = setup_roster(cfg, run_cfg, Path(out), fresh=not resume)
    start = time.perf_counter()
    done, evals, before = _begin(run, resume)
    saved = done if resume else None
    iterations, save_every = run_cfg.train.iterations, run_cfg.train.save_every
    end = min(iterations, stop_after or iterations)
    try:
        for it in range(done + 1, end + 1):
            episodes, metrics = collect_roster(run, it)
            for member in run.roster.learners:
                metrics |= scoped(learn_member(member, episodes, run.rng), member.name)
            if it % run_cfg.train.eval_every == 0 or it == iterations:
                evals["last"] = evaluate_roster(run)
                metrics |= evals["last"]
            metrics["perf/elapsed_s"] = before + time.perf_counter() - start
            sinks.append_metrics(run.out / "metrics.jsonl", it, metrics)
            if (save_every and it % save_every == 0) or it == end:
                save_roster_state(run, it, evals)
                saved = it
            if progress:
                progress(it, metrics)
        if end == iterations:
            save_learners(run, run.out / "checkpoints" / "final")
    except KeyboardInterrupt:
        raise rundir.RunInterrupted(run.out, saved) from None
    summary = {
        "game": run_cfg.game.name,
        "iterations": end,
        "wall_s": before + time.perf_counter() - start,
        **{f"initial/{k}": v for k, v in evals["initial"].items()},
        **{f"final/{k}": v for k, v in evals["last"].items()},
    }
    sinks.write_summary(run.out / "summary.json", summary)
    return summary


def _begin(run: RosterRun, resume: bool) -> tuple[int, dict[str, dict[str, float]], float]:
    """Iterations already done, the evaluations so far (initial, last) and the seconds
    earlier segments took. Resuming loads the state before writing anything."""
    metrics_file = run.out / "metrics.jsonl"
    if resume:
        return rundir.resume(
            run.out, run.run_cfg, ("metrics.jsonl",), lambda: load_roster_state(run)
        )
    initial = evaluate_roster(run)
    sinks.append_metrics(metrics_file, 0, initial)
    return 0, {"initial": initial, "last": initial}, 0.0
