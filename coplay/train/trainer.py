"""The training loop: collect -> advantages -> update -> evaluate -> log.

Reads top to bottom: ``train`` calls one function per stage. Only this module logs;
everything it calls is a function that returns records or metrics.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from coplay.algos.advantages import Advantages, Estimator, make_estimator
from coplay.algos.losses.filters import filter_metrics, informative_groups, nonzero_advantage_mask
from coplay.envs.probe import resolve_factory
from coplay.envs.registry import game_metrics
from coplay.eval.exact import decide_exact, exploitability
from coplay.eval.exact_match import (
    exact_match_opponents,
    exact_outcomes,
    sampled_and_greedy_outcomes,
)
from coplay.eval.matches import play_match
from coplay.eval.welfare import welfare_report
from coplay.models.loading import PlayedGame, build_policy, save_policy
from coplay.policies.lm import LMPolicy
from coplay.policies.scripted import RandomPolicy
from coplay.population.opponents import OpponentPool, build_opponent
from coplay.report import sinks
from coplay.report.atomic import atomic_dir
from coplay.rollout.engine import play_episodes
from coplay.rollout.restarts import Start, draw, lost_starts, opening_targets, remember
from coplay.train.checkpoints import rundir
from coplay.train.checkpoints.state import load_state, save_state
from coplay.train.config import AlgoConfig, RunConfig
from coplay.train.critic import Critic, critic_update, fill_values, make_critic
from coplay.train.learner import Learner, Sample, collect_samples, make_learner, recall, update
from coplay.types import Env, Episode, GameKind, GameSpec, Opening, Policy

Progress = Callable[[int, dict[str, float]], None]

LOGS = ("metrics.jsonl", "transcripts.jsonl")
"""The run's append-only logs: emptied by a fresh run, repaired and cut back on resume."""


@dataclass
class Run:
    """Everything a training run holds between iterations."""

    cfg: RunConfig
    out: Path
    make_env: Callable[[], Env]
    learner: Learner
    opponent: Policy | None
    """None for shared-weight self-play."""
    estimator: Estimator
    adv_state: Any
    rng: np.random.Generator
    spec: GameSpec
    eval_opponents: dict[str, Policy] = field(default_factory=dict)
    exact: bool = False
    exact_matches: tuple[str, ...] = ()
    """Evaluation opponents also matched exactly (``train.exact_matches``)."""
    critic: Critic | None = None
    """Value model, present when the estimator reads per-turn values (GAE)."""
    pool: OpponentPool | None = None
    """Opponents drawn per game (league, PSRO); overrides ``opponent`` when set."""
    restarts: list[Start] = field(default_factory=list)
    """Positions of recently lost games that restarted groups start from."""


@dataclass(frozen=True)
class GameText:
    """Observations and action strings seen in random play of a game."""

    texts: list[str]
    actions: list[str]


def game_text(make: Callable[[], Env], *, episodes: int = 300, seed: int = 0) -> GameText:
    """Text of random play, for training the tiny model's tokenizer."""
    env = make()
    bot = RandomPolicy(seed=seed)
    eps = play_episodes(make, [[bot] * env.spec.num_players] * episodes, range(episodes))
    texts = [t.observation.text for e in eps for t in e.turns]
    actions = {a for e in eps for t in e.turns for a in (t.observation.legal_actions or ())}
    return GameText(texts=texts, actions=sorted(actions))


