"""Ray rollout workers: sync equals local, async within its staleness bound, a killed
worker's groups replayed, a killed learner resumed, and all of it across the two nodes
of a local cluster.

One two-node cluster (one CPU each) and one pair of workers serve the whole module:
starting Ray and a worker's imports cost far more than the tiny runs themselves."""

from __future__ import annotations

import gc
import io
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from contextlib import suppress
from pathlib import Path

import psutil
import pytest
import torch
from safetensors.torch import load_file

from coplay.cli import main
from coplay.distributed.config import RayConfig
from coplay.envs.gameref import GameRef
from coplay.models.build import ModelConfig, build_policy
from coplay.policies.scripted import RandomPolicy
from coplay.rollout.source import LocalSource, Plan
from coplay.train.checkpoints.state import load_state
from coplay.train.config import ConfigError
from coplay.train.hooks import Save
from coplay.train.loop import run_loop
from coplay.train.settings import build_config
from coplay.train.trainer import game_text, setup
from coplay.types import Decision
from tests.rollout.test_source import without_logprobs
from tests.train.runs import TINY, Capture, rows

ray = pytest.importorskip("ray")
from coplay.distributed import worker as worker_module  # noqa: E402
from coplay.distributed.source import (  # noqa: E402
    RaySource,
    Shipping,
    WorkerLost,
    local_cpus,
    split,
    start_ray,
    start_workers,
)

pytestmark = pytest.mark.ray

KUHN = [*TINY, "rollout.games_per_iter=16", "rollout.group_size=4", "algo.estimator=grpo"]
"""Four groups of four Kuhn games per iteration, group baselines."""


@pytest.fixture(scope="module")
def pool():
    """Two rollout workers, one on each node of a local two-node cluster, each taking
    half of its node's CPU (the other half is for the workers of whole training runs)."""
    from ray.cluster_utils import Cluster

    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1})
    cluster.add_node(num_cpus=1)
    ray.init(address=cluster.address, include_dashboard=False, log_to_driver=False)
    try:
        yield start_workers(GameRef("kuhn_poker"), 2, RayConfig(worker_cpus=0.5))
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


def test_sync_workers_write_the_local_answers(pool, tmp_path):
    # Written answers draw from their own rows' streams, so two workers, each writing
    # half of the plan in batches of another size, write every token the local run does.
    text = ["model.mode=text", "model.max_new_tokens=6"]
    _, local = train(tmp_path / "local", iterations=2, extra=text)
    _, remote = train(tmp_path / "two", on(pool), iterations=2, extra=text)
    for ours, theirs in zip(remote.batches, local.batches, strict=True):
        assert [without_logprobs(e) for e in ours.episodes] == [
            without_logprobs(e) for e in theirs.episodes
        ]
    answers = [t.decision.response_ids for e in local.batches[0].episodes for t in e.turns]
    assert len(set(answers)) > 1  # sampled text, not one answer repeated


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
        # the plan names the learner, so its staleness is read from the first plan on
        assert m[f"rollout/staleness/seat0/{min(t, k)}"] == 1.0
        assert m[f"rollout/staleness/seat1/{min(t, k)}"] == 1.0
    assert run.trainees[0].policy.version == 4


def test_an_async_run_resumed_from_its_state_is_the_uninterrupted_run(pool, tmp_path):
    # The plan handed over after iteration 2 is played at iteration 2's weights; a run
    # stopped after it played that plan again at the resumed weights (3's), and went on
    # with other games and weights than the uninterrupted run.
    over = [*KUHN, "train.iterations=4", "rollout.workers=1", "rollout.max_staleness=1"]

    def run_at(out, fresh=True):
        run = setup(build_config(overrides=over), out, fresh=fresh)
        run.source = on(pool[:1], max_staleness=1)
        return run

    whole, whole_capture = run_at(tmp_path / "whole"), Capture()
    run_loop(whole, [whole_capture], start=0, end=4)
    split = run_at(tmp_path / "split")
    run_loop(split, [Save(every=0, end=2, hooks=[])], start=0, end=2)  # as stop_after=2
    resumed, capture = run_at(tmp_path / "split", fresh=False), Capture()
    assert load_state(resumed, []) == 2
    run_loop(resumed, [capture], start=2, end=4)
    for ours, theirs in zip(capture.metrics, whole_capture.metrics[2:], strict=True):
        assert {k: v for k, v in ours.items() if not k.startswith("perf/")} == {
            k: v for k, v in theirs.items() if not k.startswith("perf/")
        }
    assert [b.episodes for b in capture.batches] == [b.episodes for b in whole_capture.batches[2:]]
    a, b = weights(whole), weights(resumed)
    assert all(torch.equal(a[k], b[k]) for k in a)


