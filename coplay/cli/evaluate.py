"""``coplay eval``: a run or checkpoint against an opponent, played and computed exactly."""

from __future__ import annotations

import argparse
import warnings
from dataclasses import dataclass
from pathlib import Path

from rich.table import Table

from coplay.cli.common import (
    Command,
    build_player,
    check_opponents,
    check_workers,
    console,
    game_params,
    seed,
    titled_table,
)
from coplay.report.progress import track
from coplay.rollout.invalid import InvalidActionConfig

SAMPLES = 32
"""``--samples`` when not given: answers asked per information state of a writing policy."""


def _eval_arguments(e: argparse.ArgumentParser) -> None:
    e.add_argument("path", help="run directory, checkpoint or LoRA adapter folder")
    e.add_argument(
        "--game",
        default=None,
        help="game (default: the one the checkpoint records); the checkpoint's own game, "
        "under any of its names (kuhn_poker, openspiel:kuhn_poker), keeps the parameters it "
        "was trained with",
    )
    e.add_argument(
        "--role",
        default=None,
        help="the policy of a roster run to evaluate (a learner's name, or 'base': the "
        "untrained base of a LoRA run)",
    )
    e.add_argument(
        "--opponent",
        default="random",
        help="random, nash, perfect, optimal, a path, or remote:URL#model[@ENV_VAR]: an "
        "OpenAI-compatible endpoint such as coplay serve's, read through its sampled "
        "answers for --exact and --costly (default: %(default)s)",
    )
    e.add_argument(
        "--episodes", type=int, default=1000, help="games to play (default: %(default)s)"
    )
    e.add_argument(
        "--seed",
        type=seed,
        default=0,
        help="seed of the games and of the players' sampling (default: %(default)s)",
    )
    e.add_argument(
        "--exact",
        action="store_true",
        help="also the exact win/draw/loss per seat by walking the game tree (OpenSpiel games)",
    )
    e.add_argument(
        "--samples",
        type=int,
        default=None,  # None: not given, so that a choice-mode run can say it is ignored
        metavar="K",
        help="a text-mode policy's answers per information state for its sampled "
        "exploitability and exact rows, with bootstrap intervals (coplay/eval/sampled.py); "
        f"a text-mode opponent's too, for --exact and --costly (default: {SAMPLES})",
    )
    e.add_argument(
        "--workers",
        type=int,
        default=0,
        help="ask a text-mode policy's --samples answers on N Ray workers (the ray extra); "
        "0: in this process (default: %(default)s). Every answer draws from a stream keyed "
        "by its state, so any N gives the same estimate. A choice-mode policy's exact "
        "evaluation is one batched forward and stays in this process",
    )
    e.add_argument(
        "--ray-address",
        default=None,
        help="with --workers: a running Ray cluster to join (auto, ray://host:10001, "
        "host:6379); default: a private local Ray",
    )
    e.add_argument(
        "--costly",
        type=int,
        default=0,
        metavar="N",
        help="also the N positions per seat where changing the policy's answer gains the "
        "most against the opponent, exactly (OpenSpiel games; coplay/eval/costly.py); "
        "0: none (default: %(default)s)",
    )
    e.add_argument(
        "params",
        nargs="*",
        default=[],  # without one, a missing path is said as "required: path, params"
        help="game parameters as key=value, e.g. players=3, over those the checkpoint was "
        "trained with (said in one line where they differ)",
    )


