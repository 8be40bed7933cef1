"""``coplay train``, and reading a run back: ``coplay report`` and ``coplay show``."""

from __future__ import annotations

import argparse
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext, suppress
from pathlib import Path

from coplay.cli.common import (
    FORCE_HELP,
    OVERRIDES_HELP,
    PIPED_PANEL_WIDTH,
    POPULATIONS,
    PRESET_HELP,
    Command,
    check_model_path,
    check_opponents,
    check_parent,
    claimed_run,
    console,
    heading,
    path_arg,
    resume_advice,
    titled_table,
    train_status,
)
from coplay.report.progress import track


def _train_arguments(t: argparse.ArgumentParser) -> None:
    t.add_argument("--preset", default=None, help=PRESET_HELP)
    t.add_argument("--config", type=path_arg, default=None, help="YAML file merged over the preset")
    t.add_argument(
        "--out",
        type=path_arg,
        default=None,
        help="run directory (default: runs/<preset>, or runs/<config file's stem> with "
        "--config and no --preset); one that already holds a run is refused: continue it "
        "with --resume, or replace it with --force",
    )
    t.add_argument("--force", action="store_true", help=FORCE_HELP)
    t.add_argument("--quiet", action="store_true", help="no progress bar")
    t.add_argument(
        "--resume",
        type=path_arg,
        default=None,
        metavar="RUN_DIR",
        help="continue a run from its saved state (its config.yaml plus any overrides)",
    )
    t.add_argument(
        "--roster",
        type=path_arg,
        default=None,
        metavar="ROSTER_YAML",
        help="seat a roster (docs/roster.md): a policy per seat or role, several learners",
    )
    t.add_argument(
        "--report",
        action="store_true",
        help="write the HTML report to <run>/report.html at each evaluation and at the end "
        "(sets train.report=true)",
    )
    t.add_argument("overrides", nargs="*", help=OVERRIDES_HELP)


def cmd_train(args: argparse.Namespace) -> int:
    from coplay.train.settings import base_preset, build_config, load_yaml

    overrides = [*args.overrides, *(["train.report=true"] if args.report else [])]
    if args.resume is not None:
        out, roster = _resumed(args)
        load_yaml(out / "config.yaml", "the run's config", empty_ok=False)
        cfg = build_config(file=out / "config.yaml", overrides=overrides, recorded=True)
        return _train(args, cfg, out, roster)
    preset = base_preset(args.preset, args.config)
    cfg = build_config(preset=preset, file=args.config, overrides=overrides)
    out = Path(args.out if args.out is not None else f"runs/{preset or Path(args.config).stem}")
    roster = _load_roster(args.roster) if args.roster is not None else None
    opponent = [cfg.train.opponent.name] if cfg.train.opponent else []
    check_opponents([*opponent, *cfg.train.eval_opponents], cfg.game.name, cfg.game.params)
    check_model_path(cfg.model.path)
    reads = [
        ("--config", args.config),
        ("--roster", args.roster),
        ("model.path", cfg.model.path),
        *(("train.opponent", name) for name in opponent),
        *(("train.eval_opponents", name) for name in cfg.train.eval_opponents),
        *_roster_reads(roster),
    ]
    with claimed_run(out, args.force, reads=reads):
        return _train(args, cfg, out, roster)


def _resumed(args: argparse.Namespace):
    """The run directory ``--resume`` names and its roster (None: a plain run); refuses
    options a resume would ignore, and a run that is no training run."""
    from coplay.report.runfiles import run_kind
    from coplay.train.config import ConfigError

    if args.force:
        raise ValueError("--force starts a new run; it cannot go with --resume")
    for option in ("preset", "config", "out"):  # ignored, they would mislead
        if getattr(args, option) is not None:
            raise ValueError(
                f"--{option} cannot go with --resume: a resumed run keeps its own "
                "config.yaml and directory (change settings with key=value overrides)"
            )
    out = Path(args.resume)
    if not (out / "config.yaml").is_file():
        raise ConfigError(
            f"{out} holds no run to resume (it has no config.yaml); start one with --out {out}"
        )
    if (kind := run_kind(out)) in POPULATIONS:  # their state is theirs to resume
        raise ConfigError(f"{out} is a {kind} run; {resume_advice(out, kind)}")
    saved = out / "roster.yaml"
    if args.roster is not None:
        raise ValueError(
            f"a resumed run keeps its roster ({saved}); drop --roster"
            if saved.is_file()
            else f"{out} was trained without a roster, and a resumed run keeps its seats; "
            "drop --roster (or start a roster run with another --out)"
        )
    return out, _load_roster(saved) if saved.is_file() else None


def _load_roster(path):
    from coplay.train.roster import load_roster

    return load_roster(path)


def _roster_reads(roster) -> list[tuple[str, str | None]]:
    """The checkpoints a roster's policies are or start from: what its run reads."""
    if roster is None:
        return []
    return [
        (f"roster policy {name}", getattr(entry, "path", None) or getattr(entry, "init", None))
        for name, entry in roster.policies.items()
    ]


def _train(args: argparse.Namespace, cfg, out: Path, roster) -> int:
    """Run the trainer (the roster trainer when there is a roster) and print its summary."""
    from coplay.train.roster import train_roster
    from coplay.train.trainer import train

    resume = args.resume is not None
    console.print(heading("train", f"{cfg.game.name} -> {out}"))
    if roster is not None:
        run = lambda progress: train_roster(roster, cfg, out, progress=progress, resume=resume)  # noqa: E731
        summary = _with_progress(run, cfg.train.iterations, args.quiet)
    else:
        run = lambda progress: train(cfg, out, resume=resume, progress=progress)  # noqa: E731
        summary = _with_progress(run, cfg.train.iterations, args.quiet, status=train_status)
    _print_summary(summary)
    if cfg.train.report:
        console.print(f"report: {_report_written(out)}")
    console.print(f"run directory: {out}")
    return 0


