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

Choice mode (every bundled preset's). Printed: both medians and learner / raw (of the
medians, and the median of each repeat's own ratio: "paired");
``--json`` writes them. ``--split`` also times, inside each arm, the model's forward
passes, the backward passes and the optimizer's steps, and prints their medians and
the rest: each arm's own work around the model (the learner's advantages, samples,
losses and metrics; the raw arm's log-softmax, loss and clipping).

    python benchmarks/learner_throughput.py --preset kuhn-selfplay --repeats 5
    python benchmarks/learner_throughput.py --preset kuhn-selfplay model.tiny.hidden_size=256

Overrides after the options (``KEY=VALUE``, as in ``coplay train``) change the preset:
the learner's own time per update does not grow with the model, so learner / raw does.
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
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from rollout_throughput import group_table, item_groups
from timers import Clock, patched

from coplay.policies.scoring import distinct_items, prefix_groups
from coplay.train.config import ConfigError, build_config
from coplay.train.learner import Learner, Sample, collect_samples
from coplay.train.loop import heap_frozen, make_plan
from coplay.train.micro import learner_micro_batches, learner_passes, together
from coplay.train.trainer import setup


def samples_of(trainee, episodes) -> list[Sample]:
    """The samples ``Trainee.learn`` would update on (advantages, no filters)."""
    est = trainee.estimator.estimate(episodes, trainee.adv_state)
    return collect_samples(episodes, est.advantages, trainee.name)


def prepare(learner: Learner, samples: Sequence[Sample], rng_seed: int, epochs: int):
    """Per epoch and minibatch, per micro-batch: its groups and advantages, prebuilt."""
    pad = learner.policy.tokenizer.pad_token_id or 0
    rng = np.random.default_rng(rng_seed)
    plan = []
    for _ in range(epochs):
        order = rng.permutation(len(samples))
        for start in range(0, len(samples), learner.minibatch_size):
            minibatch = [samples[i] for i in order[start : start + learner.minibatch_size]]
            cuts = learner_micro_batches(learner, [x.decision for x in minibatch])
            if len(cuts) > 1:  # as the learner cuts it: each state's copies in one pass
                minibatch = [minibatch[i] for i in together([x.decision for x in minibatch])]
                cuts = learner_micro_batches(learner, [x.decision for x in minibatch])
            micros = []
            for s, e in cuts:
                part = minibatch[s:e]
                unique, inverse = distinct_items(
                    [(x.decision.prompt_ids, x.decision.choice_ids) for x in part]
                )
                split = prefix_groups([p for p, _ in unique])
                stacked = [i for g in split for i in g]
                # Row of each decision in the groups' stacked tables.
                at = np.empty(len(unique), dtype=np.int64)
                at[stacked] = np.arange(len(stacked))
                micros.append(
                    (
                        item_groups([unique[i] for i in stacked], pad),
                        torch.from_numpy(at[inverse]),
                        torch.tensor([x.decision.choice_index for x in part]),
                        torch.tensor([x.advantage for x in part]),
                    )
                )
            plan.append((micros, len(minibatch)))
    return plan


def raw_update(learner: Learner, plan, reference_groups) -> None:
    """The timed raw arm: forward + backward + clip + step per minibatch."""
    model, temp = learner.policy.model, learner.policy.temperature
    if reference_groups is not None:
        with torch.no_grad():
            for groups in reference_groups:
                for g in groups:
                    group_table(model, g, temp)
    model.train()
    params = [p for group in learner.optimizer.param_groups for p in group["params"]]
    for micros, size in plan:
        learner.optimizer.zero_grad(set_to_none=True)
        for groups, rows, index, adv in micros:
            tables = [group_table(model, g, temp) for g in groups]  # (B_g, K_g) each
            width = max(t.shape[1] for t in tables)
            table = torch.cat([F.pad(t, (0, width - t.shape[1]), value=-torch.inf) for t in tables])
            loss = -(adv * table[rows, index]).sum() / size
            loss.backward()
        torch.nn.utils.clip_grad_norm_(params, learner.max_grad_norm)
        learner.optimizer.step()
    model.eval()


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
        pad = learner.policy.tokenizer.pad_token_id or 0
        reference = None
        if learner.reference is not None and cfg.loss.kl is not None:
            parts = learner_passes(learner, [s.decision for s in samples])
            reference = [
                item_groups(
                    distinct_items(
                        [
                            (samples[i].decision.prompt_ids, samples[i].decision.choice_ids)
                            for i in rows
                        ]
                    )[0],
                    pad,
                )
                for rows in parts
            ]
        trainee.learn(episodes, run.rng)  # warm-up
        secs: dict[str, list[float]] = {"learner": [], "raw": []}
        parts = Parts()
        split: dict[str, list[dict[str, float]]] = {"learner": [], "raw": []}
        watching = parts.watching(learner.policy.model, learner.optimizer)
        # The heap alive now left out of the collector's passes, as the loop leaves it.
        with heap_frozen(), watching if args.split else nullcontext():
            for r in range(args.repeats):
                for arm in ("learner", "raw") if r % 2 == 0 else ("raw", "learner"):
                    if arm == "raw":
                        built = prepare(learner, samples, r, learner.epochs)
                        parts.take()
                        start = time.perf_counter()
                        raw_update(learner, built, reference)
                    else:
                        parts.take()
                        start = time.perf_counter()
                        trainee.learn(episodes, run.rng)
                    secs[arm].append(time.perf_counter() - start)
                    took = parts.take()
                    split[arm].append(took | {"rest": secs[arm][-1] - sum(took.values())})
    med = {arm: statistics.median(v) for arm, v in secs.items()}
    n = len(samples) * learner.epochs
    return {
        "preset": args.preset,
        "overrides": args.overrides,
        "decisions": len(samples),
        "epochs": learner.epochs,
        "machine": f"{platform.machine()}, {torch.get_num_threads()} torch thread(s)",
        "median_s": med,
        "decisions_per_s": {arm: n / s for arm, s in med.items()},
        "learner/raw": med["raw"] / med["learner"],
        # Each repeat's own ratio (its arms back to back), median: the machine's speed
        # drifts between repeats, which a ratio of medians does not cancel.
        "paired learner/raw": statistics.median(
            r / a for r, a in zip(secs["raw"], secs["learner"], strict=True)
        ),
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
    ap.add_argument("overrides", nargs="*", metavar="KEY=VALUE", help="as in coplay train")
    args = ap.parse_args(argv)
    try:
        args.config = build_config(preset=args.preset, overrides=args.overrides)
    except ConfigError as err:
        ap.error(str(err))
    result = measure(args)
    for arm, rate in result["decisions_per_s"].items():
        print(f"{arm:8s} {rate:9.1f} decisions/s ({result['median_s'][arm]:.3f} s median)")
    print(f"learner/raw {result['learner/raw']:.3f}")
    print(f"paired learner/raw {result['paired learner/raw']:.3f}")
    for arm, part in (result["split_median_s"] or {}).items():
        print(f"{arm:8s} " + "  ".join(f"{k} {1e3 * v:.2f} ms" for k, v in part.items()))
    if args.json:
        args.json.write_text(json.dumps(result, indent=2))
    return result


if __name__ == "__main__":
    main()
