"""Evaluation of a run's policies: exact exploitability where the game allows it,
matches against each evaluation opponent, exact match outcomes, self-play welfare.

``evaluate`` judges one learner (its final policy: the learner or its magnet);
``evaluate_roster`` a roster's seated profile and each of its learners. Pure
functions of the run: the ``Evaluate`` hook logs what they return.
"""

from __future__ import annotations

from collections.abc import Sequence

from coplay.envs.registry import game_metrics
from coplay.eval.exact import exploitability
from coplay.eval.exact_match import exact_outcomes, sampled_and_greedy_outcomes
from coplay.eval.matches import play_match
from coplay.eval.sampled import (
    Estimate,
    SampledPolicy,
    as_metrics,
    bootstrap,
    exploitability_metric,
    forfeiting_exploitability,
    outcomes_against_metric,
    outcomes_metric,
)
from coplay.eval.welfare import welfare_report
from coplay.policies.lm import LMPolicy
from coplay.rollout.engine import play_episodes
from coplay.train.loop import Run
from coplay.train.trainee import Trainee
from coplay.types import GameKind, Observation, Policy


def final_policy(run: Run) -> LMPolicy:
    """The policy the run evaluates and saves: the learner, or its magnet."""
    learner = run.trainees[0].learner
    magnet = run.cfg.magnet
    if magnet is not None and magnet.final and learner.reference is not None:
        return learner.reference
    return learner.policy


def evaluate(run: Run) -> dict[str, float]:
    """Exact exploitability where the game allows it, and matches against each opponent,
    of ``final_policy(run)`` (with the learner's own exploitability when that differs)."""
    cfg, policy = run.cfg, final_policy(run)
    views = Views(run)
    m: dict[str, float] = {}
    if run.exact and writes(policy):
        m |= sampled_exploitability_metrics(views, policy, "eval/")
        if policy is not run.trainees[0].policy:
            m |= sampled_exploitability_metrics(views, run.trainees[0].policy, "eval/learner/")
    elif run.exact:
        res = exploitability(policy, cfg.game.name, params=cfg.game.params)
        m["eval/exploitability"] = res.exploitability
        m["eval/nash_conv"] = res.nash_conv
        if policy is not run.trainees[0].policy:
            own = exploitability(run.trainees[0].policy, cfg.game.name, params=cfg.game.params)
            m["eval/learner/exploitability"] = own.exploitability
    n = run.spec.num_players
    if run.spec.kind != GameKind.ZERO_SUM:
        m |= selfplay_metrics(run)
    for i, (name, opp) in enumerate(run.eval_opponents.items()):
        res = play_match(
            run.game.make,
            policy,
            [opp] * (n - 1),
            episodes=cfg.train.eval_episodes,
            seed=10_000 + i,
            invalid=cfg.game.invalid,
            max_turns=cfg.game.max_turns,  # the game as trained
        )
        m[f"eval/{name}/win"] = res.win.value
        m[f"eval/{name}/draw"] = res.draw.value
        m[f"eval/{name}/loss"] = res.loss.value
        m[f"eval/{name}/mean_return"] = res.mean_return.value
        for seat, loss in enumerate(res.loss_by_seat):
            m[f"eval/{name}/loss_seat{seat}"] = loss.value
        if name in run.exact_matches:
            m |= exact_match_metrics(views, policy, name, opp)
            if policy is not run.trainees[0].policy:
                own = exact_match_metrics(views, run.trainees[0].policy, name, opp)
                m |= {k.replace("eval/", "eval/learner/", 1): v for k, v in own.items()}
    return m


def writes(policy: Policy) -> bool:
    """Whether ``policy`` answers in free text: its distribution is then what its
    answers parse to, estimated by sampling (``coplay.eval.sampled``), never the
    choice-mode scores its ``action_probs`` would report."""
    return getattr(policy, "mode", "choice") == "text"


class Views:
    """What one evaluation's exact metrics read of each policy: the policy itself, or
    if it writes, its sampled distribution, built once. Every metric then reads the
    same answers, asked once per state; a view per metric would ask K answers per
    state again for each (the same estimate, when the policy draws from streams)."""

    def __init__(self, run: Run) -> None:
        self.run = run
        self._views: dict[int, tuple[Policy, SampledPolicy]] = {}
        """id of the policy -> (the policy, kept so the id stays its own; its view)."""

    def __call__(self, policy: Policy) -> Policy:
        return self.sampled(policy) if writes(policy) else policy

    def sampled(self, policy: Policy) -> SampledPolicy:
        """``policy``'s sampled distribution (``sampled_view``), the same object on
        every call of this evaluation."""
        if id(policy) not in self._views:
            self._views[id(policy)] = (policy, sampled_view(self.run, policy))
        return self._views[id(policy)][1]


def sampled_view(run: Run, policy: Policy) -> SampledPolicy:
    """``policy``'s sampled distribution, its answers keyed by the run's seed and asked
    on the run's Ray workers where it has them (``rollout.workers``: they hold the
    learner already and fetch only newer weights), else in this process; both give
    the same estimate."""
    return SampledPolicy(
        policy,
        k=run.cfg.train.eval_samples,
        invalid=run.cfg.game.invalid,
        seed=run.cfg.train.seed,
        sampler=getattr(run.source, "tally", None),
    )