def cmd_eval(args: argparse.Namespace) -> int:
    from coplay.envs.probe import resolve_factory
    from coplay.eval.exact import decide_exact, exploitability, solvable_game
    from coplay.eval.matches import play_match
    from coplay.models.checkpoints import find_policy
    from coplay.train.evaluate import writes

    if args.episodes <= 0:
        raise ValueError(f"--episodes must be positive, got {args.episodes}")
    if args.costly < 0:
        raise ValueError(f"--costly must be 0 (off) or positive, got {args.costly}")
    if args.samples is not None and args.samples <= 0:
        raise ValueError(f"--samples must be positive, got {args.samples}")
    check_workers(args)
    saved = find_policy(args.path, args.role)
    played = _game_of(saved, args.game, game_params(args.params))
    game, params = played.name, played.params
    settings = run_settings(saved.folder, game)
    make = resolve_factory(game, params)
    check_opponents([args.opponent], game, params)  # its --role would be the policy's
    policy = saved.load(seed=args.seed)
    spec = make().spec
    opponent = build_player(args.opponent, game, params, seed=args.seed + 1)
    args.samples = _samples(args, writes(policy), writes(opponent))
    if args.exact or args.costly:  # before the match, which a refusal after it would waste
        solvable_game(game, params)
    exact_opponent = _exact_view(opponent, args, settings.invalid)
    with track("eval", args.episodes, "episodes", console=console) as advance:
        res = play_match(
            make,
            policy,
            [opponent] * (spec.num_players - 1),
            episodes=args.episodes,
            seed=args.seed,
            invalid=settings.invalid,
            max_turns=settings.max_turns,
            on_progress=advance,
        )
    console.print(settings.describe())
    if played.differs():
        console.print(played.describe())
    table = titled_table(f"{saved.folder} vs {args.opponent} on {game}")
    table.add_column("", no_wrap=True)
    table.add_column("value [95% CI]", justify="right")
    for name in ("win", "draw", "loss", "mean_return"):
        table.add_row(name, str(getattr(res, name)))
    for seat, r in enumerate(res.mean_return_by_seat):
        table.add_row(f"mean return, seat {seat}", f"{r:.3f}")
    table.add_row("episodes", str(res.episodes))
    table.add_row("invalid-action rate", f"{res.invalid_rate:.3f}")
    if writes(policy):
        return _eval_text(args, table, policy, exact_opponent, spec, game, params, settings.invalid)
    if decide_exact("auto", spec, game, params):
        ex = exploitability(policy, game, params=params)
        table.add_row("exploitability (exact)", f"{ex.exploitability:.4f}")
        table.add_row("NashConv (exact)", f"{ex.nash_conv:.4f}")
    if args.exact and writes(opponent):
        _against_sampled_rows(args, table, policy, exact_opponent, game, params)
    elif args.exact:
        _exact_rows(table, policy, opponent, game, params)
    console.print(table)
    if args.costly:
        _print_costly(policy, exact_opponent, game, params, args.costly)
    return 0


def _samples(args: argparse.Namespace, policy_writes: bool, opponent_writes: bool) -> int:
    """``--samples``, or ``SAMPLES`` when not given. Only a writing policy's answers are
    sampled, and a writing opponent's for --exact and --costly: given where none are,
    it would pass as if it had counted, so a warning (one line) says it is ignored."""
    if args.samples is None:
        return SAMPLES
    if not policy_writes and not (opponent_writes and (args.exact or args.costly)):
        why = (
            "the policy plays in choice mode, and the opponent's answers are sampled only "
            "for --exact and --costly"
            if opponent_writes
            else "it counts the answers of a text-mode policy or opponent, and both here "
            "play in choice mode"
        )
        warnings.warn(f"--samples {args.samples} is ignored: {why}", stacklevel=2)
    return args.samples


def _exact_view(opponent, args: argparse.Namespace, invalid: InvalidActionConfig):
    """What ``--exact`` and ``--costly`` read of the opponent: itself, or if it writes,
    its sampled distribution (``--samples`` answers per state, asked in this process,
    invalid ones treated as ``invalid`` says), as training reads a writing evaluation
    opponent; its choice scores are no distribution of its play."""
    from coplay.eval.sampled import SampledPolicy
    from coplay.train.evaluate import writes

    if not writes(opponent):
        return opponent
    return SampledPolicy(opponent, k=args.samples, invalid=invalid, seed=args.seed + 1)