def setup(cfg: RunConfig, out: Path, *, fresh: bool = True) -> Run:
    """Build the environment factory, learner, opponents and estimator.

    A fresh run creates ``out`` with its config and empty metric and transcript files;
    a resumed one writes nothing here.
    """
    torch.manual_seed(cfg.train.seed)
    game = cfg.game

    make = resolve_factory(game.name, game.params)
    spec = make().spec
    weights = cfg.train.seat_weights
    if weights is not None and len(weights) != spec.num_players:
        raise ValueError(
            f"train.seat_weights has {len(weights)} weights; {game.name} has "
            f"{spec.num_players} seats"
        )
    text = game_text(make, seed=cfg.train.seed)
    policy = build_policy(cfg.model, corpus=text.texts, actions=text.actions, seed=cfg.train.seed)
    opponent = None
    if cfg.train.opponent != "self":
        opponent = build_opponent(
            cfg.train.opponent, game.name, seed=cfg.train.seed + 1, params=game.params
        )
    evals = {
        name: build_opponent(name, game.name, seed=cfg.train.seed + 2 + i, params=game.params)
        for i, name in enumerate(cfg.train.eval_opponents)
    }
    if fresh:  # a resumed run writes nothing until its state has loaded (see _begin)
        rundir.start(out, cfg, LOGS)
    est = make_estimator(cfg.algo.estimator, **cfg.algo.params)
    return Run(
        cfg=cfg,
        out=out,
        make_env=make,
        learner=make_learner(
            policy,
            cfg.loss,
            cfg.optim,
            iterations=cfg.train.iterations,
            reference_ema=cfg.reference.ema,
            tis_cap=cfg.rollout.tis_cap,
            target=cfg.rollout.restart_target,
        ),
        opponent=opponent,
        estimator=est,
        adv_state=est.init(),
        rng=np.random.default_rng(cfg.train.seed),
        spec=spec,
        eval_opponents=evals,
        exact=(exact := wants_exact(cfg, spec)),
        exact_matches=exact_match_opponents(
            cfg.train.exact_matches, spec, cfg.game.name, cfg.game.params, evals, exact=exact
        ),
        critic=make_critic(policy, cfg.critic) if est.needs_values else None,
    )


def wants_exact(cfg: RunConfig, spec: GameSpec) -> bool:
    """Whether evaluations compute exact exploitability (``train.exact``)."""
    return decide_exact(cfg.train.exact, spec, cfg.game.name, cfg.game.params)


