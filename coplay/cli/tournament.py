"""``coplay tournament``: cross-play a population; Elo, OpenSkill and α-rank."""

from __future__ import annotations

import argparse
import json
import math
from contextlib import nullcontext
from pathlib import Path

from rich.table import Table

from coplay.cli.common import (
    Command,
    build_player,
    check_workers,
    claimed_file,
    console,
    is_checkpoint_player,
    path_arg,
    players_game,
    saved_player,
    seed,
    titled_table,
)
from coplay.cli.evaluate import RunSettings, run_settings
from coplay.report.progress import track
from coplay.rollout.invalid import InvalidActionConfig


def _tournament_arguments(tm: argparse.ArgumentParser) -> None:
    tm.add_argument(
        "--game",
        default=None,
        help="registered game, openspiel:<name> or package.module:factory "
        "(default: the game the checkpoint players record)",
    )
    tm.add_argument(
        "--players",
        nargs="+",
        required=True,
        help="scripted names (random, nash, perfect, optimal), checkpoint or run paths, or "
        "remote:URL#model[@ENV_VAR] (an OpenAI-compatible endpoint; its API key is read "
        "from ENV_VAR, and sent over http:// only to localhost)",
    )
    tm.add_argument(
        "--episodes", type=int, default=200, help="games per pairing (default: %(default)s)"
    )
    tm.add_argument(
        "--seed",
        type=seed,
        default=0,
        help="seed of the games and of the players' sampling (default: %(default)s)",
    )
    tm.add_argument(
        "--out",
        type=path_arg,
        default=None,
        help="write the matrix and ratings as JSON here (partial results if a player fails); "
        "an existing file is refused unless --force",
    )
    tm.add_argument(
        "--force", action="store_true", help="move an existing --out file to OUT.old-<time>"
    )
    tm.add_argument(
        "--workers",
        type=int,
        default=0,
        help="play the matches on N Ray workers (the ray extra); 0: in this process "
        "(default: %(default)s). Each "
        "game draws from its own random streams, so any N > 0 gives the same results",
    )
    tm.add_argument(
        "--ray-address",
        default=None,
        help="with --workers: a running Ray cluster to join (auto, ray://host:10001, "
        "host:6379); default: a private local Ray",
    )


def cmd_tournament(args: argparse.Namespace) -> int:
    from coplay.envs.probe import resolve_factory
    from coplay.eval.crossplay import rate_cross_play, to_json

    if args.episodes <= 0:
        raise ValueError(f"--episodes must be positive, got {args.episodes}")
    check_workers(args)  # before any player is built
    if len(set(args.players)) != len(args.players):
        raise ValueError(f"list each player once, got {' '.join(args.players)}")
    _check_distinct_checkpoints(args.players)
    if len(args.players) < 2:
        raise ValueError(f"a tournament needs at least 2 policies, got {len(args.players)}")
    game, params = players_game(args.game, args.players)
    seats = resolve_factory(game, params)().spec.num_players
    if seats < 2:  # before any player is built; a lone seat "wins" every game
        raise ValueError(f"a tournament needs a game of 2 or more players; {game!r} has {seats}")
    settings = _settings(args.players, game)
    policies = {
        spec: build_player(spec, game, params, seed=args.seed + i)
        for i, spec in enumerate(args.players)
    }
    out = None if args.out is None else Path(args.out)
    with nullcontext() if out is None else claimed_file(out, args.force):
        res = _play(args, game, params, policies, seats, settings, out)
        console.print(settings.describe())
        ratings = rate_cross_play(res)
        console.print(_crossplay_table(res))
        console.print(_ratings_table(ratings))
        if res.num_players > 2:
            console.print(NO_ALPHARANK)
        if out is not None:
            _write_results(out, to_json(res, ratings) | {"complete": True})
    return 0


def _check_distinct_checkpoints(players: list[str]) -> None:
    """Refuse one checkpoint listed under two spellings (``runs/x`` and ``./runs/x/``, a
    run and its final checkpoint): it would play itself as two players."""
    seen: dict[Path, str] = {}
    for spec in players:
        if not is_checkpoint_player(spec):
            continue
        folder = saved_player(spec).folder
        if (other := seen.setdefault(folder.resolve(), spec)) != spec:
            raise ValueError(
                f"{other} and {spec} are the same checkpoint ({folder}); list each player once"
            )


