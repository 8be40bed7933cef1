"""Learner update throughput against a raw forward + backward + step of the same model.

Arms, timed alternately on the same samples (medians of ``--repeats``, decisions/s),
with the heap alive at the start frozen as the training loop freezes it
(``coplay.train.loop.heap_frozen``):

- ``learner``: the preset's update as the training loop runs it (``Trainee.learn``:
  advantages, samples, every loss term, the epochs' minibatches and micro-batches).
- ``raw``: the model work that update cannot do without, on token tensors built before
  the clock starts, with the same prefix sharing (``rollout_throughput.item_groups``)
  and the same minibatches and micro-batches: per micro-batch the forward pass to the
  chosen actions' renormalised log-probs, a policy-gradient loss and its backward
  pass; per minibatch the gradient clipping and the AdamW step; where the preset has
  a KL term, the reference's no-grad forward once per decision.
- ``plain`` (``--plain``): the raw arm plus the preset's objective written out in plain
  tensor code on the same tensors: the PPO-clip surrogate against the recorded
  log-probs, the entropy bonus at this update's weight, the KL to the reference (its
  log-probs taken once per update, as the learner takes them) and the magnet's move,
  with the metrics the learner reports read once per micro-batch. Its update equals
  the learner's (tested), so learner / plain is what the learner's bookkeeping costs
  beyond the objective's own arithmetic, and plain / raw what that arithmetic costs.
  It writes out PPO-clip, the entropy and the KL aggregated by ``token_mean``; a preset
  with another term or setting is one error line.

Choice mode (every bundled preset's). Printed: each arm's median and the ratios
learner / raw (with ``--plain`` also learner / plain and plain / raw), of the medians
and as the median of each repeat's own ratio ("paired");
``--json`` writes them. ``--split`` (CPU only) also times, inside each arm, the model's forward
passes, the backward passes and the optimizer's steps, and prints their medians and
the rest: each arm's own work around the model (the learner's advantages, samples,
losses and metrics; the raw arm's log-softmax, loss and clipping).

    python benchmarks/learner_throughput.py --preset kuhn-selfplay --repeats 5
    python benchmarks/learner_throughput.py --preset kuhn-selfplay model.tiny.hidden_size=256
    python benchmarks/learner_throughput.py --preset kuhn-selfplay --repeats 11 --plain

Overrides after the options (``KEY=VALUE``, as in ``coplay train``) change the preset:
the learner's own time per update does not grow with the model, so learner / raw does.
``model.device=cuda`` runs every arm on a GPU: the raw and plain arms' tensors are
moved there before their clocks start, and each arm's clock stops once the GPU is done.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager, nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

import numpy as np
import torch
import torch.nn.functional as F
from rollout_throughput import device_of, group_table, item_groups, synchronize
from timers import Clock, patched

from coplay.algos.losses.regularizers import KLConfig, kl_penalty
from coplay.policies.choices import distinct_items
from coplay.policies.prefixes import prefix_groups
from coplay.train.config import ConfigError
from coplay.train.learner import Learner, Sample
from coplay.train.learner_update import collect_samples
from coplay.train.loop import heap_frozen, make_plan
from coplay.train.micro import learner_micro_batches, learner_passes, together
from coplay.train.parts.kl import move_magnet
from coplay.train.settings import build_config
from coplay.train.trainer import setup


def samples_of(trainee, episodes) -> list[Sample]:
    """The samples ``Trainee.learn`` would update on (advantages, no filters)."""
    est = trainee.estimator.estimate(episodes, trainee.adv_state)
    return collect_samples(episodes, est.advantages, trainee.name)


class Micro(NamedTuple):
    """One micro-batch's tensors, built before the clock starts."""

    groups: list  # its distinct items' scoring groups (``item_groups``)
    rows: torch.Tensor  # (B,) each sample's row in the groups' stacked tables
    index: torch.Tensor  # (B,) each sample's chosen action
    adv: torch.Tensor  # (B,) advantages
    old: torch.Tensor  # (B,) recorded log-probs of the chosen actions
    which: torch.Tensor  # (B,) each sample's index among the update's samples


def grouped(items: Sequence[tuple], pad: int, device) -> tuple[list, torch.Tensor]:
    """``items``' distinct entries as scoring groups on ``device``, and each item's row
    in the groups' tables stacked (on the CPU)."""
    unique, inverse = distinct_items(items)
    split = prefix_groups([p for p, _ in unique])
    stacked = [i for g in split for i in g]
    at = np.empty(len(unique), dtype=np.int64)
    at[stacked] = np.arange(len(stacked))
    return item_groups([unique[i] for i in stacked], pad, device), torch.from_numpy(at[inverse])


