"""Ray rollout workers: sync equals local, async within its staleness bound, a killed
worker's groups replayed, and all of it across the two nodes of a local cluster.

One two-node cluster (one CPU each) and one pair of workers serve the whole module:
starting Ray and a worker's imports cost far more than the tiny runs themselves."""

from __future__ import annotations

import os
import signal
import threading
import time

import pytest
import torch

from coplay.distributed.config import RayConfig
from coplay.envs.gameref import GameRef
from coplay.policies.scripted import RandomPolicy
from coplay.rollout.source import LocalSource, Plan
from coplay.train.config import build_config
from coplay.train.loop import run_loop
from coplay.train.trainer import setup
from tests.rollout.test_source import without_logprobs
from tests.train.runs import TINY, Capture

ray = pytest.importorskip("ray")
from coplay.distributed.source import RaySource, split, start_workers  # noqa: E402

pytestmark = pytest.mark.ray

KUHN = [*TINY, "rollout.games_per_iter=16", "rollout.group_size=4", "algo.estimator=grpo"]
"""Four groups of four Kuhn games per iteration, group baselines."""


@pytest.fixture(scope="module")
def pool():
    """Two rollout workers, one on each node of a local two-node cluster."""
    from ray.cluster_utils import Cluster

    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1})
    cluster.add_node(num_cpus=1)
    ray.init(address=cluster.address, include_dashboard=False, log_to_driver=False)
    try:
        yield start_workers(GameRef("kuhn_poker"), 2, RayConfig())
    finally:
        ray.shutdown()
        cluster.shutdown()


def on(actors, **kwargs) -> RaySource:
    """A source playing Kuhn on ``actors``."""
    return RaySource(GameRef("kuhn_poker"), workers=len(actors), actors=actors, **kwargs)


def train(tmp_path, source=None, iterations=3, extra=()):
    """A tiny Kuhn run of ``iterations``, played by ``source`` (default: local)."""
    cfg = build_config(overrides=[*KUHN, f"train.iterations={iterations}", *extra])
    run = setup(cfg, tmp_path)
    if source is not None:
        run.source = source
    capture = Capture()
    run_loop(run, [capture], start=0, end=iterations)
    return run, capture


def logprobs(episodes):
    return [lp for e in episodes for t in e.turns for lp in t.decision.logprobs]


def weights(run):
    return run.trainees[0].policy.model.state_dict()


@pytest.fixture(scope="module")
def local(tmp_path_factory):
    return train(tmp_path_factory.mktemp("local"))


@pytest.mark.parametrize("workers", [1, 2])
def test_sync_workers_play_the_local_run(pool, local, tmp_path, workers):
    run, capture = train(tmp_path, on(pool[:workers]))
    local_run, local_capture = local
    # Every move, token id and return is the local run's; a log-prob may differ in its
    # last bits, because a worker's batch has another shape than the local one and
    # batched matrix products round by shape (about 3e-7 here).
    for ours, theirs in zip(capture.batches, local_capture.batches, strict=True):
        assert [without_logprobs(e) for e in ours.episodes] == [
            without_logprobs(e) for e in theirs.episodes
        ]
        assert logprobs(ours.episodes) == pytest.approx(logprobs(theirs.episodes), abs=1e-5)
    for ours, theirs in zip(capture.metrics, local_capture.metrics, strict=True):
        timeless = {k: v for k, v in theirs.items() if not k.startswith("perf/")}
        assert {k: ours[k] for k in timeless} == pytest.approx(timeless, rel=1e-4, abs=1e-6)
        assert ours["rollout/staleness_max"] == 0.0 and ours["rollout/replayed_groups"] == 0.0
    mine, theirs = weights(run), weights(local_run)
    assert all(torch.allclose(mine[k], theirs[k], rtol=1e-4, atol=1e-6) for k in theirs)
    # It learned: the weights moved from the initial ones.
    assert run.trainees[0].policy.version == 3


