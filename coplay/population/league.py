"""A league: one learner trains against frozen snapshots of itself (and optional bots).

The one training loop (``coplay.train.loop``) runs with a ``FromPool`` seating drawing
each group's opponents from the league, and the league as a hook (``LeagueHook``):
before every iteration an opponent sampler (registry ``SAMPLERS``) sets the members'
probabilities; a ``self_play`` share of games stays plain shared-weight self-play.
A snapshot of the learner joins the league every ``snapshot_every`` iterations, or as
soon as its score against the league since the last snapshot reaches ``win_threshold``.

Samplers (AlphaStar, Vinyals et al. 2019, prioritised fictitious self-play):
  uniform   every member alike (fictitious self-play);
  pfsp      weight f(x), x = P[learner beats member]: "hard" f = (1 - x)^p,
            "variance" f = x (1 - x);
  meta      a meta-solver's mixture of the members' own meta-game (two-player games).

P[learner beats member] is estimated from the episodes the learner played against the
member (``Episode.seats`` names each seat's policy). Each game counts once per seat the
member holds (n - 1 head-to-head results in an n-player game, one in a two-player
game): won if the learner's return is higher than that seat's, drawn if equal. So
equal policies score 1/2 whatever n, where "the learner's return is the table's best"
would give 1/n. The estimate is (wins + draws / 2 + 1/2) / (results + 1), one half-won
pseudo-result, so an unplayed member starts at 1/2. Elo ratings of the learner and
every member come from the same results (the learner's rating pools its whole
history). The league's state is saved with the run's, so a stopped league
continues (``coplay league --resume DIR``, with the settings saved in ``league.yaml``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import numpy as np
import yaml
from pydantic import BaseModel, ConfigDict, Field, model_validator

from coplay.envs.probe import names_user_factory, resolve_factory
from coplay.eval.exact import to_openspiel_policy
from coplay.eval.metasolvers import META_SOLVERS
from coplay.eval.ratings import elo_ratings
from coplay.models.loading import load_policy
from coplay.population.metagame import (
    check_meta_solver,
    exact_game,
    exact_payoffs,
    freeze,
    sampled_payoffs,
    solve,
)
from coplay.population.opponents import OpponentPool, build_opponent
from coplay.report import atomic, sinks
from coplay.train.checkpoints import rundir
from coplay.train.config import RunConfig, check_seat_weights
from coplay.train.evaluate import evaluate, final_policy
from coplay.train.hooks import Hook, Progress
from coplay.train.loop import Run
from coplay.train.parts.seating import FromPool
from coplay.train.trainer import check_weights, checkpoint, drive, setup
from coplay.types import Episode, Policy


class LeagueConfig(BaseModel):
    """A league run: the learner's trainer config plus how the league grows and samples."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)

    run: RunConfig = Field(default_factory=RunConfig)
    """The learner's trainer config (``run.train.iterations`` in all)."""
    sampler: str = "pfsp"
    """Opponent sampler (``SAMPLERS``): uniform, pfsp or meta."""
    pfsp_weighting: Literal["hard", "variance"] = "hard"
    """PFSP's f: 'hard' (1-x)^p favours members the learner loses to; 'variance' x(1-x)
    favours even matches."""
    pfsp_power: float = Field(2.0, gt=0.0)
    """p of the 'hard' weighting."""
    meta_solver: str = "nash"
    """Meta-solver of the 'meta' sampler."""
    self_play: float = Field(0.2, ge=0.0, le=1.0)
    """Share of games that stay plain self-play."""
    snapshot_every: int = Field(20, ge=0)
    """Iterations between snapshots; 0 adds them only on the win-rate threshold."""
    win_threshold: float | None = Field(0.7, gt=0.0, le=1.0)
    """Add a snapshot when the learner's score (wins + draws/2 per head-to-head result,
    one per opponent seat) against the league since the last snapshot reaches this;
    None turns the trigger off."""
    min_games: int = Field(64, gt=0)
    """League games since the last snapshot before the threshold is read."""
    bots: list[str] = Field(default_factory=list)
    """Scripted members (random, nash, perfect) that join at the start."""
    seat_weights: list[float] | None = None
    """Share of the learner's game groups per seat against league members (see
    train.opponent.seat_weights), one non-negative weight per seat, not all 0; None
    rotates seats evenly."""
    meta_episodes: int = Field(64, gt=0)
    """Games per pairing for the 'meta' sampler's meta-game where it is not exact."""

    @model_validator(mode="after")
    def _check(self) -> LeagueConfig:
        if self.sampler not in SAMPLERS:
            raise ValueError(f"unknown sampler {self.sampler!r}; available: {', '.join(SAMPLERS)}")
        if self.meta_solver not in META_SOLVERS:
            raise ValueError(
                f"unknown meta_solver {self.meta_solver!r}; available: {', '.join(META_SOLVERS)}"
            )
        if len(set(self.bots)) != len(self.bots):
            raise ValueError(f"bots must be distinct, got {self.bots}")
        check_seat_weights(self.seat_weights)
        checks_game = self.seat_weights is not None or self.sampler == "meta"
        if checks_game and not names_user_factory(self.run.game.name):
            league_seats(self)  # a user's game is imported only when run_league builds it
        return self


