"""Kill -9 a training run at random moments, resume it, and check it ends identical.

One uninterrupted reference run of a tiny Kuhn self-play config, then ``--trials``
runs of the same config, each started as a subprocess and killed with SIGKILL:

* ``random`` trials at a moment drawn uniformly (seeded) over the reference run's
  writing time (from its first file to its end);
* ``state`` / ``checkpoint`` trials during the save of a random iteration: once it
  has logged its metrics row, as soon as the save is seen in progress (its ``*.tmp``
  folder), to aim at the moments a save is half done;
* ``metrics`` trials as soon as a random iteration's metrics row is seen, with the
  end of that row then cut off: an append of a few hundred bytes is too quick to hit
  from outside, so the trial leaves the file as a kill during that write would (a torn
  last line), which the resume must repair.

Each killed run is continued with ``coplay train --resume`` until it finishes (a run
killed before its first state save is started again with ``--force``). It then
must match the reference: every metrics row (timing keys ``perf/*`` left out), every
transcript, and every tensor of every ``*.safetensors`` file under ``checkpoints/``
and ``state/`` (state file names are not assumed). Prints where each kill landed
and the counts.

With ``--workers N`` every run plays its games on N synchronous Ray rollout workers
(``rollout.workers=N rollout.max_staleness=0``): a killed learner takes its workers
with it, and the resumed run's new workers must play the same games.

    python benchmarks/kill_resume.py --trials 20
    python benchmarks/kill_resume.py --trials 4 --modes random,state,checkpoint,metrics
    python benchmarks/kill_resume.py --trials 10 --workers 2
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
from safetensors.torch import load_file

ITERATIONS = 6
OVERRIDES = [
    f"train.iterations={ITERATIONS}",
    "train.save_every=1",
    "train.eval_every=2",
    "train.eval_episodes=50",
    "train.eval_opponents=[random]",
    "rollout.games_per_iter=32",
    "model.tiny.hidden_size=32",
    "model.tiny.intermediate_size=64",
]
"""Tiny and quick, but saving state and a checkpoint every iteration."""


def overrides(workers: int) -> list[str]:
    """The runs' config: ``OVERRIDES``, on ``workers`` synchronous Ray workers if any."""
    on_workers = [f"rollout.workers={workers}", "rollout.max_staleness=0"] if workers else []
    return [*OVERRIDES, *on_workers]


@dataclass
class Trial:
    index: int
    mode: str
    kill_at_s: float
    landed: str
    resumes: int = 0
    restarted: bool = False
    result: str = "identical"
    detail: str = ""


def coplay(*args: str) -> list[str]:
    return [sys.executable, "-m", "coplay.cli", *args]


def child_env(threads: int) -> dict[str, str]:
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads))
    root = str(Path(__file__).resolve().parents[1])
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH")) if p)
    return env


def start_run(out: Path, threads: int, config: list[str], *extra: str) -> subprocess.Popen:
    cmd = coplay("train", "--quiet", "--preset", "kuhn-selfplay", "--out", str(out))
    return subprocess.Popen(
        [*cmd, *extra, *config],
        env=child_env(threads),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )


def reference(out: Path, threads: int, config: list[str]) -> tuple[float, float]:
    """Run the uninterrupted reference; returns (seconds to its first file, seconds in all)."""
    t0 = time.perf_counter()
    proc = start_run(out, threads, config)
    first = None
    while proc.poll() is None:
        if first is None and (out / "config.yaml").exists():
            first = time.perf_counter() - t0
        time.sleep(0.01)
    total = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(f"reference run failed: {proc.stderr.read().strip()}")
    return first or 0.0, total


def rows_logged(out: Path) -> int:
    path = out / "metrics.jsonl"
    return path.read_text().count("\n") if path.exists() else 0


def kill_when(proc: subprocess.Popen, out: Path, mode: str, at: float) -> float:
    """SIGKILL ``proc`` ``at`` seconds in (random), or once ``at`` iterations are logged
    as soon as a save of ``mode`` (state, checkpoint) is seen in progress; returns the
    moment in seconds (-1: the run ended first)."""
    t0 = time.perf_counter()
    while proc.poll() is None:
        now = time.perf_counter() - t0
        if mode == "random":
            hit = now >= at
        elif mode == "metrics":
            hit = rows_logged(out) > at
        else:
            saving = out / "state.tmp" if mode == "state" else out / "checkpoints"
            hit = rows_logged(out) > at and (
                saving.exists() if mode == "state" else any(saving.glob("*.tmp"))
            )
        if hit:
            proc.send_signal(signal.SIGKILL)
            proc.wait()
            return now
        time.sleep(0.005 if mode == "random" else 0.0005)
    return -1.0