def _settings(players: list[str], game: str) -> RunSettings:
    """The game settings of the checkpoint players' runs (``run_settings``), which must
    agree; the defaults where no player comes from a run."""
    found = {
        spec: run_settings(saved_player(spec).folder, game)
        for spec in players
        if is_checkpoint_player(spec)
    }
    from_runs = {spec: s for spec, s in found.items() if s.config is not None}
    kinds = {(s.invalid.model_dump_json(), s.max_turns) for s in from_runs.values()}
    if len(kinds) > 1:
        named = ", ".join(f"{spec}: {s.describe()}" for spec, s in from_runs.items())
        raise ValueError(f"the checkpoints' runs play {game} under different settings ({named})")
    return next(iter(from_runs.values()), RunSettings(InvalidActionConfig(), None, None))


def _play(
    args: argparse.Namespace,
    game: str,
    params: dict,
    policies: dict,
    seats: int,
    settings: RunSettings,
    out: Path | None,
):
    """Every pairing's games; when a player fails, the matches played are shown and
    saved to ``out`` (if given) before its error is raised."""
    from coplay.distributed import RayConfig, evaluation_source
    from coplay.envs.gameref import GameRef
    from coplay.eval.crossplay import CrossPlayInterrupted, cross_play, games_total, to_json

    total = games_total(len(policies), seats, args.episodes)
    ray = RayConfig(address=args.ray_address)
    try:
        with (
            evaluation_source(
                GameRef(game, params),
                workers=args.workers,
                ray=ray,
                invalid=settings.invalid,
                asked_by="--workers",
                max_turns=settings.max_turns,
            ) as source,
            track("tournament", total, "games", console=console) as advance,
        ):
            return cross_play(
                game,
                policies,
                episodes=args.episodes,
                seed=args.seed,
                params=params,
                invalid=settings.invalid,
                max_turns=settings.max_turns,
                on_progress=lambda done, _total: advance(done),
                source=source,
            )
    except CrossPlayInterrupted as stop:
        console.print(_crossplay_table(stop.partial))
        cause = stop.__cause__ or stop
        if out is not None:
            data = to_json(stop.partial) | {"complete": False, "stopped": f"{stop}: {cause}"}
            _write_results(out, data, what="partial results")
        raise cause from None


def _write_results(path: Path, data: dict, *, what: str = "results") -> None:
    """Write ``data`` as JSON atomically; a failure is one line naming the path (the
    results were printed already)."""
    from coplay.report.atomic import write_text
    from coplay.train.checkpoints.rundir import RunDirError, existing_ancestor

    if not (blocker := existing_ancestor(path.parent)).is_dir():
        raise RunDirError(f"cannot write {what} to {path}: {blocker} is a file")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_text(path, json.dumps(data, indent=2, allow_nan=False))
    except OSError as err:
        raise RunDirError(f"cannot write {what} to {path}: {err.strerror or err}") from None
    console.print(f"written: {path}")


def _crossplay_table(res) -> Table:
    table = titled_table(f"{res.game}: mean return of row vs column [95% CI], {res.episodes} games")
    table.add_column("", no_wrap=True)
    for name in res.names:
        table.add_column(name, justify="right")
    for name, row in zip(res.names, res.results, strict=True):
        table.add_row(name, *(str(r.mean_return) if r.episodes else "-" for r in row))
    return table


def _ratings_table(ratings) -> Table:
    table = titled_table("ratings")
    for col in ("player", "Elo", "OpenSkill mu ± sigma", "ordinal", "α-rank"):
        table.add_column(col, justify="left" if col == "player" else "right", no_wrap=True)
    for i, name in enumerate(ratings.names):
        skill = ratings.openskill[i]
        table.add_row(
            name,
            _rated(ratings.elo[i], ".1f"),
            f"{skill.mu:.2f} ± {skill.sigma:.2f}",
            f"{skill.ordinal:.2f}",
            _rated(ratings.alpharank[i], ".3f"),
        )
    return table


NO_ALPHARANK = (
    "α-rank: left out for more than 2 players; it needs the whole meta-game, and "
    "cross-play plays one policy against copies of another"
)


def _rated(value: float | None, spec: str) -> str:
    """A rating in ``spec``, or a dash where there is none: Elo for a player without
    games, α-rank for more than 2 players."""
    return "-" if value is None or math.isnan(value) else format(value, spec)


TOURNAMENT = Command(
    "tournament",
    "cross-play a population; Elo, OpenSkill, α-rank",
    _tournament_arguments,
    cmd_tournament,
)