def decisions(episode):
    return [t.decision for tr in episode.trajectories for t in tr.turns]


def test_a_closed_source_says_so_when_asked_to_play(pool, local):
    # Its workers are gone: splitting a plan over none was an IndexError.
    run, _ = local
    source = on(pool)
    source.close()  # given its workers: it leaves them running for the other tests
    plan = Plan([("learner", "learner")] * 2, seeds=[0, 0])
    with pytest.raises(RuntimeError, match="this Ray source is closed"):
        source.play(plan, run.policies)
    with pytest.raises(RuntimeError, match="this Ray source is closed"):
        source.tally(run.policies["learner"], [], k=1, seed=0)


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
    # The timeout only turns a hang into a failure: Ray's workers run niced, and beside
    # other busy processes the replay has taken over 240 s.
    player.join(timeout=1200)
    assert not player.is_alive(), "the batch never came back after the kill"
    batch = out["batch"]
    assert batch.metrics["rollout/replayed_groups"] == 30.0  # its whole share
    assert batch.episodes == expected.episodes  # nothing lost, the replay plays the same
    assert ray.get(pool[1].pid.remote()) != victim


RESUMED = [*KUHN, "train.iterations=4", "train.save_every=1", "rollout.workers=1"]
"""A CLI run of 4 iterations with one synchronous worker, saving its state each one;
half a CPU for its worker fits beside the pool's."""
KILL_ATTEMPTS = 3


def test_a_learner_killed_mid_update_resumes_to_the_uninterrupted_run(pool, tmp_path):
    argv = ["train", "--quiet", *RESUMED, "ray.worker_cpus=0.5"]
    assert main([*argv, "--out", str(tmp_path / "whole")]) == 0
    gc.collect()  # the run's worker goes with its source
    # The killed run is a process of its own on the same cluster; its worker dies with it.
    address = f"ray.address={ray.get_runtime_context().gcs_address}"
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[2]))
    # The update the kill must land in lasts tens of milliseconds; a watcher that the
    # busy machine does not schedule for that long kills too late. Such a run is not
    # a failure of the code, so it is played again, in a directory of its own.
    for attempt in range(KILL_ATTEMPTS):
        part = tmp_path / f"part{attempt}"
        cmd = [sys.executable, "-m", "coplay.cli", *argv, "--out", str(part), address]
        # the pool's (asked: one may still be starting) and any earlier run left
        earlier = {*ray.get([w.pid.remote() for w in pool]), *(w.pid for w in rollout_workers())}
        proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        assert kill_in_update(proc, part, after=2, earlier=earlier), proc.communicate()[1].decode()
        if logged(part) == 3:
            break
    else:
        pytest.fail(f"every one of {KILL_ATTEMPTS} kills landed after iteration 3's update")
    # Killed in iteration 3 after its games came back: rows 0-2 and the state of 2.
    assert [r["iteration"] for r in rows(part / "metrics.jsonl")] == [0, 1, 2]
    assert main(["train", "--quiet", "--resume", str(part)]) == 0
    whole, resumed = rows(tmp_path / "whole" / "metrics.jsonl"), rows(part / "metrics.jsonl")
    assert [r["iteration"] for r in resumed] == [0, 1, 2, 3, 4]
    for ours, theirs in zip(resumed, whole, strict=True):
        assert ours == theirs  # every non-timing metric, the staleness per seat included
    assert resumed[3]["rollout/staleness/seat0/0"] == 1.0
    for name in ("checkpoints/final", "state"):
        a, b = tensors(tmp_path / "whole" / name), tensors(part / name)
        assert a.keys() == b.keys() and len(a) > 10
        assert all(torch.equal(a[k], b[k]) for k in a), name


def tensors(folder: Path) -> dict[str, torch.Tensor]:
    files = folder.rglob("*.safetensors")
    return {f"{f.relative_to(folder)}:{k}": v for f in files for k, v in load_file(f).items()}


def kill_in_update(proc: subprocess.Popen, out: Path, *, after: int, earlier: set[int]) -> bool:
    """SIGKILL ``proc`` in the update of iteration ``after + 1``: once row ``after`` is
    logged (its state is saved next), when the run's worker has played that
    iteration's games and is idle again. False if the run ended first."""
    worker, played = None, False
    while proc.poll() is None:
        if worker is None:
            worker = next((w for w in rollout_workers() if w.pid not in earlier), None)
        elif logged(out) > after:
            if title(worker).startswith("ray::RolloutWorker.play"):
                played = True
            elif played:
                proc.send_signal(signal.SIGKILL)
                proc.wait()
                return True
        time.sleep(0.001 if worker is not None else 0.05)
    return False


