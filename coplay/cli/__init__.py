"""coplay: train, evaluate, rate and play language-model agents in games (coplay COMMAND --help).

Every user error (bad config, unknown game, missing checkpoint, an output path that
cannot be written) ends in one line on stderr and exit status 2, never a traceback
(``coplay --debug ...`` shows it). Ctrl-C ends in one line too, exit status 130.
``key=value`` overrides may stand anywhere on the command line, before or after the
options. Long commands report progress on stderr (``coplay.report.progress``); tables
go to stdout, whole even when piped.

Each command is a ``Command`` record in one module of this package, listed once in
``COMMANDS``; that order is the order of ``coplay --help``.
"""

from __future__ import annotations

import argparse
import sys
import warnings
from collections.abc import Sequence

from coplay.cli import evaluate, info, play, population, serve, tournament, train, warm_start
from coplay.cli.common import DEBUG_HELP, PIPED_WIDTH, Command, console

COMMANDS: dict[str, Command] = {
    c.name: c
    for c in (
        train.TRAIN,
        evaluate.EVAL,
        info.CONFIG,
        tournament.TOURNAMENT,
        info.CHECK_ENV,
        warm_start.SFT,
        warm_start.DEMOS,
        train.REPORT,
        train.SHOW,
        play.PLAY,
        info.GAMES,
        info.PRESETS,
        population.PSRO,
        serve.SERVE,
        population.LEAGUE,
    )
}
USER_ERRORS = (ValueError, KeyError, TypeError, OSError)
"""Shown as one line; OSError covers missing files, permissions and unreachable hosts."""
LEFTOVER_FIELDS = ("overrides", "params")
"""The '*' positionals (key=value items) a command may have."""


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="coplay", description=__doc__.splitlines()[0])
    p.add_argument("--debug", action="store_true", help=DEBUG_HELP)
    sub = p.add_subparsers(dest="command", required=True)
    for command in COMMANDS.values():
        parser = sub.add_parser(command.name, help=command.help)
        command.add_arguments(parser)
        # `coplay train ... --debug` works as well
        parser.add_argument(
            "--debug", action="store_true", default=argparse.SUPPRESS, help=DEBUG_HELP
        )
    return p


def main(argv: Sequence[str] | None = None) -> int:
    try:
        args = _arguments(argv)
    except KeyboardInterrupt:  # building the parser imports what its choices come from
        print("coplay: interrupted", file=sys.stderr)
        return 130
    console.width = None if console.is_terminal else PIPED_WIDTH
    import transformers

    transformers.utils.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()
    run = COMMANDS[args.command].run
    if args.debug:
        return run(args)
    with warnings.catch_warnings():
        warnings.showwarning = _warning_line(args.command)
        try:
            return run(args)
        except KeyboardInterrupt as err:  # RunInterrupted says what was saved
            print(f"coplay {args.command}: {str(err) or 'interrupted'}", file=sys.stderr)
            return 130
        except USER_ERRORS as err:
            print(f"coplay {args.command}: error: {_error_line(err)}", file=sys.stderr)
            return 2


def _arguments(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = _parser()
    args, extra = parser.parse_known_args(argv)
    _take_leftovers(parser, args, [*getattr(args, "after_numbers", []), *extra])
    return args


def _error_line(err: BaseException) -> str:
    """The first line of an error; an OS error as "<what went wrong>: <path>"."""
    if isinstance(err, OSError) and err.strerror and err.filename:
        return f"{err.strerror}: {err.filename}"
    return str(err).splitlines()[0] if str(err) else type(err).__name__


def _warning_line(command: str):
    def show(message, category, filename, lineno, file=None, line=None) -> None:
        print(f"coplay {command}: warning: {message}", file=file or sys.stderr)

    return show


def _take_leftovers(parser: argparse.ArgumentParser, args, extra: list[str]) -> None:
    """Put key=value items that follow an option into the command's '*' positional.

    argparse before 3.12 stops filling a '*' positional at the first option, so in
    ``train --out runs/x train.iterations=5`` the override is left over; it belongs
    with the others, in command-line order. Anything else left over is an error.
    """
    if not extra:
        return
    field = next((f for f in LEFTOVER_FIELDS if isinstance(getattr(args, f, None), list)), None)
    if field is None or any(e.startswith("-") for e in extra):
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    getattr(args, field).extend(extra)