def seatings(run: Run, num_games: int) -> list[list[Policy]]:
    """Self-play fills every seat with the learner; otherwise the learner rotates seats
    and the opponent (fixed, or drawn from ``run.pool``) fills the others.

    Seat and opponent change per *group* of ``rollout.group_size`` games (games that
    share a seed), so a group baseline compares the learner's own returns from one
    seat against one opponent, never the opponent's returns.
    """
    n = run.spec.num_players
    me = run.learner.policy
    size = run.cfg.rollout.group_size
    groups = -(-num_games // size)
    if run.pool is not None:
        opponents = run.pool.sample(run.rng, groups)
    else:
        opponents = [run.opponent] * groups
    weights = run.cfg.train.seat_weights
    if weights is not None and run.pool is None and run.opponent is None:
        raise ValueError(
            "train.seat_weights needs train.opponent or a league: in self-play the learner "
            "fills every seat"
        )
    seat = group_seats(groups, n, weights)
    rows = []
    for i in range(num_games):
        g = i // size
        opp = opponents[g]
        rows.append([me] * n if opp is None else [me if s == seat[g] else opp for s in range(n)])
    return rows


def group_seats(groups: int, n: int, weights: Sequence[float] | None) -> list[int]:
    """The learner's seat in each of ``groups`` groups: ``g % n`` without weights, else
    a smooth weighted round-robin, so every prefix of the groups is split between the
    seats as close to ``weights`` as whole groups allow (equal weights give ``g % n``)."""
    if weights is None:
        return [g % n for g in range(groups)]
    if len(weights) != n:
        raise ValueError(f"train.seat_weights has {len(weights)} weights for {n} seats")
    total = float(sum(weights))
    credit = [0.0] * n
    seats = []
    for _ in range(groups):
        credit = [c + w for c, w in zip(credit, weights, strict=True)]
        pick = max(range(n), key=lambda s: credit[s])
        credit[pick] -= total
        seats.append(pick)
    return seats


@dataclass(frozen=True)
class Plan:
    """One iteration's games: per game the seating, env seed, group id and the history
    replayed before play (empty for a fresh game)."""

    seatings: list[list[Policy]]
    seeds: list[int]
    group_ids: list[int]
    prefixes: list[tuple]
    restarted: int
    """How many of the groups (the last ones) restart."""
    openings: list[Opening | None]
    """Per game, the learner's assigned first move (``rollout.restart_explore``)."""


def plan(run: Run, iteration: int) -> Plan:
    """Fresh groups first (seed = group id), then the restarted ones, each replaying its
    source game's seed and history under an id that follows the fresh groups'."""
    r = run.cfg.rollout
    base = (run.cfg.train.seed * 1_000_003 + iteration) * r.games_per_iter
    starts = draw(run.restarts, restart_groups(run), run.rng)
    fresh = r.games_per_iter - len(starts) * r.group_size
    seeds = [base + i // r.group_size for i in range(fresh)]
    first = base + -(-fresh // r.group_size)
    copies = [(j, st) for j, st in enumerate(starts) for _ in range(r.group_size)]
    return Plan(
        seatings=seatings(run, fresh) + [restart_seating(run, st.seat) for _, st in copies],
        seeds=seeds + [st.seed for _, st in copies],
        group_ids=seeds + [first + j for j, _ in copies],
        prefixes=[()] * fresh + [st.prefix for _, st in copies],
        restarted=len(starts),
        openings=[None] * fresh + restart_openings(run, starts),
    )


def restart_openings(run: Run, starts: Sequence[Start]) -> list[Opening | None]:
    """Per restarted game, its assigned first move: with ``rollout.restart_explore``
    the copies of a group take the legal moves in turn from a random one (copy ``c``
    plays move ``shift + c``), so a group of at least as many copies as moves tries
    each of them; without it none are assigned."""
    size = run.cfg.rollout.group_size
    if not run.cfg.rollout.restart_explore:
        return [None] * (len(starts) * size)
    shifts = run.rng.integers(0, 2**31, size=len(starts))
    return [
        Opening(player=st.seat, index=int(shift) + c)
        for st, shift in zip(starts, shifts, strict=True)
        for c in range(size)
    ]


def collect(run: Run, iteration: int) -> tuple[list[Episode], dict[str, float]]:
    """Play one iteration's episodes (groups of ``group_size`` share a seed); with
    ``rollout.restart_share`` some groups start from positions of lost games."""
    r, games = run.cfg.rollout, plan(run, iteration)
    t0 = time.perf_counter()
    with run.learner.policy.exploring(r.explore):
        episodes = play_episodes(
            run.make_env,
            games.seatings,
            games.seeds,
            group_ids=games.group_ids,
            invalid=run.cfg.game.invalid,
            max_turns=run.cfg.game.max_turns,
            rng=run.rng,
            prefixes=games.prefixes,
            openings=games.openings,
        )
    metrics = rollout_metrics(episodes, run.learner.policy.policy_id, time.perf_counter() - t0)
    if r.restart_share:
        new = lost_starts(
            episodes,
            run.learner.policy.policy_id,
            run.spec.max_return,
            run.rng,
            fresh_only=r.restart_sources == "fresh",
        )
        run.restarts = remember(run.restarts, new, r.restart_buffer)
        metrics["rollout/restart_groups"] = float(games.restarted)
        metrics["rollout/restart_buffer"] = float(len(run.restarts))
    return episodes, metrics


def restart_groups(run: Run) -> int:
    """How many of this iteration's whole groups restart (``rollout.restart_share``)."""
    r = run.cfg.rollout
    if not r.restart_share:
        return 0
    if run.pool is not None:
        raise ValueError(
            "rollout.restart_share is not supported with a league or PSRO yet (a restart "
            "would need the lost game's opponent); set it to 0"
        )
    return int(r.restart_share * (r.games_per_iter // r.group_size))


def restart_seating(run: Run, seat: int) -> list[Policy]:
    """The learner in ``seat`` and the fixed opponent elsewhere (self-play: everywhere)."""
    me, n = run.learner.policy, run.spec.num_players
    if run.opponent is None:
        return [me] * n
    return [me if s == seat else run.opponent for s in range(n)]


def rollout_metrics(
    episodes: Sequence[Episode], learner_id: str, seconds: float
) -> dict[str, float]:
    """Returns per seat, lengths, invalid-action rate and throughput of the learner's play."""
    turns = [
        t for e in episodes for tr in e.trajectories if tr.policy_id == learner_id for t in tr.turns
    ]
    decisions = sum(1 + len(t.invalid_attempts) for t in turns)
    invalid = sum(len(t.invalid_attempts) + (not t.decision.valid) for t in turns)
    m = {
        "rollout/episode_len": float(np.mean([e.num_steps for e in episodes])),
        "rollout/decisions": float(decisions),
        "rollout/invalid_rate": invalid / max(1, decisions),
        "rollout/response_len": float(
            np.mean([len(t.decision.response_ids) for t in turns] or [0])
        ),
        "rollout/truncated": float(np.mean([e.truncated for e in episodes])),
        "perf/rollout_s": seconds,
        "perf/decisions_per_s": decisions / max(seconds, 1e-9),
    }
    for seat in range(len(episodes[0].returns)):
        # Restarted games count only part of a game: they would bias the returns.
        rets = [e.returns[seat] for e in episodes if e.seats[seat] == learner_id and not e.prefix]
        if rets:
            m[f"rollout/return_seat{seat}"] = float(np.mean(rets))
    return m | group_metrics(episodes, learner_id)


def group_metrics(episodes: Sequence[Episode], learner_id: str) -> dict[str, float]:
    """Spread of the learner's returns within groups (same seed, same seat).

    ``rollout/group_return_std`` is the mean over groups of the population standard
    deviation of their returns; ``rollout/flat_group_frac`` the share of groups whose
    returns are all equal (no signal for a group baseline). Groups of one are skipped.
    """
    groups: dict[tuple[str, int, int], list[float]] = {}
    for e in episodes:
        for seat, ret in enumerate(e.returns):
            if e.seats[seat] == learner_id:
                groups.setdefault((e.game, e.group_id, seat), []).append(ret)
    sizable = [np.asarray(r) for r in groups.values() if len(r) > 1]
    if not sizable:
        return {}
    return {
        "rollout/group_return_std": float(np.mean([r.std() for r in sizable])),
        "rollout/flat_group_frac": float(np.mean([r.min() == r.max() for r in sizable])),
    }


def learn(run: Run, episodes: Sequence[Episode]) -> dict[str, float]:
    """Advantages, then the policy (and critic) update; returns ``adv/*``, ``loss/*``
    and ``critic/*`` metrics."""
    t0 = time.perf_counter()
    learner_id = run.learner.policy.policy_id
    if run.critic is not None:
        fill_values(run.critic, episodes)
    est = run.estimator.estimate(episodes, run.adv_state)
    run.adv_state = est.state
    keep = informative_seats(episodes) if run.cfg.algo.filter_flat_groups else None
    targets = opening_targets(episodes) if run.cfg.rollout.restart_target is not None else None
    samples = collect_samples(episodes, est.advantages, learner_id, keep=keep, targets=targets)
    # before the filter, which may drop a target whose advantage is 0
    replayed, recalled = recall(run.learner, samples)
    samples, filtered = filter_samples(run.cfg.algo, samples, keep, episodes)
    metrics = {**est.metrics, **filtered, **update(run.learner, samples + replayed, run.rng)}
    metrics |= recalled
    if run.critic is not None and est.value_targets is not None:
        turns, targets = learner_turns(episodes, est.value_targets, learner_id)
        metrics |= critic_update(run.critic, turns, targets, run.rng, epochs=run.cfg.optim.epochs)
    metrics["perf/update_s"] = time.perf_counter() - t0
    return metrics


def informative_seats(episodes: Sequence[Episode]) -> set[tuple[int, int]]:
    """(episode index, seat) pairs whose group (same game, group id and seat) has
    returns that are not all equal; the others carry no group-relative signal."""
    pairs = [(i, seat) for i, e in enumerate(episodes) for seat in range(len(e.returns))]
    keys = [(episodes[i].game, episodes[i].group_id, seat) for i, seat in pairs]
    rets = [episodes[i].returns[seat] for i, seat in pairs]
    keep = informative_groups(keys, rets)
    return {pair for pair, k in zip(pairs, keep, strict=True) if k}


def filter_samples(
    algo: AlgoConfig,
    samples: list[Sample],
    keep: set[tuple[int, int]] | None,
    episodes: Sequence[Episode],
) -> tuple[list[Sample], dict[str, float]]:
    """Apply the zero-advantage filter; report what each filter dropped."""
    metrics: dict[str, float] = {}
    if keep is not None:
        total = sum(len(e.returns) for e in episodes)
        metrics["adv/flat_group_dropped_frac"] = 1.0 - len(keep) / max(1, total)
    if algo.filter_zero_advantage:
        mask = nonzero_advantage_mask([s.advantage for s in samples])
        metrics |= filter_metrics(zero_adv=mask)
        samples = [s for s, k in zip(samples, mask, strict=True) if k]
    return samples, metrics


def learner_turns(
    episodes: Sequence[Episode], targets: Advantages, learner_id: str
) -> tuple[list, list[float]]:
    """The learner's turns and their value targets, for the critic's regression."""
    turns, out = [], []
    for ep, ep_targets in zip(episodes, targets, strict=True):
        for traj, seat_targets in zip(ep.trajectories, ep_targets, strict=True):
            if traj.policy_id == learner_id:
                turns.extend(traj.turns)
                out.extend(seat_targets)
    return turns, out


def final_policy(run: Run) -> LMPolicy:
    """The policy the run evaluates and saves: the learner, or its magnet."""
    if run.cfg.train.final_policy == "magnet" and run.learner.reference is not None:
        return run.learner.reference
    return run.learner.policy


def evaluate(run: Run, iteration: int) -> dict[str, float]:
    """Exact exploitability where the game allows it, and matches against each opponent,
    of ``final_policy(run)`` (with the learner's own exploitability when that differs)."""
    cfg, policy = run.cfg, final_policy(run)
    m: dict[str, float] = {}
    if run.exact:
        res = exploitability(policy, cfg.game.name, params=cfg.game.params)
        m["eval/exploitability"] = res.exploitability
        m["eval/nash_conv"] = res.nash_conv
        if policy is not run.learner.policy:
            own = exploitability(run.learner.policy, cfg.game.name, params=cfg.game.params)
            m["eval/learner/exploitability"] = own.exploitability
    n = run.spec.num_players
    if run.spec.kind != GameKind.ZERO_SUM:
        m |= selfplay_metrics(run)
    for i, (name, opp) in enumerate(run.eval_opponents.items()):
        res = play_match(
            run.make_env,
            policy,
            [opp] * (n - 1),
            episodes=cfg.train.eval_episodes,
            seed=10_000 + i,
            invalid=cfg.game.invalid,
        )
        m[f"eval/{name}/win"] = res.win.value
        m[f"eval/{name}/draw"] = res.draw.value
        m[f"eval/{name}/loss"] = res.loss.value
        m[f"eval/{name}/mean_return"] = res.mean_return.value
        for seat, loss in enumerate(res.loss_by_seat):
            m[f"eval/{name}/loss_seat{seat}"] = loss.value
        if name in run.exact_matches:
            m |= exact_match_metrics(run, policy, name, opp)
            if policy is not run.learner.policy:
                own = exact_match_metrics(run, run.learner.policy, name, opp)
                m |= {k.replace("eval/", "eval/learner/", 1): v for k, v in own.items()}
    return m


def exact_match_metrics(run: Run, policy: Policy, name: str, opp: Policy) -> dict[str, float]:
    """The policy's exact outcome from each seat against ``opp`` (no sampling noise),
    and in perfect-information games that of its greedy version too."""
    game, params = run.cfg.game.name, run.cfg.game.params
    if run.spec.perfect_information:
        sampled, greedy = sampled_and_greedy_outcomes(policy, opp, game, params=params)
    else:  # an argmax is no candidate for equilibrium play here: skip its walk
        sampled, greedy = exact_outcomes(policy, opp, game, params=params), ()
    m: dict[str, float] = {}
    for o in sampled:
        m[f"eval/{name}/exact_win_seat{o.seat}"] = o.win
        m[f"eval/{name}/exact_loss_seat{o.seat}"] = o.loss
        m[f"eval/{name}/exact_return_seat{o.seat}"] = o.mean_return
    m |= {f"eval/{name}/greedy_loss_seat{o.seat}": o.loss for o in greedy}
    return m


def selfplay_metrics(run: Run) -> dict[str, float]:
    """The learner in every seat, on fixed evaluation seeds: what general-sum and
    cooperative games are judged by (each seat's return and their sum, the welfare)."""
    cfg = run.cfg
    me = final_policy(run)
    episodes = play_episodes(
        run.make_env,
        [[me] * run.spec.num_players] * cfg.train.eval_episodes,
        [20_000 + i for i in range(cfg.train.eval_episodes)],
        invalid=cfg.game.invalid,
        max_turns=cfg.game.max_turns,
    )
    report = welfare_report(episodes, min_return=run.spec.min_return)
    m = {f"eval/selfplay/return_seat{s}": r.value for s, r in enumerate(report.returns_by_seat)}
    m["eval/selfplay/welfare"] = report.welfare.value
    if run.spec.num_players > 1:
        m["eval/selfplay/fairness_jain"] = report.fairness.jain
    if report.cooperation_rate is not None:
        m["eval/selfplay/cooperation_rate"] = report.cooperation_rate
    scores = game_metrics(cfg.game.name)
    if scores is not None:
        m |= {f"eval/selfplay/{k}": float(v) for k, v in scores(episodes).items()}
    return m


def train(
    cfg: RunConfig,
    out: str | Path,
    *,
    progress: Progress | None = None,
    resume: bool = False,
    stop_after: int | None = None,
) -> dict[str, Any]:
    """Train the learner as configured, writing the run directory ``out``.

    ``resume`` continues from the state saved in ``out`` (every ``train.save_every``
    iterations and at the end); the result equals an uninterrupted run.
    ``stop_after`` ends after that iteration with the state saved, as a job with a
    time limit would. Each iteration logs its metrics, then saves its checkpoint, then
    its state: the state is the commit point, so a kill at any moment resumes into
    the same run. Ctrl-C raises ``RunInterrupted`` naming the last saved iteration.
    """
    if resume:
        rundir.check_resume(cfg, Path(out))  # before anything is written
    run = setup(cfg, Path(out), fresh=not resume)
    start = time.perf_counter()
    done, evals, before = _begin(run, resume)
    saved = done if resume else None
    end = min(cfg.train.iterations, stop_after or cfg.train.iterations)
    try:
        for it in range(done + 1, end + 1):
            metrics = _iteration(run, it, evals)
            metrics["perf/elapsed_s"] = before + time.perf_counter() - start
            sinks.append_metrics(run.out / "metrics.jsonl", it, metrics)
            if cfg.train.save_every and it % cfg.train.save_every == 0:
                folder = run.out / "checkpoints" / f"iter_{it:06d}"
                save_checkpoint(final_policy(run), folder, game=cfg.game.played())
            if (cfg.train.save_every and it % cfg.train.save_every == 0) or it == end:
                save_state(run, it, evals)
                saved = it
            if progress:
                progress(it, metrics)
        if end == cfg.train.iterations:
            final = run.out / "checkpoints" / "final"
            save_checkpoint(final_policy(run), final, game=cfg.game.played())
    except KeyboardInterrupt:
        raise rundir.RunInterrupted(run.out, saved) from None
    summary = {
        "game": cfg.game.name,
        "iterations": end,
        "wall_s": before + time.perf_counter() - start,
        **{f"initial/{k}": v for k, v in evals["initial"].items()},
        **{f"final/{k}": v for k, v in evals["last"].items()},
    }
    sinks.write_summary(run.out / "summary.json", summary)
    return summary


def _iteration(run: Run, it: int, evals: dict[str, dict[str, float]]) -> dict[str, float]:
    """Collect, learn and (every ``train.eval_every``) evaluate; returns the metrics."""
    cfg = run.cfg
    episodes, metrics = collect(run, it)
    metrics |= learn(run, episodes)
    if it % cfg.train.eval_every == 0 or it == cfg.train.iterations:
        evals["last"] = evaluate(run, it)
        metrics |= evals["last"]
        sinks.append_transcripts(
            run.out / "transcripts.jsonl", episodes[: cfg.train.transcripts], it
        )
    return metrics


def save_checkpoint(policy: LMPolicy, folder: Path, *, game: PlayedGame | None = None) -> Path:
    """``save_policy`` into ``folder`` atomically: a kill leaves the old folder or none."""
    with atomic_dir(folder) as tmp:
        save_policy(policy, tmp, game=game)
    return folder


def _begin(run: Run, resume: bool) -> tuple[int, dict[str, dict[str, float]], float]:
    """Iterations already done, the evaluations so far (initial, last) and the seconds
    earlier segments took. Resuming loads the state before writing anything."""
    metrics_file = run.out / "metrics.jsonl"
    if resume:
        return rundir.resume(run.out, run.cfg, LOGS, lambda: load_state(run))
    initial = evaluate(run, 0)
    sinks.append_metrics(metrics_file, 0, initial)
    return 0, {"initial": initial, "last": initial}, 0.0