def prepare(learner: Learner, samples: Sequence[Sample], rng_seed: int, epochs: int):
    """Per epoch and minibatch, as the learner cuts them: its ``Micro`` s (on the
    model's device) and size."""
    pad, device = learner.policy.tokenizer.pad_token_id or 0, device_of(learner.policy.model)
    rng = np.random.default_rng(rng_seed)
    plan = []
    for _ in range(epochs):
        order = rng.permutation(len(samples))
        for start in range(0, len(samples), learner.minibatch_size):
            minibatch = order[start : start + learner.minibatch_size].tolist()
            decisions = [samples[i].decision for i in minibatch]
            cuts = learner_micro_batches(learner, decisions)
            if len(cuts) > 1:  # as the learner cuts it: each state's copies in one pass
                minibatch = [minibatch[i] for i in together(decisions)]
                cuts = learner_micro_batches(learner, [samples[i].decision for i in minibatch])
            micros = []
            for s, e in cuts:
                part = [samples[i] for i in minibatch[s:e]]
                groups, rows = grouped(
                    [(x.decision.prompt_ids, x.decision.choice_ids) for x in part], pad, device
                )
                tensors = (
                    rows,
                    torch.tensor([x.decision.choice_index for x in part]),
                    torch.tensor([x.advantage for x in part]),
                    torch.tensor([x.decision.logprobs[0] for x in part]),
                    torch.tensor(minibatch[s:e]),
                )
                micros.append(Micro(groups, *(t.to(device) for t in tensors)))
            plan.append((micros, len(minibatch)))
    return plan


def reference_plan(learner: Learner, samples: Sequence[Sample]) -> tuple[list, torch.Tensor]:
    """The KL reference's no-grad passes over the update's samples, as the learner cuts
    them (``learner_passes``): each pass's groups, and each sample's row in all the
    passes' tables stacked."""
    pad, device = learner.policy.tokenizer.pad_token_id or 0, device_of(learner.policy.model)
    rows = np.empty(len(samples), dtype=np.int64)
    passes, first = [], 0
    for part in learner_passes(learner, [s.decision for s in samples]):
        items = [(samples[i].decision.prompt_ids, samples[i].decision.choice_ids) for i in part]
        groups, at = grouped(items, pad, device)
        rows[part] = at.numpy() + first
        first += sum(g.shape[0] for g in groups)
        passes.append(groups)
    return passes, torch.from_numpy(rows).to(device)


def stacked(tables: Sequence[torch.Tensor]) -> torch.Tensor:
    """(B_i, K_i) action tables as one (sum B_i, max K_i), -inf past a row's last."""
    width = max(t.shape[1] for t in tables)
    return torch.cat([F.pad(t, (0, width - t.shape[1]), value=-torch.inf) for t in tables])


def stacked_table(model, groups: Sequence, temperature: float) -> torch.Tensor:
    """(U, K) action log-probs of the groups' rows, one table."""
    return stacked([group_table(model, g, temperature) for g in groups])


def raw_update(learner: Learner, plan, reference) -> None:
    """The timed raw arm: forward + backward + clip + step per minibatch."""
    model, temp = learner.policy.model, learner.policy.temperature
    if reference is not None:
        with torch.no_grad():
            for groups in reference[0]:
                for g in groups:
                    group_table(model, g, temp)
    model.train()
    params = [p for group in learner.optimizer.param_groups for p in group["params"]]
    for micros, size in plan:
        learner.optimizer.zero_grad(set_to_none=True)
        for m in micros:
            table = stacked_table(model, m.groups, temp)
            loss = -(m.adv * table[m.rows, m.index]).sum() / size
            loss.backward()
        torch.nn.utils.clip_grad_norm_(params, learner.max_grad_norm)
        learner.optimizer.step()
    model.eval()


@dataclass(frozen=True)
class Objective:
    """The preset's objective as the plain arm writes it out."""

    clip: tuple[float, float]
    """The ratio's range: 1 - clip_low, 1 + clip_high."""
    entropy: float
    """The entropy bonus's weight at this update (0: none)."""
    kl: KLConfig | None
    reference: torch.nn.Module | None
    """The KL reference's model (the magnet where it moves)."""
    ema: float
    """How far the magnet moves toward the policy after the update."""


class Unsupported(ValueError):
    """A preset whose objective the plain arm does not write out."""


