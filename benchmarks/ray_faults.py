"""Kill -9 a Ray rollout worker at random moments of a training run, and check that
every run finishes, logs the groups it replayed, and loses no finished episode.

One uninterrupted reference run of ``kill_resume.py``'s tiny Kuhn self-play config on
synchronous Ray workers (``rollout.workers=2 rollout.max_staleness=0``), then
``--trials`` runs of the same config, each a ``coplay train`` subprocess one of whose
rollout workers (drawn at random, seeded) is SIGKILLed:

* ``random`` trials at a moment drawn uniformly over the reference run's time from
  its workers' start to their last play (a Kuhn iteration is mostly update, so most
  of these land between plays);
* ``rollout`` trials once a random number of rows is logged, as soon as the worker is
  seen playing, so that the kill lands mid-play.

Ray restarts the worker and the run plays its unfinished share again, counted in
``rollout/replayed_groups``. Each trial must exit 0 and equal the reference: every
metrics row (timings ``perf/*`` and ``rollout/replayed_groups`` left out), every
transcript, and every tensor of the checkpoints and the state. In synchronous mode
every game draws from its own streams, so a replayed group plays the games it would
have played; a lost or doubled episode would change the metrics and the weights.
Evaluation plays in the learner's process, not on the workers, so no mode aims at it.

    python benchmarks/ray_faults.py                   # 10 trials
    python benchmarks/ray_faults.py --trials 2 --json faults.json
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from contextlib import suppress
from dataclasses import asdict, dataclass
from pathlib import Path

import psutil
from kill_resume import ITERATIONS, compare, overrides, rows_logged, start_run

WORKER = "ray::RolloutWorker"
"""The title Ray gives a rollout worker's process: ``ray::RolloutWorker`` while idle,
``ray::RolloutWorker.play`` while it plays, ``ray::RolloutWorker.__init__`` while it
starts."""
LANDED = {f"{WORKER}.play": "mid-play", f"{WORKER}.__init__": "starting", WORKER: "between plays"}
SKIP = ("perf/", "rollout/replayed_groups")
"""Keys a killed run may differ in from the reference: timings and the replay count."""


@dataclass
class Trial:
    index: int
    mode: str
    worker: int = -1
    kill_at_s: float = -1.0
    """Seconds after the run's workers were first seen."""
    landed: str = "no kill"
    exit: int = 0
    replayed: int = 0
    """Groups replayed over the run (``rollout/replayed_groups`` summed)."""
    replayed_at: tuple[int, ...] = ()
    """The iterations that replayed groups."""
    result: str = "identical"
    detail: str = ""


def workers_of(proc: subprocess.Popen) -> list[psutil.Process]:
    """The run's rollout worker processes, by pid.

    Found by process title among the run's descendants: a run with ``rollout.workers``
    starts a private Ray, whose raylet and worker processes are children of the run's
    process, so another Ray on the machine is never touched; and Ray's title tells an
    actor's process from its helpers and says whether it is playing. (Asking the actors
    for their pids would take a second driver on the run's private cluster, whose
    address the run does not publish.)"""
    with suppress(psutil.Error):
        found = [w for w in psutil.Process(proc.pid).children(recursive=True) if is_worker(w)]
        return sorted(found, key=lambda w: w.pid)
    return []


def title(process: psutil.Process) -> str:
    with suppress(psutil.Error):
        return " ".join(process.cmdline()).strip()
    return ""


def is_worker(process: psutil.Process) -> bool:
    return title(process).split(" ")[0].startswith(WORKER)


def wait_for_workers(proc: subprocess.Popen, count: int) -> list[psutil.Process]:
    """The run's ``count`` workers once all are up ([] if the run ended first)."""
    while proc.poll() is None:
        found = workers_of(proc)
        if len(found) >= count:
            return found
        time.sleep(0.02)
    return []


def reference(out: Path, config: list[str], workers: int) -> tuple[float, float, float]:
    """The uninterrupted run: seconds from its start until its workers were up, until
    they were last seen playing, and in all."""
    t0 = time.perf_counter()
    proc = start_run(out, 1, config)
    found = wait_for_workers(proc, workers)
    up = last = time.perf_counter() - t0
    while proc.poll() is None:
        if any(title(w).startswith(f"{WORKER}.play") for w in found):
            last = time.perf_counter() - t0
        time.sleep(0.005)
    _, err = proc.communicate()
    if proc.returncode != 0 or not found:
        raise SystemExit(f"reference run failed: {err.strip()}")
    return up, last, time.perf_counter() - t0