def league_seats(cfg: LeagueConfig) -> tuple[float, ...] | None:
    """The seat weights, one per seat of the game (which this builds); the number of
    players, and the meta sampler's game and solver, are checked too."""
    game = cfg.run.game
    spec = resolve_factory(game.name, game.params)().spec
    if spec.num_players < 2:
        # A lone seat has no opponent: every snapshot stayed "not rated (no games)".
        raise ValueError(
            f"a league needs a game of 2 or more players; {game.name!r} has "
            f"{spec.num_players} (train it with coplay train)"
        )
    if cfg.sampler == "meta":
        # Its meta-game pairs two members (exact_payoffs, sampled_payoffs); with more
        # seats it failed with a traceback at the first snapshot.
        if spec.num_players != 2:
            raise ValueError(
                f"sampler=meta needs a two-player game; {game.name!r} has "
                f"{spec.num_players} players (use sampler=uniform or pfsp)"
            )
        check_meta_solver(cfg.meta_solver, spec)
    return check_weights(cfg.seat_weights, spec)


# --- results the league keeps ------------------------------------------------------


@dataclass(frozen=True)
class Tally:
    """The learner's results against each member, shape (K,) each.

    A game against a member counts once per seat the member holds: n - 1 head-to-head
    results in an n-player game with the learner in one seat, one (the game's own
    result) in a two-player game. ``wins``, ``draws`` and ``losses`` count those
    results; ``games`` counts games.
    """

    wins: np.ndarray
    draws: np.ndarray
    games: np.ndarray
    losses: np.ndarray

    @staticmethod
    def empty(k: int) -> Tally:
        return Tally(*(np.zeros(k, np.int64) for _ in range(4)))

    @staticmethod
    def restored(saved: Sequence[object]) -> Tally:
        """A tally from its saved ``[wins, draws, games, losses]``; a state saved before
        losses were kept holds ``[wins, draws, games]``, one result per game."""
        wins, draws, games, *rest = (np.asarray(x, np.int64) for x in saved)
        return Tally(wins, draws, games, rest[0] if rest else games - wins - draws)

    def saved(self) -> list[np.ndarray]:
        """``[wins, draws, games, losses]`` as the league's state holds them (the first
        three where states before losses were kept held them, so those still load)."""
        return [self.wins, self.draws, self.games, self.losses]

    def __add__(self, other: Tally) -> Tally:
        k = max(len(self.games), len(other.games))
        a, b = self.grown(k), other.grown(k)
        return Tally(*(x + y for x, y in zip(a.saved(), b.saved(), strict=True)))

    def grown(self, k: int) -> Tally:
        """The same tally for a league grown to ``k`` members (new ones unplayed)."""
        return Tally(*(np.pad(x, (0, k - len(x))) for x in self.saved()))

    @property
    def results(self) -> np.ndarray:
        """Head-to-head results against each member (wins, draws and losses)."""
        return self.wins + self.draws + self.losses

    def win_rates(self) -> np.ndarray:
        """Estimated P[learner beats member]: one half-won pseudo-result per member."""
        return (self.wins + 0.5 * self.draws + 0.5) / (self.results + 1.0)

    def score(self) -> float:
        """The learner's score (wins + draws / 2) per result over all members; NaN if none."""
        n = self.results.sum()
        return float((self.wins.sum() + 0.5 * self.draws.sum()) / n) if n else float("nan")


def tally_games(episodes: Sequence[Episode], learner_id: str, member_ids: Sequence[str]) -> Tally:
    """The learner's results in ``episodes`` against each of ``member_ids``: one per
    (learner seat, member seat) pair of a game, judged on the two seats' returns.

    Self-play episodes (only the learner seated) and games against anyone not in the
    league are skipped.
    """
    index = {m: i for i, m in enumerate(member_ids)}
    t = Tally.empty(len(member_ids))
    for e in episodes:
        others = {s for s in e.seats if s != learner_id}
        if learner_id not in e.seats or len(others) != 1 or next(iter(others)) not in index:
            continue
        i = index[next(iter(others))]
        returns = e.game_returns
        mine = [returns[s] for s, who in enumerate(e.seats) if who == learner_id]
        theirs = [returns[s] for s, who in enumerate(e.seats) if who != learner_id]
        t.games[i] += 1
        for a in mine:
            for b in theirs:
                t.wins[i] += a > b
                t.draws[i] += a == b
                t.losses[i] += a < b
    return t