def rollout_workers() -> list[psutil.Process]:
    """The rollout worker processes of this process's Ray cluster. Ray names a worker
    process by what it runs (``ray::RolloutWorker`` idle, ``ray::RolloutWorker.play``
    while playing), and the cluster's processes are this one's descendants."""
    return [
        w
        for w in psutil.Process().children(recursive=True)
        if title(w).startswith("ray::RolloutWorker")
    ]


def title(process: psutil.Process) -> str:
    with suppress(psutil.Error):
        return " ".join(process.cmdline())
    return ""


def logged(out: Path) -> int:
    path = out / "metrics.jsonl"
    return path.read_text().count("\n") if path.exists() else 0


def test_an_error_inside_a_worker_is_raised_as_itself(pool):
    # Ray wraps it in a RayTaskError, whose first line is a banner of the worker process.
    plan = Plan([("random",) * 3] * 2, seeds=[0, 0])  # three seats for a game of two
    with pytest.raises(ValueError, match=r"^game 'kuhn_poker' has 2 seats but the seating has 3"):
        on(pool).play(plan, {"random": RandomPolicy()})


def test_a_worker_ray_will_not_restart_stops_the_run_at_once(pool):
    source = RaySource(
        GameRef("kuhn_poker"), workers=1, ray_config=RayConfig(worker_cpus=0.25, max_restarts=0)
    )
    assert source.max_restarts == 0
    plan = Plan([("random", "random")] * 4, seeds=[0, 0, 1, 1])
    assert len(source.play(plan, {"random": RandomPolicy()}).episodes) == 4
    os.kill(source.worker_pids()[0], signal.SIGKILL)
    start = time.perf_counter()
    with pytest.raises(WorkerLost, match="rollout worker 0 died and ray.max_restarts is 0"):
        source.play(plan, {"random": RandomPolicy()})
    assert time.perf_counter() - start < 60  # not RESTART_TIMEOUT_S of waiting
    source.close()


def test_a_private_ray_has_a_cpu_for_every_workers_share():
    assert local_cpus(RayConfig(worker_cpus=0.5), 3) == 2  # 1 left the third unscheduled
    assert local_cpus(RayConfig(worker_cpus=1.5), 1) == 2
    assert local_cpus(RayConfig(worker_cpus=0.25), 1) == 1
    assert local_cpus(RayConfig(num_cpus=7), 3) == 7


@pytest.mark.parametrize(
    ("ray", "workers", "match"),
    [
        ({"num_cpus": 1}, 2, r"ray.num_cpus=1 holds 1 of 2 rollout workers"),
        ({"num_cpus": 1, "worker_cpus": 2}, 1, r"holds 0 of 1 .* ray.worker_cpus=2 each"),
    ],
)
def test_a_private_ray_too_small_for_its_workers_is_refused_not_waited_on(ray, workers, match):
    # Ray kept the worker it could not place waiting: the run hung without a word.
    with pytest.raises(ValueError, match=match):
        local_cpus(RayConfig(**ray), workers)
    over = [f"rollout.workers={workers}", *(f"ray.{k}={v}" for k, v in ray.items())]
    with pytest.raises(ConfigError, match=match):
        build_config(overrides=over)
    assert local_cpus(RayConfig(num_cpus=3, worker_cpus=1.5), 2) == 3  # room for both
    build_config(overrides=[*over, "ray.address=auto"])  # a cluster's nodes say their own


class Movable:
    """A policy with a model that takes new weights (what ``Shipping`` ships by version)."""

    def __init__(self, value: float) -> None:
        self.model = torch.nn.Linear(1, 1, bias=False)
        torch.nn.init.constant_(self.model.weight, value)
        self.backend, self.version = None, 0


def test_a_new_object_under_an_id_never_gets_the_old_ones_weights(pool):
    shipping, a, b = Shipping(), Movable(1.0), Movable(2.0)
    shipping.ship(["p"], {"p": a})
    a.version = 1
    shipping.ship(["p"], {"p": a})
    shipping.ship(["p"], {"p": b})  # the id now names another object, at version 0
    b.version = 1
    sent = ray.get(shipping.ship(["p"], {"p": b})["p"].weights)
    assert sent["weight"].item() == 2.0  # b's own, not a's cached version 1


