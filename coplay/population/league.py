"""A league: one learner trains against frozen snapshots of itself (and optional bots).

The one training loop (``coplay.train.loop``) runs with a ``FromPool`` seating drawing
each group's opponents from the league, and the league as a hook (``LeagueHook``):
before every iteration an opponent sampler (registry ``SAMPLERS``,
``coplay.population.league_samplers``) sets the members' probabilities; a ``self_play``
share of games stays plain shared-weight self-play. A snapshot of the learner joins the
league every ``snapshot_every`` iterations, or as soon as its score against the league
since the last snapshot reaches ``win_threshold``. The learner's results against each
member, and the Elo ratings of everyone, are tallied from its games
(``coplay.population.league_tally``). The league's state is saved with the run's, so a
stopped league continues (``coplay league --resume DIR``, with the settings saved in
``league.yaml``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from coplay.eval.exact import to_openspiel_policy
from coplay.population.league_config import LeagueConfig, league_seats, settings_yaml
from coplay.population.league_samplers import SAMPLERS, PoolView
from coplay.population.league_tally import Tally, league_elo, tally_games
from coplay.population.metagame import (
    exact_game,
    exact_payoffs,
    freeze,
    reload_frozen,
    sampled_payoffs,
)
from coplay.population.opponents import OpponentPool, build_opponent
from coplay.report import atomic, sinks
from coplay.train.checkpoints import rundir
from coplay.train.evaluate import evaluate, final_policy
from coplay.train.hooks import Hook, Progress
from coplay.train.loop import Run
from coplay.train.parts.seating import FromPool
from coplay.train.trainer import checkpoint, drive, setup
from coplay.types import Policy


def snapshot_reason(iteration: int, cfg: LeagueConfig, since: Tally) -> str | None:
    """'schedule', 'threshold' or None: whether a snapshot joins after ``iteration``."""
    if cfg.snapshot_every and iteration % cfg.snapshot_every == 0:
        return "schedule"
    if (
        cfg.win_threshold is not None
        and since.games.sum() >= cfg.min_games
        and since.score() >= cfg.win_threshold
    ):
        return "threshold"
    return None


@dataclass(frozen=True)
class LeagueResult:
    """The league at the end: members, the learner's results and everyone's Elo."""

    members: tuple[str, ...]
    snapshots: tuple[tuple[int, str], ...]
    """(iteration, reason) of every snapshot, the initial one at iteration 0."""
    tally: Tally
    elo: tuple[float | None, ...]
    """Elo of the learner, then of each member (``members`` order); None for a member
    without games (and the learner, if it played none), which has no rating."""
    final: dict[str, float]
    """The learner's last evaluation (exploitability, matches)."""
    wall_s: float


@dataclass
class _League:
    members: list[Policy]
    snapshots: list[tuple[int, str]]
    tally: Tally
    since: Tally
    payoff: np.ndarray | None = None
    tables: list | None = None


@dataclass
class LeagueHook(Hook):
    """The league as a hook of the training loop: before each iteration the sampler
    sets the pool's probabilities; after it the learner's games are tallied and a
    snapshot may join. Its state (snapshots, tallies, the members' meta-game) is saved
    with the run's and the snapshots reload from their folders, so a league resumes."""

    cfg: LeagueConfig
    pool: OpponentPool
    league: _League
    bots: int
    """How many of the league's first members are scripted bots (never snapshots)."""
    name: str | None = "league"

    def before(self, run: Run, it: int) -> dict[str, float]:
        league = self.league
        view = PoolView(league.tally.grown(len(league.members)).win_rates(), league.payoff)
        self.pool.members, self.pool.probs = (
            list(league.members),
            SAMPLERS[self.cfg.sampler].weights(view, self.cfg),
        )
        return view.metrics | member_metrics(league.members, self.pool.probs, view.win_rates)

    def after(self, run, it, batch, metrics):
        league = self.league
        learner_id = run.trainees[0].name
        new = tally_games(batch.episodes, learner_id, [m.policy_id for m in league.members])
        league.tally, league.since = league.tally + new, league.since + new
        out = {"league/score": new.score(), "league/members": len(league.members)}
        if reason := snapshot_reason(it, self.cfg, league.since):
            _add_snapshot(self.cfg, run, league, it, reason)
        return out

    def state(self) -> dict:
        t, s = self.league.tally, self.league.since
        return {
            "snapshots": [list(x) for x in self.league.snapshots],
            "tally": t.saved(),
            "since": s.saved(),
            "payoff": self.league.payoff,
        }

    def load(self, tree: dict, run: Run) -> None:
        """Restore the tallies and meta-game, and reload every snapshot from its folder
        into the league and the run's policies (whose sampling states load after)."""
        league = self.league
        del league.members[self.bots :]
        league.snapshots, league.tables = [], None
        for it, reason in tree["snapshots"]:
            snap = _reload(self.cfg, run.out, int(it))
            league.members.append(snap)
            run.policies[snap.policy_id] = snap
            league.snapshots.append((int(it), str(reason)))
        league.tally = Tally.restored(tree["tally"])
        league.since = Tally.restored(tree["since"])
        league.payoff = None if tree["payoff"] is None else np.asarray(tree["payoff"])


def member_metrics(
    members: Sequence[Policy], probs: np.ndarray, win_rates: np.ndarray
) -> dict[str, float]:
    """Each member's probability of being drawn (``league/weight/<id>``) and the learner's
    estimated chance of beating it (``league/win_rate/<id>``), as set before this
    iteration's plan is made: with Ray workers playing k iterations ahead
    (``rollout.max_staleness``) that plan is iteration it + k's, made during this one."""
    out = {}
    for m, p, x in zip(members, probs, win_rates, strict=True):
        out[f"league/weight/{m.policy_id}"] = float(p)
        out[f"league/win_rate/{m.policy_id}"] = float(x)
    return out