def _eval_text(
    args,
    table: Table,
    policy,
    opponent,
    spec,
    game: str,
    params: dict,
    invalid: InvalidActionConfig,
) -> int:
    """``coplay eval`` of a text-mode policy: its exact rows are those of its sampled
    distribution (``--samples`` answers per state, asked on ``--workers`` Ray workers
    or here), each with a bootstrap interval. ``opponent`` is the one exact rows read
    (``_exact_view``; a writing one's estimate is held fixed)."""
    from coplay.distributed import RayConfig, evaluation_source
    from coplay.envs.gameref import GameRef
    from coplay.eval.exact import decide_exact
    from coplay.eval.sampled import SampledPolicy, bootstrap, exploitability_metric, outcomes_metric

    metrics = []
    if decide_exact("auto", spec, game, params):
        metrics.append(exploitability_metric(game, params))
    if args.exact:
        metrics.append(outcomes_metric(opponent, game, params))
    ray = RayConfig(address=args.ray_address)
    where = GameRef(game, params)
    with evaluation_source(
        where, workers=args.workers, ray=ray, invalid=invalid, asked_by="--workers"
    ) as source:
        sampler = getattr(source, "tally", None)
        sampled = SampledPolicy(
            policy, k=args.samples, invalid=invalid, seed=args.seed, sampler=sampler
        )
        for metric in metrics:
            _estimate_rows(table, bootstrap(metric, sampled, seed=args.seed), "sampled")
        if metrics:
            table.add_row(
                f"invalid answers (sampled, K={args.samples})", f"{sampled.invalid_rate():.3f}"
            )
        if args.exact:
            _opponent_invalid_row(table, opponent)
        console.print(table)
        if args.costly:
            _print_costly(sampled, opponent, game, params, args.costly)
    return 0


def _against_sampled_rows(args, table: Table, policy, opponent, game: str, params: dict) -> None:
    """``--exact`` of a choice policy against a writing opponent: the policy's exact
    outcomes against the opponent's estimate, with bootstrap intervals over its answers."""
    from coplay.eval.sampled import bootstrap, outcomes_against_metric

    metric = outcomes_against_metric(policy, game, params)
    _estimate_rows(table, bootstrap(metric, opponent, seed=args.seed), "opponent sampled")
    _opponent_invalid_row(table, opponent)


def _estimate_rows(table: Table, estimates, how: str) -> None:
    for name, e in estimates.items():
        table.add_row(
            f"{name.replace('_', ' ')} ({how}, K={e.k})",
            f"{e.value:.4f} [{e.ci_low:.4f}, {e.ci_high:.4f}]",
        )


def _opponent_invalid_row(table: Table, opponent) -> None:
    """The share of invalid answers among a writing opponent's samples (none else)."""
    from coplay.eval.sampled import SampledPolicy

    if isinstance(opponent, SampledPolicy):
        table.add_row(
            f"opponent's invalid answers (sampled, K={opponent.k})",
            f"{opponent.invalid_rate():.3f}",
        )


def _print_costly(policy, opponent, game: str, params: dict, top: int) -> None:
    from coplay.eval.costly import costly_positions

    for seat, found in enumerate(costly_positions(policy, opponent, game, params=params, top=top)):
        table = titled_table(f"costliest positions, seat {seat} (exact gain in expected return)")
        for name in ("observation", "reach", "plays", "better", "gain"):
            table.add_column(name, justify="left" if name == "observation" else "right")
        for c in found:
            table.add_row(
                c.observation.strip(),
                f"{c.reach:.4f}",
                f"{c.played} ({c.played_prob:.2f})",
                c.best,
                f"{c.cost:.4f}",
            )
        console.print(table)