def test_a_worker_reuses_freed_memory_as_the_driver_does(monkeypatch):
    calls = []
    monkeypatch.setattr(worker_module, "keep_freed_memory", lambda: calls.append(1) or True)
    worker_module.RolloutWorker(GameRef("kuhn_poker"), None, None)
    assert calls == [1]  # its backends arrive unpickled: their constructors never run


def test_a_policy_off_the_cpu_is_shipped_to_load_onto_the_workers_cpu():
    # A learner on a GPU: workers see no GPU, so its tensors must arrive on the CPU.
    # Off the CPU it is shipped packed; the packing itself is checked here on a CPU
    # policy, which must come back playing exactly as the original.
    game = GameRef("kuhn_poker")
    text = game_text(game.make)
    policy = build_policy(ModelConfig(), corpus=text.texts, actions=text.actions, seed=0)
    assert worker_module.for_workers(policy) is policy  # on the CPU: the object itself
    with torch.device("meta"):
        off = Movable(1.0)
    assert worker_module.off_cpu(off.model) and not worker_module.off_cpu(None)
    buf = io.BytesIO()
    torch.save(policy, buf, pickle_module=worker_module.cloudpickle)
    back = worker_module.Packed(buf.getvalue()).load()
    obs = []
    for seed in range(6):
        env = game.make()
        env.reset(seed)
        obs.append(env.observe(0))
    torch.manual_seed(0)
    want = policy.act(obs)
    torch.manual_seed(0)
    assert back.act(obs) == want
    assert all(p.device.type == "cpu" for p in back.model.parameters())
    weights = policy.model.state_dict()
    assert worker_module.cpu_weights(weights) is weights  # nothing to move


def test_joining_an_address_where_nothing_listens_starts_no_ray(monkeypatch):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    calls = []
    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    monkeypatch.setattr(ray, "init", lambda **kwargs: calls.append(kwargs))
    with pytest.raises(ConnectionError, match=f"ray.address=127.0.0.1:{port}: nothing accepts"):
        start_ray(RayConfig(address=f"127.0.0.1:{port}"), 1)
    assert calls == []


def test_a_run_refused_for_its_ray_address_leaves_no_run_directory(tmp_path, monkeypatch):
    # The source is built before the run directory is written: a second start must not
    # find a run without a single iteration and refuse it as an existing run.
    monkeypatch.setattr(ray, "is_initialized", lambda: False)  # as in a fresh process
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    out = tmp_path / "run"
    argv = ["train", "--quiet", "--out", str(out), *TINY, "rollout.workers=1"]
    for _ in range(2):
        assert main([*argv, f"ray.address=127.0.0.1:{port}"]) == 2
        assert not out.exists()


class Bettor(Movable):
    """Bets in Kuhn where its one weight exceeds 1.5, else passes, and takes new weights
    as an ``LMPolicy``'s backend does (the backend here is itself)."""

    policy_id = "bettor"

    def __init__(self, value: float) -> None:
        super().__init__(value)
        self.backend = self

    def load_weights(self, state, version: int) -> None:
        self.model.load_state_dict(state)
        self.version = version

    def act(self, observations):
        move = "[Bet]" if self.model.weight.item() > 1.5 else "[Pass]"
        return [
            Decision(text=move, action=move, policy_id=self.policy_id, policy_version=self.version)
            for _ in observations
        ]


def test_a_worker_plays_each_shipment_at_its_own_version(pool):
    # A replayed task may carry an older shipment than the worker last played (its
    # plan was handed over before the learner updated): it must play those weights
    # and record that version, not keep the newer ones it holds.
    shipping, learner = Shipping(), Bettor(1.0)
    old = shipping.ship(["bettor"], {"bettor": learner})
    learner.model.weight.data.fill_(2.0)
    learner.version = 1
    new = shipping.ship(["bettor"], {"bettor": learner})
    plan = Plan([("bettor", "bettor")], seeds=[0])
    worker = worker_module.RolloutWorker(GameRef("kuhn_poker"), None, None)

    def played(shipments):
        (episode,) = worker.play(plan, shipments)
        return {(t.decision.policy_version, t.played_action) for t in episode.turns}

    assert played(old) == {(0, "[Pass]")}
    assert played(new) == {(1, "[Bet]")}
    assert played(old) == {(0, "[Pass]")}  # back to the shipped policy's own weights
    fresh = worker_module.RolloutWorker(GameRef("kuhn_poker"), None, None)  # a restart
    (episode,) = fresh.play(plan, new)
    assert {t.decision.policy_version for t in episode.turns} == {1}