def league_elo(t: Tally) -> np.ndarray:
    """Elo of the learner (index 0) and each member from the learner's league results;
    NaN for a member that has played none (a snapshot added at the end): no rating."""
    k = len(t.games) + 1
    wins, draws = np.zeros((k, k), np.int64), np.zeros((k, k), np.int64)
    wins[0, 1:] = t.wins
    wins[1:, 0] = t.losses
    draws[0, 1:] = draws[1:, 0] = t.draws
    return elo_ratings(wins, draws)


# --- opponent samplers -------------------------------------------------------------


@dataclass(frozen=True)
class PoolView:
    """What a sampler may read about the league."""

    win_rates: np.ndarray
    """Estimated P[learner beats member], shape (K,)."""
    payoff: np.ndarray | None = None
    """``payoff[i, j]``: member i's mean return against j over both seats (meta only)."""
    metrics: dict[str, float] = field(default_factory=dict)
    """What the sampler reports for this iteration's log (the meta sampler's fallback)."""


def uniform_sampler(view: PoolView, cfg: LeagueConfig) -> np.ndarray:
    """Every member alike."""
    return np.full(len(view.win_rates), 1.0 / len(view.win_rates))


PFSP_WEIGHTINGS: dict[str, Callable[[np.ndarray, float], np.ndarray]] = {
    "hard": lambda x, p: (1.0 - x) ** p,
    "variance": lambda x, p: x * (1.0 - x),
}


def pfsp_sampler(view: PoolView, cfg: LeagueConfig) -> np.ndarray:
    """Prioritised fictitious self-play: probabilities proportional to f(win rate);
    uniform when every weight is zero (the learner beats everyone for sure)."""
    f = PFSP_WEIGHTINGS[cfg.pfsp_weighting](np.asarray(view.win_rates, float), cfg.pfsp_power)
    return f / f.sum() if f.sum() > 0 else uniform_sampler(view, cfg)


def meta_sampler(view: PoolView, cfg: LeagueConfig) -> np.ndarray:
    """The meta-solver's mixture of the members' symmetric meta-game ``[payoff, payoff.T]``;
    a failing meta-solver is replaced (max-welfare CE, then uniform) with a warning line
    and ``league/meta_fallback`` in ``view.metrics``."""
    if view.payoff is None:
        raise ValueError("the meta sampler needs the members' payoff matrix")
    meta = solve(cfg.meta_solver, (view.payoff, view.payoff.T))  # warns when it falls back
    view.metrics["league/meta_fallback"] = meta.level  # 1: max-welfare CE, 2: uniform
    return meta.solution.marginals[0]


@dataclass(frozen=True)
class Sampler:
    """An opponent sampler: ``weights`` gives each member's probability, shape (K,)."""

    weights: Callable[[PoolView, LeagueConfig], np.ndarray]
    needs_payoff: bool = False
    """Reads the members' meta-game (``PoolView.payoff``), which every snapshot then
    refreshes; the others never pay for it."""


SAMPLERS: dict[str, Sampler] = {
    "uniform": Sampler(uniform_sampler),
    "pfsp": Sampler(pfsp_sampler),
    "meta": Sampler(meta_sampler, needs_payoff=True),
}


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


# --- the loop ----------------------------------------------------------------------


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


def settings_yaml(cfg: LeagueConfig) -> str:
    """The league's own settings (``league.yaml``); the trainer's are in ``config.yaml``."""
    return yaml.safe_dump(cfg.model_dump(mode="json", exclude={"run"}), sort_keys=False)


def _snapshot_folder(out: Path, it: int) -> Path:
    return out / "snapshots" / f"iter_{it:06d}"


def _reload(cfg: LeagueConfig, out: Path, it: int) -> Policy:
    """A snapshot member as ``freeze`` made it, from its folder (in the dtype it was
    saved in, the learner's, on the run's device)."""
    folder, seed = _snapshot_folder(out, it), cfg.run.train.seed + it
    frozen = load_policy(folder, seed=seed, device=cfg.run.model.device)
    frozen.model.requires_grad_(False)
    frozen.policy_id = f"snap:{it}"
    return frozen


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