def objective(learner: Learner) -> Objective:
    """What the plain arm writes out of ``learner``'s objective (``Unsupported``, naming
    what it does not write out)."""
    loss = learner.loss
    other = sorted(set(learner.terms) - {"kl", "entropy"})
    entropy = learner.terms.get("entropy")
    unsupported = [
        *(f"the {name} term" for name in other),
        *(["loss.aggregation " + loss.aggregation] if loss.aggregation != "token_mean" else []),
        *(["loss.dual_clip"] if loss.dual_clip is not None else []),
        *(["truncated IS weights (rollout.explore)"] if learner.tis_cap is not None else []),
        *(["loss.entropy.over: actions"] if entropy and entropy.cfg.over == "actions" else []),
    ]
    if unsupported:
        raise Unsupported(
            "--plain writes out PPO-clip, the entropy and the KL by token_mean only; "
            f"this preset has {', '.join(unsupported)}"
        )
    kl = learner.terms.get("kl")
    return Objective(
        clip=(1.0 - loss.clip_low, 1.0 + loss.clip_high),
        entropy=entropy.weight(learner.policy.version) if entropy else 0.0,
        kl=loss.kl,
        reference=kl.reference.model if kl is not None else None,
        ema=kl.ema if kl is not None else 0.0,
    )


REPORTED = (
    "loss/policy",
    "loss/clip_frac",
    "loss/approx_kl",
    "loss/ratio_min",
    "loss/ratio_max",
    "loss/entropy",
    "loss/kl",
    "loss/total",
)
"""What the learner reports of each micro-batch, as the plain arm reads it."""


def plain_update(learner: Learner, plan, reference, goal: Objective) -> list[dict[str, float]]:
    """The timed plain arm: the raw arm with the preset's objective written out. Returns
    each micro-batch's ``REPORTED`` metrics, a minibatch's last with its gradient norm."""
    model, temp = learner.policy.model, learner.policy.temperature
    ref_table = None
    if goal.kl is not None:
        with torch.no_grad():
            ref_table = stacked([stacked_table(goal.reference, g, temp) for g in reference[0]])
    model.train()
    params = [p for group in learner.optimizer.param_groups for p in group["params"]]
    seen: list[dict[str, float]] = []
    for micros, size in plan:
        learner.optimizer.zero_grad(set_to_none=True)
        for m in micros:
            table = stacked_table(model, m.groups, temp)
            logp = table[m.rows, m.index]
            log_ratio = logp - m.old
            ratio = log_ratio.exp()
            unclipped, clipped = -ratio * m.adv, -ratio.clamp(*goal.clip) * m.adv
            surrogate = torch.maximum(unclipped, clipped)
            loss = surrogate.sum()
            entropy = -(table.exp() * table.masked_fill(table.isinf(), 0.0)).sum(1)[m.rows]
            if goal.entropy > 0.0:
                loss = loss - goal.entropy * entropy.sum()
            kl = logp.new_zeros(())
            if ref_table is not None:
                ref_logp = ref_table[reference[1][m.which], m.index]
                kl = kl_penalty(logp, ref_logp, estimator=goal.kl.estimator).sum()
                loss = loss + goal.kl.coef * kl
            loss = loss / size
            loss.backward()
            with torch.no_grad():  # one read of all of them
                values = torch.stack(
                    [
                        surrogate.sum() / size,
                        (clipped > unclipped).float().mean(),
                        ((ratio - 1.0) - log_ratio).mean(),
                        ratio.min(),
                        ratio.max(),
                        entropy.mean(),
                        kl / size,
                        loss,
                    ]
                )
            seen.append(dict(zip(REPORTED, values.tolist(), strict=True)))
        norm = torch.nn.utils.clip_grad_norm_(params, learner.max_grad_norm)
        seen[-1]["loss/grad_norm"] = float(norm)
        learner.optimizer.step()
    model.eval()
    if goal.ema > 0.0:
        move_magnet(goal.reference, model, goal.ema)
    return seen


class Parts:
    """``--split``: seconds spent in the model's forward passes (the reference's too),
    in backward passes and in the optimizer's steps since the last ``take``."""

    KINDS = ("forward", "backward", "step")

    def __init__(self) -> None:
        self.clock = Clock()

    @contextmanager
    def watching(self, model, optimizer) -> Iterator[None]:
        """Time ``model``'s class forward, every tensor's backward and ``optimizer``'s
        steps while inside (none runs inside another, so their exclusive times are
        their whole times)."""
        with ExitStack() as stack:
            stack.enter_context(patched(type(model), "forward", self.clock, "forward"))
            stack.enter_context(patched(torch.Tensor, "backward", self.clock, "backward"))
            stack.enter_context(patched(optimizer, "step", self.clock, "step"))
            yield

    def take(self) -> dict[str, float]:
        out = {kind: self.clock.secs[kind] for kind in self.KINDS}
        self.clock.reset()
        return out


@contextmanager
def one_rollout(cfg) -> Iterator[tuple]:
    """A run of ``cfg`` set up in a scratch folder, its first trainee and the episodes
    of its first rollout: what an update is timed on."""
    with tempfile.TemporaryDirectory() as tmp:
        run = setup(cfg, Path(tmp))
        plan, _ = make_plan(run, 1)
        yield run, run.trainees[0], run.source.play(plan, run.policies).episodes