def _exact_rows(table: Table, policy, opponent, game: str, params: dict) -> None:
    from coplay.eval.exact_match import sampled_and_greedy_outcomes

    sampled, greedy = sampled_and_greedy_outcomes(policy, opponent, game, params=params)
    for o, g in zip(sampled, greedy, strict=True):
        table.add_row(
            f"win / draw / loss, seat {o.seat} (exact)",
            f"{o.win:.4f} / {o.draw:.4f} / {o.loss:.4f}",
        )
        table.add_row(f"loss of the argmax, seat {o.seat} (exact)", f"{g.loss:.4f}")


@dataclass(frozen=True)
class EvalGame:
    """The game ``coplay eval`` plays, as ``--game`` names it (else as the checkpoint
    records it), and its parameters."""

    name: str
    params: dict[str, object]
    """The checkpoint's own where ``name`` is its game, then those given over them."""
    trained: dict[str, object] | None
    """The parameters the checkpoint was trained with, where ``name`` is its game
    however spelled; None where it is another game or the checkpoint records none."""

    def differs(self) -> bool:
        """Whether the checkpoint's own game is played with other parameters."""
        return self.trained is not None and self.params != self.trained

    def describe(self) -> str:
        """One line for the output: the parameters played and those trained with."""
        return (
            f"game parameters played: {_listed(self.params)}; the checkpoint was trained on "
            f"this game with {_listed(self.trained or {})}"
        )


def _listed(params: dict[str, object]) -> str:
    return ", ".join(f"{k}={v!r}" for k, v in params.items()) or "the game's defaults"


def _game_of(saved, game: str | None, given: dict[str, object]) -> EvalGame:
    """The game to evaluate on: --game, else the one the checkpoint (or its run) records;
    with the checkpoint's parameters where --game names that game however spelled
    (``kuhn_poker``, ``openspiel:kuhn_poker``), and the ``given`` ones over them."""
    from coplay.envs.registry import same_game

    played = saved.game()
    if game is None and played is None:
        raise ValueError(f"cannot tell which game {saved.folder} plays; pass --game")
    name = game or played.name
    mine = played is not None and same_game(played.name, name)
    trained = dict(played.params) if mine else None
    return EvalGame(name, (trained or {}) | given, trained)


@dataclass(frozen=True)
class RunSettings:
    """The game settings a checkpoint is evaluated under: its run's, as its training
    evaluated it (``coplay.train.evaluate``), else the defaults."""

    invalid: InvalidActionConfig
    max_turns: int | None
    """Truncation of games (``game.max_turns``); None: the game's own limit."""
    config: Path | None
    """The run's config.yaml they were read from; None: the defaults (no run found)."""

    def describe(self) -> str:
        """One line for the output: the settings and where they come from."""
        bad = self.invalid
        turns = "the game's" if self.max_turns is None else str(self.max_turns)
        where = f"from {self.config}" if self.config else "defaults: no run config found"
        return (
            f"game settings ({where}): invalid answers on_fail={bad.on_fail} "
            f"retries={bad.retries} penalty={bad.penalty}, max_turns={turns}"
        )


def run_settings(folder: Path, game: str) -> RunSettings:
    """``game.invalid`` and ``game.max_turns`` of the run ``folder`` belongs to (the
    nearest config.yaml), when that run played ``game`` however spelled; else the
    defaults."""
    from coplay.envs.registry import same_game
    from coplay.models.checkpoints import run_config_file
    from coplay.report.runfiles import read_yaml
    from coplay.train.settings import validate

    file = run_config_file(folder)
    if file is not None:
        data = read_yaml(file)
        cfg = validate({k: data[k] for k in ("plugins", "game") if k in data})
        if same_game(cfg.game.name, game):  # another game's settings are not ours
            return RunSettings(cfg.game.invalid, cfg.game.max_turns, file)
    return RunSettings(InvalidActionConfig(), None, None)


EVAL = Command(
    "eval", "evaluate a run or checkpoint against an opponent", _eval_arguments, cmd_eval
)
