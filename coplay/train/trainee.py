"""One learner's side of the loop: its estimator, sample filters, update and critic.

A run holds one ``Trainee`` per learning policy (a roster several). ``learn`` turns a
played batch into that policy's update: values from its critic where the estimator
reads them, advantages (with the estimator's own small state), the samples of its
own decisions, the filters, the policy update (``learner_update.update``) and the critic's
regression. ``state`` / ``load`` give what a resumed run needs of it.
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from coplay.algos.advantages import Advantages, Estimator
from coplay.algos.advantages.base import BASELINE_KEY, policy_turn_metrics
from coplay.algos.losses.filters import filter_metrics, informative_groups, nonzero_advantage_mask
from coplay.policies.lm import LMPolicy
from coplay.rollout.engine import collector_paused
from coplay.rollout.restarts import opening_targets
from coplay.train.checkpoints.state import load_weights
from coplay.train.critic import Critic, critic_update, fill_values
from coplay.train.format_reward import add_format_rewards
from coplay.train.learner import (
    Learner,
    Sample,
    load_optimizer,
    load_schedule,
    load_terms_state,
    lr_scale,
    recall,
    terms_state,
)
from coplay.train.learner_update import collect_samples, update
from coplay.types import Episode


@dataclass
class Trainee:
    """A learning policy with everything that updates it."""

    name: str
    """Its policy id in episodes."""
    learner: Learner
    estimator: Estimator
    adv_state: Any
    algo: Any
    """Its ``AlgoConfig`` (estimator and sample filters)."""
    critic: Critic | None = None
    """Value model, present when the estimator reads per-turn values (GAE)."""

    @property
    def policy(self) -> LMPolicy:
        return self.learner.policy

    def learn(self, episodes: Sequence[Episode], rng: np.random.Generator) -> dict[str, float]:
        """Advantages, then the policy (and critic) update; ``adv/*``, ``loss/*`` and
        ``critic/*`` metrics. The garbage collector is paused meanwhile, as in play:
        an update makes no reference cycles, only collector passes
        (``collector_paused``)."""
        t0 = time.perf_counter()
        with collector_paused():
            metrics = self._learn(episodes, rng)
        metrics["perf/update_s"] = time.perf_counter() - t0
        return metrics

    def _learn(self, episodes: Sequence[Episode], rng: np.random.Generator) -> dict[str, float]:
        shaped = self.format_rewards(episodes)
        if self.critic is not None:
            fill_values(self.critic, episodes)
        est = self.estimator.estimate(episodes, self.adv_state)
        self.adv_state = est.state
        keep = informative_seats(episodes) if self.algo.filter_flat_groups else None
        targets = opening_targets(episodes) if "target" in self.learner.terms else None
        samples = collect_samples(episodes, est.advantages, self.name, keep=keep, targets=targets)
        # before the filter, which may drop a target whose advantage is 0
        replayed, recalled = recall(self.learner, samples)
        samples, filtered = filter_samples(self.algo, samples, keep, episodes, self.name)
        # The estimate's adv/mean, std, num_turns and baselines count every seat's
        # turns, an opponent's too: ours only.
        own = policy_turn_metrics(episodes, est.advantages, self.name, est.baselines)
        estimated = {k: v for k, v in est.metrics.items() if not k.startswith(BASELINE_KEY)}
        metrics = {**estimated, **own, **filtered}
        scale = lr_scale(self.learner)  # this update's, before it steps the schedule
        metrics |= update(self.learner, samples + replayed, rng)
        metrics |= recalled | shaped
        if self.critic is not None and est.value_targets is not None:
            turns, targets = learner_turns(episodes, est.value_targets, self.name)
            metrics |= critic_update(
                self.critic, turns, targets, rng, epochs=self.learner.epochs, lr_scale=scale
            )
        return metrics

    def format_rewards(self, episodes: Sequence[Episode]) -> dict[str, float]:
        """Add text mode's format reward to this learner's returns (``model.text``)."""
        if getattr(self.policy, "mode", None) != "text":
            return {}
        text = self.policy.text
        return add_format_rewards(
            episodes, self.name, reward=text.format_reward, penalty=text.format_penalty
        )

    def state(self) -> dict[str, Any]:
        """What a resumed run needs of this learner besides its weights (saved once
        per model by the run): optimizer, schedule, loss terms (the magnet, the memory
        of targets), estimator state and critic."""
        learner, critic = self.learner, self.critic
        return {
            "version": learner.policy.version,
            "optimizer": learner.optimizer.state_dict(),
            "scheduler": learner.scheduler.state_dict() if learner.scheduler else None,
            "terms": terms_state(learner),
            "adv_state": self.adv_state,
            "critic": (
                {"model": critic.model.state_dict(), "opt": critic.optimizer.state_dict()}
                if critic is not None
                else None
            ),
        }

    def load(self, tree: dict[str, Any], source: Path) -> None:
        """Restore what ``state`` gave; ``source`` names the file in errors. The learning
        rates and weight decay stay this run's config's (a resume may change them), the
        schedule's at the restored step; an estimator changed to one that keeps another
        kind of state starts its own afresh (``fitting_adv_state``)."""
        learner = self.learner
        # The weights were restored into the model first: the backend runs them as the
        # version they were saved at, as it would have without the interruption.
        learner.policy.publish(int(tree["version"]))
        load_optimizer(learner.optimizer, tree["optimizer"])
        load_schedule(learner, tree["scheduler"])
        load_terms_state(learner, tree["terms"])
        self.adv_state = self.fitting_adv_state(tree["adv_state"], source)
        if self.critic is not None and tree["critic"] is not None:
            load_weights(self.critic.model, tree["critic"]["model"], source)
            load_optimizer(self.critic.optimizer, tree["critic"]["opt"])
        elif (self.critic is None) != (tree["critic"] is None):
            self.warn_critic_changed(source)

    def warn_critic_changed(self, source: Path) -> None:
        """One warning where a resume's ``algo.estimator`` adds a value model the run did
        not save (it starts afresh) or drops the one it saved (left unused): either was
        silent, and a critic trained from scratch mid-run is worth knowing about."""
        what = "starts afresh" if self.critic is not None else "is not used"
        keeps = "one" if self.critic is not None else "none"
        warnings.warn(
            f"{source}: learner {self.name!r}'s value model {what}: algo.estimator "
            f"{self.algo.estimator!r} keeps {keeps}, the saved run "
            f"{'did not' if self.critic is not None else 'did'}",
            stacklevel=3,
        )

    def fitting_adv_state(self, saved: Any, source: Path) -> Any:
        """The saved estimator state, or, where ``algo.estimator`` now names one keeping
        another kind (a resume may change it), this one's initial state with a warning:
        the saved kind failed at the first update (RAE's baselines read from GRPO's
        empty state)."""
        fresh = self.estimator.init()
        if type(saved) is type(fresh):
            return saved
        warnings.warn(
            f"{source}: learner {self.name!r}'s saved advantage state "
            f"({type(saved).__name__}) is not what algo.estimator {self.algo.estimator!r} "
            f"keeps ({type(fresh).__name__}): its state starts afresh",
            stacklevel=2,
        )
        return fresh


def informative_seats(episodes: Sequence[Episode]) -> set[tuple[int, int]]:
    """(episode index, seat) pairs whose group (same game, group id and seat) has
    returns that are not all equal; the others carry no group-relative signal."""
    pairs = [(i, seat) for i, e in enumerate(episodes) for seat in range(len(e.returns))]
    keys = [(episodes[i].game, episodes[i].group_id, seat) for i, seat in pairs]
    rets = [episodes[i].returns[seat] for i, seat in pairs]
    keep = informative_groups(keys, rets)
    return {pair for pair, k in zip(pairs, keep, strict=True) if k}


def filter_samples(
    algo: Any,
    samples: list[Sample],
    keep: set[tuple[int, int]] | None,
    episodes: Sequence[Episode],
    policy_id: str,
) -> tuple[list[Sample], dict[str, float]]:
    """Apply the zero-advantage filter; report what each filter dropped. The flat-group
    filter's share is of ``policy_id``'s (episode, seat) pairs, whose samples it drops."""
    metrics: dict[str, float] = {}
    if keep is not None:
        own = [
            (i, s) for i, e in enumerate(episodes) for s, p in enumerate(e.seats) if p == policy_id
        ]
        kept = sum(pair in keep for pair in own)
        metrics["adv/flat_group_dropped_frac"] = 1.0 - kept / max(1, len(own))
    if algo.filter_zero_advantage:
        # A sample with a policy-iteration target stays: its cross-entropy pull does not
        # depend on the advantage, and the memory replays no position with a fresh target.
        targets = np.fromiter((s.target is not None for s in samples), bool, len(samples))
        mask = nonzero_advantage_mask([s.advantage for s in samples]) | targets
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