def measure(args: argparse.Namespace) -> dict:
    torch.set_num_threads(args.threads)
    cfg = args.config
    with one_rollout(cfg) as (run, trainee, episodes):
        samples = samples_of(trainee, episodes)
        learner = trainee.learner
        if args.plain:
            objective(learner)  # refused before anything is timed
        has_kl = learner.reference is not None and cfg.loss.kl is not None
        reference = reference_plan(learner, samples) if has_kl else None
        trainee.learn(episodes, run.rng)  # warm-up
        arms = ("learner", "raw", "plain") if args.plain else ("learner", "raw")
        device = device_of(learner.policy.model)
        secs: dict[str, list[float]] = {arm: [] for arm in arms}
        parts = Parts()
        split: dict[str, list[dict[str, float]]] = {arm: [] for arm in arms}
        watching = parts.watching(learner.policy.model, learner.optimizer)
        # The heap alive now left out of the collector's passes, as the loop leaves it.
        with heap_frozen(), watching if args.split else nullcontext():
            for r in range(args.repeats):
                for arm in arms[r % len(arms) :] + arms[: r % len(arms)]:
                    if arm == "learner":
                        parts.take()
                        start = time.perf_counter()
                        trainee.learn(episodes, run.rng)
                    else:
                        built = prepare(learner, samples, r, learner.epochs)
                        goal = objective(learner) if arm == "plain" else None
                        parts.take()
                        start = time.perf_counter()
                        if arm == "raw":
                            raw_update(learner, built, reference)
                        else:
                            plain_update(learner, built, reference, goal)
                    synchronize(device)  # a GPU's queued kernels count
                    secs[arm].append(time.perf_counter() - start)
                    took = parts.take()
                    split[arm].append(took | {"rest": secs[arm][-1] - sum(took.values())})
    med = {arm: statistics.median(v) for arm, v in secs.items()}
    n = len(samples) * learner.epochs
    ratios = {"learner/raw": ("learner", "raw")}
    if args.plain:
        ratios |= {"learner/plain": ("learner", "plain"), "plain/raw": ("plain", "raw")}
    return {
        "preset": args.preset,
        "overrides": args.overrides,
        "decisions": len(samples),
        "epochs": learner.epochs,
        "machine": f"{platform.machine()}, {torch.get_num_threads()} torch thread(s)",
        "median_s": med,
        "decisions_per_s": {arm: n / s for arm, s in med.items()},
        **{name: med[b] / med[a] for name, (a, b) in ratios.items()},
        # Each repeat's own ratio (its arms back to back), median: the machine's speed
        # drifts between repeats, which a ratio of medians does not cancel.
        **{
            f"paired {name}": statistics.median(
                y / x for x, y in zip(secs[a], secs[b], strict=True)
            )
            for name, (a, b) in ratios.items()
        },
        "seconds": secs,
        "split_s": split if args.split else None,
        "split_median_s": {
            arm: {k: statistics.median(x[k] for x in rows) for k in rows[0]}
            for arm, rows in split.items()
        }
        if args.split
        else None,
    }


def main(argv: Sequence[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--preset", default="kuhn-selfplay")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--json", type=Path)
    ap.add_argument(
        "--split", action="store_true", help="time forward, backward, step and the rest"
    )
    ap.add_argument(
        "--plain", action="store_true", help="also time the objective written out plainly"
    )
    ap.add_argument("overrides", nargs="*", metavar="KEY=VALUE", help="as in coplay train")
    args = ap.parse_args(argv)
    try:
        # The run's own setting, so that building the policy keeps the count asked for.
        threads = f"model.threads={args.threads}"
        args.config = build_config(preset=args.preset, overrides=[threads, *args.overrides])
    except ConfigError as err:
        ap.error(str(err))
    if args.split and args.config.model.device != "cpu":
        # Timed by the CPU's clock, a GPU's forward or backward call reads its launches.
        ap.error(
            f"--split times parts on the CPU only, not with model.device={args.config.model.device}"
        )
    try:
        result = measure(args)
    except Unsupported as err:
        ap.error(str(err))
    for arm, rate in result["decisions_per_s"].items():
        print(f"{arm:8s} {rate:9.1f} decisions/s ({result['median_s'][arm]:.3f} s median)")
    for name in ("learner/raw", "learner/plain", "plain/raw"):
        if name in result:
            print(f"{name} {result[name]:.3f}  paired {result['paired ' + name]:.3f}")
    for arm, part in (result["split_median_s"] or {}).items():
        print(f"{arm:8s} " + "  ".join(f"{k} {1e3 * v:.2f} ms" for k, v in part.items()))
    if args.json:
        args.json.write_text(json.dumps(result, indent=2))
    return result


if __name__ == "__main__":
    main()