def _report_written(out: Path) -> Path:
    """``<out>/report.html``, written now unless the run wrote it after its last metrics
    row (the loop writes it at every evaluation; a resumed run with no iteration left
    runs none)."""
    report, metrics = out / "report.html", out / "metrics.jsonl"
    if not report.is_file() or report.stat().st_mtime < metrics.stat().st_mtime:
        from coplay.train.report import write_report

        write_report([out], report)
    return report


def _with_progress(run, total: int, quiet: bool, status=lambda m: ""):
    """``run(progress)`` reporting progress over ``total`` iterations, or none if quiet.
    The run tells where it starts before its first iteration (a resumed run's saved
    iteration, known once its state loads): the ETA counts from there."""
    if quiet:
        return run(None)
    with track("train", total, "iterations", start=None, console=console) as advance:
        return run(lambda it, m: advance(it, status(m)))


def _print_summary(summary: dict) -> None:
    table = titled_table("evaluation (before -> after training)")
    table.add_column("metric", no_wrap=True)
    table.add_column("before", justify="right")
    table.add_column("after", justify="right")
    for key, after in summary.items():
        if key.startswith("final/"):
            name = key.removeprefix("final/")
            before = summary.get(f"initial/{name}")
            table.add_row(name, "-" if before is None else f"{before:.4f}", f"{after:.4f}")
    console.print(table)
    console.print(f"wall time: {summary['wall_s']:.1f} s")


def _report_arguments(r: argparse.ArgumentParser) -> None:
    r.add_argument("runs", nargs="+", metavar="RUN", help="run directories (several overlay)")
    r.add_argument(
        "--out",
        type=path_arg,
        default=None,
        metavar="FILE.html",
        help="where to write it (default: RUN/report.html for one run, report.html for several)",
    )
    r.add_argument(
        "--games",
        type=int,
        default=8,
        help="latest sample games shown per run (default: %(default)s)",
    )


def cmd_report(args: argparse.Namespace) -> int:
    from coplay.train.report import write_report

    if args.games < 0:
        raise ValueError(f"--games must be 0 or more, got {args.games}")
    default = Path(args.runs[0]) / "report.html" if len(args.runs) == 1 else Path("report.html")
    out = Path(args.out) if args.out is not None else default
    if out.is_dir():
        raise ValueError(f"--out {out} is a directory; name an .html file")
    if out.is_file() and not _is_report(out):
        # A report replaces the one it wrote before, never another file (a run's
        # metrics.jsonl named by mistake would be lost).
        raise ValueError(f"--out {out} exists and is not a coplay report; name another file")
    check_parent(out)
    with _folders_for(out) if args.out is not None else nullcontext():
        written = write_report(args.runs, out, games=args.games)
    console.print(f"written: {written} ({written.stat().st_size / 1024:.0f} kB)")
    return 0


@contextmanager
def _folders_for(out: Path) -> Iterator[None]:
    """Make the missing folders of ``out``'s path (as tournament's ``--out`` does), and
    remove them again when the block fails: a report that was not written leaves none."""
    new = [p for p in reversed(out.parents) if not p.exists()]  # outermost first
    out.parent.mkdir(parents=True, exist_ok=True)
    try:
        yield
    except BaseException:
        for folder in reversed(new):
            with suppress(OSError):  # not empty any more: someone else's now
                folder.rmdir()
        raise


def _is_report(path: Path) -> bool:
    """Whether ``path`` holds a report this command wrote (its data block's id)."""
    data = path.read_bytes()
    return data.startswith(b"<!doctype html>") and b'id="coplay-data"' in data


def _show_arguments(sh: argparse.ArgumentParser) -> None:
    sh.add_argument("run", metavar="RUN", help="run directory")
    sh.add_argument("--iteration", type=int, default=None, help="games of this iteration only")
    sh.add_argument(
        "--games", type=int, default=2, help="games shown, the latest (default: %(default)s)"
    )


def cmd_show(args: argparse.Namespace) -> int:
    from coplay.report.runfiles import load_run
    from coplay.report.show import show_games

    if args.games <= 0:
        raise ValueError(f"--games must be positive, got {args.games}")
    run = load_run(args.run)
    if not run.transcripts:
        raise ValueError(f"{run.path} has no transcripts (train.transcripts: 0, or no evaluation)")
    if not console.is_terminal:  # panels fill the console's width: keep lines readable
        console.width = PIPED_PANEL_WIDTH
    if run.games_from is not None:
        console.print(
            f"games of the latest best response only ({run.games_from}); iterations are its own"
        )
    shown = show_games(run.transcripts, console, games=args.games, iteration=args.iteration)
    if not shown:
        # A record may omit its iteration (older or hand-written files): not sortable.
        found = sorted({r["iteration"] for r in run.transcripts if "iteration" in r})
        raise ValueError(
            f"{run.path} has no transcripts of iteration {args.iteration}; "
            + (f"it has {', '.join(map(str, found))}" if found else "its records name none")
        )
    return 0


TRAIN = Command("train", "train an agent; writes a run directory", _train_arguments, cmd_train)
REPORT = Command(
    "report", "one self-contained HTML page of one or more runs", _report_arguments, cmd_report
)
SHOW = Command("show", "print a run's sample games as conversations", _show_arguments, cmd_show)
