"""A league run's settings: the config record, its validation and its ``league.yaml``."""

from __future__ import annotations

from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, model_validator

from coplay.envs.probe import names_user_factory, resolve_factory
from coplay.eval.metasolvers import META_SOLVERS
from coplay.population.league_samplers import POWERED_WEIGHTINGS, SAMPLERS
from coplay.population.metagame import check_meta_solver
from coplay.train.config import RunConfig
from coplay.train.train_config import check_seat_weights
from coplay.train.trainer import check_weights


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
    pfsp_power: float = Field(2.0, gt=0.0, allow_inf_nan=False)
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
        _check_read(self)
        check_seat_weights(self.seat_weights)
        checks_game = self.seat_weights is not None or self.sampler == "meta"
        if checks_game and not names_user_factory(self.run.game.name):
            league_seats(self)  # a user's game is imported only when run_league builds it
        return self


def _check_read(cfg: LeagueConfig) -> None:
    """Refuse a setting changed from its default that the league never reads: another
    sampler's, the power of a PFSP weighting without one, ``min_games`` without a
    ``win_threshold``. It would have no effect, and say nothing."""
    unread = {
        field: (f"sampler={cfg.sampler}", f"sampler={name}")
        for name, sampler in SAMPLERS.items()
        for field in sampler.settings - SAMPLERS[cfg.sampler].settings
    }
    if "pfsp_power" not in unread and cfg.pfsp_weighting not in POWERED_WEIGHTINGS:
        powered = " or ".join(sorted(POWERED_WEIGHTINGS))
        unread["pfsp_power"] = (f"pfsp_weighting={cfg.pfsp_weighting}", f"pfsp_weighting={powered}")
    if cfg.win_threshold is None:
        unread["min_games"] = ("win_threshold=None", "a win_threshold")
    for field, (setting, fix) in unread.items():
        value = getattr(cfg, field)
        if value != LeagueConfig.model_fields[field].default:
            raise ValueError(
                f"{setting} reads no {field}: {field}={value} would have no effect; "
                f"drop it or use {fix}"
            )


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


def settings_yaml(cfg: LeagueConfig) -> str:
    """The league's own settings (``league.yaml``); the trainer's are in ``config.yaml``."""
    return yaml.safe_dump(cfg.model_dump(mode="json", exclude={"run"}), sort_keys=False)