def test_the_workers_span_both_nodes_of_the_cluster(pool):
    nodes = ray.get([w.node_id.remote() for w in pool])
    assert len(set(nodes)) == 2
    assert {n["NodeID"] for n in ray.nodes() if n["Alive"]} == set(nodes)


def test_whole_groups_go_to_one_worker():
    plan = Plan([("a", "a")] * 10, seeds=[0, 0, 0, 1, 1, 2, 2, 2, 2, 3])
    shares = split(plan, 3)
    assert shares == [[0, 1, 2], [3, 4], [5, 6, 7, 8, 9]]
    assert split(plan, 1) == [list(range(10))]
    assert split(Plan([("a", "a")] * 2, seeds=[5, 5]), 4) == [[0, 1]]


@pytest.mark.parametrize("k", [1, 2])
def test_async_workers_play_ahead_within_the_bound(pool, tmp_path, k):
    source = on(pool, max_staleness=k)
    run, capture = train(tmp_path, source, iterations=4)
    stale = [m["rollout/staleness_max"] for m in capture.metrics]
    # Iteration t plays a plan handed over after iteration t - k played: k updates
    # stale once the pipeline is full (the first plans wait for nobody).
    assert stale == [min(t, k) for t in range(4)]
    for t, (batch, m) in enumerate(zip(capture.batches, capture.metrics, strict=True)):
        versions = {d.policy_version for e in batch.episodes for d in decisions(e)}
        assert versions == {t - min(t, k)}
        assert m["rollout/stale_dropped_frac"] == 0.0
        # the PPO ratio (current / sampling policy) spreads around 1 as samples age
        assert m["loss/ratio_min"] <= 1.0 <= m["loss/ratio_max"]
        if t:  # the learner is known once its version has moved
            assert m[f"rollout/staleness/seat0/{min(t, k)}"] == 1.0
            assert m[f"rollout/staleness/seat1/{min(t, k)}"] == 1.0
    assert run.trainees[0].policy.version == 4


def decisions(episode):
    return [t.decision for tr in episode.trajectories for t in tr.turns]


def test_groups_staler_than_the_bound_are_dropped_and_counted(pool, local):
    run, _ = local
    learner = run.policies["learner"]
    source = on(pool)
    plan = Plan([("learner", "learner")] * 8, seeds=[0] * 4 + [1] * 4)
    source.submit(plan, run.policies)
    learner.publish()  # the learner updates while the workers play
    try:
        batch = source.play(plan, run.policies)
    finally:
        learner.version -= 1
    assert batch.episodes == ()
    assert batch.metrics["rollout/stale_dropped_frac"] == 1.0
    assert batch.metrics["rollout/staleness/seat0/1"] == 1.0


def test_a_killed_worker_is_restarted_and_its_groups_replayed(pool):
    plan = Plan([("random", "random")] * 6000, seeds=[i // 100 for i in range(6000)])
    start = time.perf_counter()
    expected = LocalSource(GameRef("kuhn_poker")).play(plan, {"random": RandomPolicy()})
    local_s = time.perf_counter() - start
    source = on(pool)
    victim = ray.get(pool[1].pid.remote())
    out = {}
    player = threading.Thread(
        target=lambda: out.setdefault("batch", source.play(plan, {"random": RandomPolicy()}))
    )
    player.start()
    # Each worker plays half the plan, about local_s / 2 of work: a kill an eighth of
    # the local time in lands mid-play however busy the machine is (a fixed wait
    # could land after the end on an idle one).
    time.sleep(local_s / 8)
    os.kill(victim, signal.SIGKILL)
    player.join(timeout=240)
    batch = out["batch"]
    assert batch.metrics["rollout/replayed_groups"] == 30.0  # its whole share
    assert batch.episodes == expected.episodes  # nothing lost, the replay plays the same
    assert ray.get(pool[1].pid.remote()) != victim
