"""``coplay serve``: a run's final checkpoint as an OpenAI-compatible endpoint (vLLM)."""

from __future__ import annotations

import argparse

from coplay.cli.common import Command, serve_port


def _serve_arguments(sv: argparse.ArgumentParser) -> None:
    sv.add_argument("run", help="run directory (its final checkpoint) or checkpoint folder")
    sv.add_argument(
        "--host",
        default="127.0.0.1",
        help="address to bind; 127.0.0.1: this machine only (default: %(default)s)",
    )
    sv.add_argument(
        "--port", type=serve_port, default=8000, help="port to serve on (default: %(default)s)"
    )


def cmd_serve(args: argparse.Namespace) -> int:
    from coplay.serve import serve

    return serve(args.run, host=args.host, port=args.port)


SERVE = Command(
    "serve", "serve a run as an OpenAI-compatible endpoint (vLLM)", _serve_arguments, cmd_serve
)