def sampled_exploitability_metrics(views: Views, policy: Policy, prefix: str) -> dict[str, float]:
    """Exploitability and NashConv of a text policy's sampled distribution, with their
    bootstrap intervals and K (``{prefix}exploitability_sampled``, ``..._ci_low``, ...),
    and the share of invalid answers among the samples."""
    run = views.run
    game = run.cfg.game
    est = views.sampled(policy)
    res = bootstrap(
        exploitability_metric(game.name, game.params),
        est,
        replicates=run.cfg.train.eval_bootstrap,
        seed=run.cfg.train.seed,
    )
    return as_metrics(prefix, res) | {f"{prefix}invalid_rate_sampled": est.invalid_rate()}


def exact_match_metrics(views: Views, policy: Policy, name: str, opp: Policy) -> dict[str, float]:
    """The policy's exact outcome from each seat against ``opp`` (no sampling noise),
    and in perfect-information games that of its greedy version too. Where either side
    writes, the outcomes are those of its sampled distribution, with intervals over its
    answers (``*_sampled``; no greedy rows): the policy's where it writes (a writing
    opponent then read through its estimate, held fixed), else the opponent's."""
    run = views.run
    game, params = run.cfg.game.name, run.cfg.game.params
    if writes(policy):
        metric = outcomes_metric(views(opp), game, params)
        return as_metrics(f"eval/{name}/", _bootstrap(views, metric, views.sampled(policy)))
    if writes(opp):
        metric = outcomes_against_metric(policy, game, params)
        return as_metrics(f"eval/{name}/", _bootstrap(views, metric, views.sampled(opp)))
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


def _bootstrap(views: Views, metric, sampled: SampledPolicy) -> dict[str, Estimate]:
    cfg = views.run.cfg.train
    return bootstrap(metric, sampled, replicates=cfg.eval_bootstrap, seed=cfg.seed)


def selfplay_metrics(run: Run) -> dict[str, float]:
    """The learner in every seat, on fixed evaluation seeds: what general-sum and
    cooperative games are judged by (each seat's return and their sum, the welfare)."""
    cfg = run.cfg
    me = final_policy(run)
    episodes = play_episodes(
        run.game.make,
        [[me] * run.spec.num_players] * cfg.train.eval_episodes,
        [20_000 + i for i in range(cfg.train.eval_episodes)],
        invalid=cfg.game.invalid,
        max_turns=cfg.game.max_turns,
    )
    report = welfare_report(
        episodes, min_return=run.spec.min_return, max_return=run.spec.max_return
    )
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


def evaluate_roster(run: Run) -> dict[str, float]:
    """Exact exploitability of the seated profile (and of every learner that plays all
    seats) where the game allows it; matches of every learner against each opponent."""
    m: dict[str, float] = {}
    seating, game = run.seating, run.cfg.game
    n = run.spec.num_players
    views = Views(run)
    # Members that write (learners or frozen checkpoints) are read through their sampled
    # distributions (point estimates here) and every exact number of the roster then
    # says so: a ``_sampled`` suffix; the exact values against a writing opponent too.
    members = [*run.policies.values(), *(t.policy for t in run.trainees)]
    tag = "_sampled" if any(writes(p) for p in members) else ""
    if run.exact:
        profile = [views(run.policies[p]) for p in seating.rows(1, run.rng)[0]]
        res = forfeiting_exploitability(SeatedPolicy(profile), game.name, params=game.params)
        m[f"eval/exploitability{tag}"], m[f"eval/nash_conv{tag}"] = (
            res.exploitability,
            res.nash_conv,
        )
        for seat, v in enumerate(res.on_policy_values):
            m[f"eval/value_seat{seat}{tag}"] = v
    for member in run.trainees:
        if run.exact and (seating.rotate or set(seating.order) == {member.name}):
            res = forfeiting_exploitability(views(member.policy), game.name, params=game.params)
            m[f"eval/{member.name}/exploitability{tag}"] = res.exploitability
        for i, (opp_name, opp) in enumerate(run.eval_opponents.items()):
            if run.exact:
                against = "_sampled" if writes(opp) else tag
                m |= {k + against: v for k, v in exact_values(views, member, opp, opp_name).items()}
            match = play_match(
                run.game.make,
                member.policy,
                [opp] * (n - 1),
                episodes=run.cfg.train.eval_episodes,
                seed=10_000 + i,
                invalid=game.invalid,
                max_turns=game.max_turns,
            )
            m[f"eval/{member.name}/{opp_name}/mean_return"] = match.mean_return.value
            for seat, ret in enumerate(match.mean_return_by_seat):
                m[f"eval/{member.name}/{opp_name}/return_seat{seat}"] = ret
    return m


def exact_values(views: Views, member: Trainee, opp: Policy, opp_name: str) -> dict[str, float]:
    """Exact expected return of ``member`` in each seat it holds (unrotated seating)
    with ``opp`` in every other seat: no match noise (either side read through its
    sampled distribution where it writes)."""
    run = views.run
    m, game, n = {}, run.cfg.game, run.spec.num_players
    for seat in sorted({s for s, name in enumerate(run.seating.order) if name == member.name}):
        profile = [views(opp)] * n
        profile[seat] = views(member.policy)
        res = forfeiting_exploitability(SeatedPolicy(profile), game.name, params=game.params)
        m[f"eval/{member.name}/{opp_name}/exact_value_seat{seat}"] = res.on_policy_values[seat]
    return m


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
