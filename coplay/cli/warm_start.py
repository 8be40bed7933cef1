"""``coplay sft`` and ``coplay demos`` (coplay.sft): warm starts before RL."""

from __future__ import annotations

import argparse
from pathlib import Path

from coplay.cli.common import (
    FORCE_HELP,
    PRESET_HELP,
    Command,
    check_model_path,
    check_opponents,
    claimed_file,
    claimed_run,
    console,
    game_params,
    heading,
    path_arg,
    seed,
)
from coplay.report.progress import track


def _sft_arguments(sf: argparse.ArgumentParser) -> None:
    sf.add_argument("--data", required=True, help="chat-format JSONL, one conversation a line")
    sf.add_argument(
        "--out", type=path_arg, required=True, help="run directory (a new one: see --force)"
    )
    sf.add_argument("--preset", default=None, help=PRESET_HELP)
    sf.add_argument(
        "--config", type=path_arg, default=None, help="YAML file merged over the preset"
    )
    sf.add_argument("--force", action="store_true", help=FORCE_HELP)
    sf.add_argument("--quiet", action="store_true", help="no progress bar")
    sf.add_argument(
        "overrides", nargs="*", help="key=value overrides, e.g. sft.epochs=3 sft.lora={}"
    )


def cmd_sft(args: argparse.Namespace) -> int:
    from coplay.sft.config import build_sft_config
    from coplay.sft.data import read_conversations
    from coplay.sft.trainer import run_sft, steps_total
    from coplay.train.settings import base_preset

    preset = base_preset(args.preset, args.config)
    cfg = build_sft_config(preset=preset, file=args.config, overrides=args.overrides)
    total = steps_total(len(read_conversations(args.data)), cfg.sft)
    check_model_path(cfg.run.model.path)
    out = Path(args.out)
    reads = [
        ("the dataset", args.data),
        ("--config", args.config),
        ("model.path", cfg.run.model.path),
    ]
    with claimed_run(out, args.force, reads=reads, resumable=False):
        console.print(heading("sft", f"{args.data} -> {out}"))
        with track("sft", total, "steps", console=console, quiet=args.quiet) as advance:
            summary = run_sft(
                cfg, args.data, out, progress=lambda s, m: advance(s, f"loss={m['sft/loss']:.3f}")
            )
    console.print(
        f"{summary['steps']} steps on {summary['conversations']} conversations "
        f"({summary['trained_tokens']} assistant tokens): loss {summary['first/sft/loss']:.4f} "
        f"-> {summary['final/sft/loss']:.4f}"
    )
    console.print(f"checkpoint: {summary['checkpoint']} (coplay train model.path=...)")
    return 0


def _demos_arguments(dm: argparse.ArgumentParser) -> None:
    from coplay.policies.answer import ANSWER_FORMATS

    dm.add_argument("--game", required=True, help="registered game or openspiel:<name>")
    dm.add_argument(
        "--player",
        default="random",
        help="random, nash, perfect, optimal or a checkpoint path (default: %(default)s)",
    )
    dm.add_argument("--games", type=int, default=100, help="games to play (default: %(default)s)")
    dm.add_argument("--out", type=path_arg, required=True, help="JSONL file to write (see --force)")
    dm.add_argument(
        "--context",
        default="turn",
        choices=("turn", "chat"),
        help="turn: one conversation per decision; chat: one per player and game "
        "(default: %(default)s)",
    )
    dm.add_argument(
        "--answer",
        default="think",
        help="answer format of the written answers (model.text.answer): "
        + ", ".join(sorted(ANSWER_FORMATS))
        + " (default: %(default)s)",
    )
    dm.add_argument(
        "--seed",
        type=seed,
        default=0,
        help="seed of the games and of the player's sampling (default: %(default)s)",
    )
    dm.add_argument("--force", action="store_true", help="move an existing --out to OUT.old-<time>")
    dm.add_argument("params", nargs="*", help="game parameters as key=value, e.g. players=3")


def cmd_demos(args: argparse.Namespace) -> int:
    from coplay.envs.probe import resolve_factory
    from coplay.policies.answer import check_format
    from coplay.sft.demos import write_demos

    if args.games <= 0:
        raise ValueError(f"--games must be positive, got {args.games}")
    # What write_demos refuses is checked before --force moves anything: the answer
    # format, the game and its parameters, the player.
    check_format(args.answer)
    params = game_params(args.params)
    resolve_factory(args.game, params)  # builds the game once: unknown names fail here
    check_opponents([args.player], args.game, params)
    out = Path(args.out)
    with claimed_file(out, args.force):
        count = write_demos(
            out,
            game=args.game,
            player=args.player,
            games=args.games,
            seed=args.seed,
            params=params,
            context=args.context,
            answer=args.answer,
        )
    console.print(f"written: {out} ({count} conversations; train on it with coplay sft)")
    return 0


SFT = Command("sft", "fine-tune on chat JSONL (loss on assistant turns)", _sft_arguments, cmd_sft)
DEMOS = Command(
    "demos",
    "narrated demonstrations of a scripted player, as JSONL",
    _demos_arguments,
    cmd_demos,
)
