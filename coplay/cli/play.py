"""``coplay play``: a person against an agent, or policies watched, at the prompt or in
a local web page (coplay.play)."""

from __future__ import annotations

import argparse
import secrets
from pathlib import Path

from coplay.cli.common import Command, build_player, game_params, players_game, port, seed


def _play_arguments(pl: argparse.ArgumentParser) -> None:
    pl.add_argument(
        "agent",
        nargs="?",
        help="who you play: a run directory, checkpoint, random, nash, perfect, optimal or "
        "remote:URL#model[@ENV_VAR]; it takes every seat but yours",
    )
    pl.add_argument("--game", default=None, help="game (default: the one the run records)")
    pl.add_argument("--watch", nargs="+", metavar="POLICY", help="watch these play, one a seat")
    pl.add_argument("--seat", default="0", help="your seat: a number, or 'alternate' (default 0)")
    pl.add_argument("--games", type=int, default=1, help="games to play in the terminal")
    pl.add_argument(
        "--seed",
        type=seed,
        default=None,
        help="seed of the first deal (default: drawn at random, so deals are not those of "
        "seed 0, nor of the replays on the page, which show their seeds)",
    )
    pl.add_argument(
        "--show-probs", action="store_true", help="show each agent move's distribution and text"
    )
    pl.add_argument("--web", action="store_true", help="play in a local web page instead")
    pl.add_argument("--host", default="127.0.0.1", help="address the web page is served on")
    pl.add_argument("--port", type=port, default=8765, help="port of the web page (0: any free)")
    pl.add_argument("params", nargs="*", help="game parameters as key=value, e.g. players=3")


def cmd_play(args: argparse.Namespace) -> int:
    """A person against an agent (or policies watched) at the prompt or in a web page."""
    from coplay.envs.probe import resolve_factory
    from coplay.play.setup import play, seating

    # argparse may hand a game parameter (key=value) to the agent or to --watch, and a
    # player to the parameters; a path with '=' in it is still a player.
    items = [x for x in [args.agent, *args.params] if x]
    agents = [x for x in items if not _is_game_param(x)]
    watched = [w for w in args.watch or [] if not _is_game_param(w)]
    if len(agents) > 1:
        raise ValueError(
            f"name one agent to play against, got {' '.join(agents)} (game parameters look "
            "like key=value, e.g. players=3)"
        )
    if bool(agents) == bool(watched):
        raise ValueError("name one agent to play against, or the policies to --watch (not both)")
    specs = agents or watched
    for spec in specs:
        _check_player(spec)
    if args.seed is None:  # below 2**30: the deals after it (seed + games) stay seeds
        args.seed = secrets.randbelow(2**30)
    game, params = players_game(args.game, specs)
    params |= game_params([x for x in [*items, *(args.watch or [])] if _is_game_param(x)])
    make_env = resolve_factory(game, params)
    built = {
        spec: build_player(spec, game, params, seed=args.seed + i) for i, spec in enumerate(specs)
    }
    num_players = make_env().spec.num_players
    if args.watch and len(specs) > num_players:
        raise ValueError(f"--watch names {len(specs)} policies but {game} has {num_players} seats")
    seats = seating(specs, num_players, seat=None if args.watch else args.seat)
    return play(
        make_env,
        {name: None if spec is None else built[spec] for name, spec in seats.items()},
        rotate=args.seat == "alternate",
        games=args.games,
        seed=args.seed,
        show_probs=args.show_probs,
        web=(args.host, args.port) if args.web else None,
        transcripts=Path(specs[0]) / "transcripts.jsonl",
    )


def _is_game_param(item: str) -> bool:
    """``key=value`` with a Python name for the key, and no player of that name (an
    existing path such as ``runs/lr=0.1``, or a remote endpoint)."""
    key, sep, _ = item.partition("=")
    names_player = item.startswith("remote:") or Path(item).exists()
    return bool(sep) and key.strip().isidentifier() and not names_player


def _check_player(spec: str) -> None:
    """A player that names no bot must be a path that exists (one line if not)."""
    from coplay.population.opponents import SCRIPTED_NAMES

    if spec not in SCRIPTED_NAMES and not spec.startswith("remote:") and not Path(spec).exists():
        raise FileNotFoundError(
            f"{spec} does not exist (expected a run directory, a checkpoint or one of "
            f"{', '.join(SCRIPTED_NAMES)})"
        )


PLAY = Command(
    "play",
    "play a game against an agent, or watch policies play",
    _play_arguments,
    cmd_play,
)