def _check_distinct(specs: Sequence[str], bots: Sequence[Policy]) -> None:
    """Games are seated by policy id, so two bots of one id would be one player (the
    last): checkpoints from folders of one name load as one ``frozen:<folder>``."""
    seen: dict[str, str] = {}
    for spec, bot in zip(specs, bots, strict=True):
        if bot.policy_id in seen:
            raise ValueError(
                f"bots {seen[bot.policy_id]!r} and {spec!r} both play as {bot.policy_id!r}; "
                "each bot needs its own (copy a checkpoint to a folder of another name)"
            )
        seen[bot.policy_id] = spec


def _snapshot_folder(out: Path, it: int) -> Path:
    return out / "snapshots" / f"iter_{it:06d}"


def _reload(cfg: LeagueConfig, out: Path, it: int) -> Policy:
    """A snapshot member as ``freeze`` made it, from its folder (in the dtype it was
    saved in, the learner's, on the run's device)."""
    seed = cfg.run.train.seed + it
    return reload_frozen(
        _snapshot_folder(out, it), f"snap:{it}", seed=seed, device=cfg.run.model.device
    )


def run_league(
    cfg: LeagueConfig,
    out: str | Path,
    *,
    progress: Progress | None = None,
    resume: bool = False,
    stop_after: int | None = None,
) -> LeagueResult:
    """Train ``cfg.run``'s learner in a league of its own snapshots; see the module
    docstring. Saves and resumes like any run (``resume``, ``stop_after``)."""
    out = Path(out)
    seat_weights = league_seats(cfg)  # before anything is written
    if resume:
        rundir.check_resume(cfg.run, out)
    g = cfg.run.game
    bots = [
        build_opponent(b, g.name, seed=cfg.run.train.seed + 7 + i, params=g.params)
        for i, b in enumerate(cfg.bots)
    ]
    _check_distinct(cfg.bots, bots)  # before the run's directory is written
    run = setup(cfg.run, out, fresh=not resume)
    league = _League(bots, [], Tally.empty(len(bots)), Tally.empty(len(bots)))
    run.policies.update({b.policy_id: b for b in bots})
    pool = OpponentPool(list(league.members), self_play=cfg.self_play)
    hook = LeagueHook(cfg, pool, league, bots=len(bots))
    if not resume:
        atomic.write_text(out / "league.yaml", settings_yaml(cfg))
        _add_snapshot(cfg, run, league, 0, "initial")
    run.seating = FromPool(run.trainees[0].name, pool, run.spec.num_players, seat_weights)
    try:
        end, ev, wall = drive(
            run,
            evaluate=evaluate,
            save=checkpoint,
            final=checkpoint,
            progress=progress,
            resume=resume,
            stop_after=stop_after,
            extra=[hook],
        )
    except rundir.RunInterrupted as stop:
        raise rundir.RunInterrupted(out, stop.saved, "league") from None
    return _finish(out, league, ev.evals["last"], wall)


def _add_snapshot(cfg: LeagueConfig, run: Run, league: _League, it: int, reason: str) -> None:
    """Freeze the learner (or its magnet, as ``magnet.final`` says) as a new member;
    refresh the meta-game for the meta sampler."""
    folder = _snapshot_folder(run.out, it)
    seed, game = cfg.run.train.seed + it, cfg.run.game.played()
    snap = freeze(final_policy(run), folder, f"snap:{it}", seed=seed, game=game)
    league.members.append(snap)
    run.policies[snap.policy_id] = snap
    league.snapshots.append((it, reason))
    league.since = Tally.empty(len(league.members))
    league.tally = league.tally.grown(len(league.members))
    if SAMPLERS[cfg.sampler].needs_payoff:
        league.payoff = _member_payoff(cfg, league, it)
        ids = [m.policy_id for m in league.members]
        sinks.write_metagame(run.out / "metagame.json", ids, [league.payoff])


def _member_payoff(cfg: LeagueConfig, league: _League, seed: int) -> np.ndarray:
    """``payoff[i, j]``: member i's mean return against j, its two seats averaged."""
    game = exact_game(cfg.run)
    if game is None:
        row, col = sampled_payoffs(league.members, cfg.run, episodes=cfg.meta_episodes, seed=seed)
    else:
        league.tables = league.tables or []
        league.tables += [
            to_openspiel_policy(m, cfg.run.game.name, params=cfg.run.game.params)
            for m in league.members[len(league.tables) :]
        ]
        row, col = exact_payoffs(game, league.tables)
    return (row + col.T) / 2.0


def _finish(out: Path, league: _League, last: dict[str, float], wall_s: float) -> LeagueResult:
    elo = league_elo(league.tally) if len(league.members) else np.full(1, np.nan)
    result = LeagueResult(
        members=tuple(m.policy_id for m in league.members),
        snapshots=tuple(league.snapshots),
        tally=league.tally,
        elo=tuple(float(x) if np.isfinite(x) else None for x in elo),
        final=dict(last),
        wall_s=wall_s,
    )
    summary = {
        "members": list(result.members),
        "snapshots": [list(s) for s in result.snapshots],
        "games": result.tally.games.tolist(),
        "win_rates": result.tally.win_rates().tolist(),
        "elo": {"learner": result.elo[0], **dict(zip(result.members, result.elo[1:], strict=True))},
        **{f"final/{k}": v for k, v in last.items()},
        "wall_s": wall_s,
    }
    sinks.write_summary(out / "summary.json", summary)
    return result