def tear_last_row(out: Path) -> None:
    """Cut the last metrics row in half, as a kill in the middle of its write would."""
    path = out / "metrics.jsonl"
    text = path.read_text()
    start = text.rstrip("\n").rfind("\n") + 1
    path.write_text(text[: start + (len(text) - start) // 2])


def landed(out: Path) -> str:
    """Where the kill left the run directory (read before anything repairs it)."""
    if not (out / "config.yaml").exists():
        return "before the run wrote anything"
    where = "between writes"
    if (out / "state.old").exists() and not (out / "state").exists():
        where = "between the two renames of a state save"
    elif (out / "state.tmp").exists():
        where = "during a state save"
    elif any((out / "checkpoints").glob("*.tmp")):
        where = "during a checkpoint save"
    for name in ("metrics.jsonl", "transcripts.jsonl"):
        text = (out / name).read_text() if (out / name).exists() else ""
        if text and not text.endswith("\n"):
            where = f"during a {name} write"
    whole = (out / "metrics.jsonl").read_text().split("\n")[:-1]  # the torn end left out
    last = json.loads(whole[-1])["iteration"] if whole else "-"
    saved = (out / "state").exists() or (out / "state.old").exists()
    return f"{where} (last row {last}{'' if saved else ', no state yet'})"


def finish(out: Path, trial: Trial, threads: int, config: list[str]) -> None:
    """Resume to the end; start afresh (``--force``) if killed before any state."""
    trial.resumes += 1
    proc = subprocess.run(
        coplay("train", "--quiet", "--resume", str(out)),
        env=child_env(threads),
        capture_output=True,
        text=True,
    )
    if proc.returncode != 0 and (
        "no saved state" in proc.stderr or "no run to resume" in proc.stderr
    ):
        trial.restarted = True
        restart = start_run(out, threads, config, "--force")
        _, err = restart.communicate()
        proc = subprocess.CompletedProcess(restart.args, restart.returncode, "", err)
    if proc.returncode != 0:
        trial.result = "failed to resume"
        trial.detail = (proc.stderr.strip().splitlines() or [""])[-1]


def timeless(row: dict, skip: tuple[str, ...] = ("perf/",)) -> dict:
    """The row without the keys that start with one of ``skip`` (the timings)."""
    return {k: v for k, v in row.items() if not k.startswith(skip)}


def tensors(out: Path) -> dict[str, dict[str, torch.Tensor]]:
    files = [*out.glob("checkpoints/**/*.safetensors"), *out.glob("state/**/*.safetensors")]
    return {str(f.relative_to(out)): load_file(f) for f in files}


def compare(ref: Path, out: Path, skip: tuple[str, ...] = ("perf/",)) -> str:
    """'' when the runs match (keys starting with one of ``skip`` left out), else what
    differs first."""
    for name in ("metrics.jsonl", "transcripts.jsonl"):
        a = [timeless(json.loads(x), skip) for x in (ref / name).read_text().splitlines()]
        b = [timeless(json.loads(x), skip) for x in (out / name).read_text().splitlines()]
        if a != b:
            return f"{name} differs ({len(a)} vs {len(b)} rows)"
    ta, tb = tensors(ref), tensors(out)
    if set(ta) != set(tb):
        return f"weight files differ: {sorted(set(ta) ^ set(tb))}"
    for path, a in ta.items():
        b = tb[path]
        if set(a) != set(b) or any(not torch.equal(a[k], b[k]) for k in a):
            return f"tensors differ in {path}"
    return ""


def run_trial(
    i: int, mode: str, work: Path, ref: Path, window, rng, threads: int, config: list[str]
) -> Trial:
    out = work / f"trial{i:03d}"
    for _ in range(4):  # a random moment after a (faster) run's end is drawn again
        at = rng.uniform(*window) if mode == "random" else rng.randint(1, ITERATIONS)
        t0 = time.perf_counter()
        proc = start_run(out, threads, config)
        moment = kill_when(proc, out, mode, at)
        if moment >= 0 or mode != "random":
            break
        window = (window[0], time.perf_counter() - t0)
        shutil.rmtree(out)
    if mode == "metrics" and moment >= 0:
        tear_last_row(out)
    trial = Trial(i, mode, round(moment, 2), landed(out) if moment >= 0 else "after the end")
    if moment >= 0:
        finish(out, trial, threads, config)
    if trial.result != "failed to resume":
        diff = compare(ref, out)
        trial.result, trial.detail = ("differing", diff) if diff else ("identical", "")
    for folder in [out, *work.glob(f"{out.name}.old-*")]:
        shutil.rmtree(folder, ignore_errors=True)
    return trial


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trials", type=int, default=20)
    ap.add_argument(
        "--modes", default="random,state,checkpoint,metrics", help="cycled over the trials"
    )
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--workers", type=int, default=0, help="synchronous Ray rollout workers")
    ap.add_argument("--work", default=None, help="scratch folder (default: a temporary one)")
    ap.add_argument("--json", default=None, help="also write every trial here")
    args = ap.parse_args()
    work = Path(args.work or tempfile.mkdtemp(prefix="kill_resume_"))
    work.mkdir(parents=True, exist_ok=True)
    ref = work / "reference"
    shutil.rmtree(ref, ignore_errors=True)
    # A first run fills the caches (solved games, compiled code), so the reference run
    # that sets the random kills' window takes as long as a trial does.
    config = overrides(args.workers)
    reference(work / "warm-up", args.threads, config)
    shutil.rmtree(work / "warm-up", ignore_errors=True)
    first, total = reference(ref, args.threads, config)
    print(f"reference run: {total:.1f} s ({first:.1f} s before its first file); work: {work}")
    rng, modes = random.Random(args.seed), args.modes.split(",")
    trials = []
    for i in range(args.trials):
        mode = modes[i % len(modes)]
        t = run_trial(i, mode, work, ref, (first, total), rng, args.threads, config)
        trials.append(t)
        print(
            f"trial {i:3d} {t.mode:>10} kill at {t.kill_at_s:6.2f} s  {t.landed:<62}"
            f" resumes {t.resumes}{' (restarted)' if t.restarted else ''}  {t.result}"
            f"{': ' + t.detail if t.detail else ''}",
            flush=True,
        )
    counts = {r: sum(t.result == r for t in trials) for r in ("identical", "differing")}
    failed = sum(t.result == "failed to resume" for t in trials)
    print(
        f"trials {len(trials)}: identical {counts['identical']}, differing "
        f"{counts['differing']}, failed to resume {failed}"
    )
    if args.json:
        Path(args.json).write_text(json.dumps([asdict(t) for t in trials], indent=1))


if __name__ == "__main__":
    main()