def kill_worker(
    proc: subprocess.Popen, out: Path, trial: Trial, at: float, workers: int, rng: random.Random
) -> bool:
    """SIGKILL one of the run's workers (``trial.worker``, drawn here) ``at`` seconds
    after they are up (random), or once more than ``at`` rows are logged, as soon as
    it plays (rollout); records when and where. False if the run ended first."""
    found = wait_for_workers(proc, workers)
    t0 = time.perf_counter()
    if not found:
        return False
    trial.worker = rng.randrange(len(found))
    victim = found[trial.worker]
    while proc.poll() is None:
        now = time.perf_counter() - t0
        if trial.mode == "random":
            armed = hit = now >= at
        else:  # a play lasts tens of milliseconds: watch closely once armed
            armed = rows_logged(out) > at
            hit = armed and title(victim).startswith(f"{WORKER}.play")
        if hit:
            where = title(victim).split(" ")[0]
            with suppress(psutil.Error):
                victim.send_signal(signal.SIGKILL)
                trial.kill_at_s = round(now, 2)
                trial.landed = f"{LANDED.get(where, where)}, after row {rows_logged(out) - 1}"
                return True
            return False  # it was gone already (the run is ending)
        time.sleep(0.001 if armed else 0.005)
    return False


def replays(out: Path) -> tuple[int, tuple[int, ...]]:
    """Groups replayed in all, and the iterations that replayed any."""
    rows = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    counted = [(r["iteration"], int(r.get("rollout/replayed_groups", 0))) for r in rows]
    return sum(n for _, n in counted), tuple(it for it, n in counted if n)


def run_trial(
    i: int, mode: str, work: Path, ref: Path, span: float, rng, config: list[str], workers: int
) -> Trial:
    out, trial = work / f"trial{i:03d}", Trial(i, mode)
    for _ in range(4):  # a random moment after a (faster) run's end is drawn again
        at = rng.uniform(0, span) if mode == "random" else rng.randint(0, ITERATIONS - 1)
        proc = start_run(out, 1, config)
        killed = kill_worker(proc, out, trial, at, workers, rng)
        _, err = proc.communicate()
        if killed or mode != "random":
            break
        span = at
        shutil.rmtree(out)
    trial.exit = proc.returncode
    if trial.exit != 0:
        trial.result, trial.detail = "failed", (err.strip().splitlines() or [""])[-1]
    elif not killed:
        trial.result = "not killed"  # the run ended before every drawn moment
    else:
        trial.replayed, trial.replayed_at = replays(out)
        diff = compare(ref, out, skip=SKIP)
        trial.result, trial.detail = ("differing", diff) if diff else ("identical", "")
    shutil.rmtree(out, ignore_errors=True)
    return trial


def show(t: Trial) -> str:
    at = ",".join(map(str, t.replayed_at)) or "-"
    return (
        f"trial {t.index:3d} {t.mode:>8}  worker {t.worker:2d}  kill at {t.kill_at_s:6.2f} s  "
        f"{t.landed:<28} exit {t.exit}  replayed {t.replayed:3d} (iterations {at})  "
        f"{t.result}{': ' + t.detail if t.detail else ''}"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trials", type=int, default=10)
    ap.add_argument("--modes", default="random,rollout", help="cycled over the trials")
    ap.add_argument("--workers", type=int, default=2, help="synchronous Ray rollout workers")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--work", default=None, help="scratch folder (default: a temporary one)")
    ap.add_argument("--json", default=None, help="also write every trial here")
    args = ap.parse_args()
    work = Path(args.work or tempfile.mkdtemp(prefix="ray_faults_"))
    work.mkdir(parents=True, exist_ok=True)
    config, ref = overrides(args.workers), work / "reference"
    shutil.rmtree(ref, ignore_errors=True)
    # A first run fills the caches (solved games, compiled code), so the reference run
    # that sets the random kills' window takes as long as a trial does.
    reference(work / "warm-up", config, args.workers)
    shutil.rmtree(work / "warm-up", ignore_errors=True)
    up, last, total = reference(ref, config, args.workers)
    print(
        f"reference run: {total:.1f} s (workers up after {up:.1f} s, last seen playing at "
        f"{last:.1f} s); work: {work}"
    )
    rng, modes = random.Random(args.seed), args.modes.split(",")
    trials = []
    for i in range(args.trials):
        mode = modes[i % len(modes)]
        trials.append(run_trial(i, mode, work, ref, last - up, rng, config, args.workers))
        print(show(trials[-1]), flush=True)
    finished = sum(t.exit == 0 for t in trials)
    identical = sum(t.result == "identical" for t in trials)
    mid_play = sum(t.landed.startswith("mid-play") for t in trials)
    replayed = sum(t.replayed for t in trials)
    print(
        f"trials {len(trials)}: finished {finished}, identical to the reference {identical}, "
        f"kills mid-play {mid_play}, groups replayed {replayed} "
        f"(in {sum(t.replayed > 0 for t in trials)} trials)"
    )
    if args.json:
        Path(args.json).write_text(json.dumps([asdict(t) for t in trials], indent=1))
    sys.exit(0 if identical == len(trials) else 1)


if __name__ == "__main__":
    main()
