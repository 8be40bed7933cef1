"""A PSRO run's settings: the config record, its validation and its ``psro.yaml``."""

from __future__ import annotations

import yaml
from pydantic import BaseModel, ConfigDict, Field, model_validator

from coplay.envs.probe import names_user_factory, resolve_factory
from coplay.eval.metasolvers import META_SOLVERS
from coplay.population.metagame import RECOMMENDATIONS, check_meta_solver, exact_game
from coplay.population.oracles import ORACLES
from coplay.population.psro_members import INITIAL_MEMBERS
from coplay.train.config import RunConfig
from coplay.train.train_config import check_seat_weights
from coplay.train.trainer import check_weights

UNTRAINED_ORACLES = frozenset({"exact"})
"""Oracles that train no language model: the LM response settings (``restarts``,
``seat_weights``, ``warm_start``) would be ignored, so the config refuses them."""

CONDITIONAL_SOLVERS = frozenset({"ce", "mwce"})
"""Solvers whose best responses train against the conditional distribution (JPSRO(CE));
every other solver's responses face the opponent's marginal (PSRO, JPSRO(CCE))."""


class PsroConfig(BaseModel):
    """A PSRO run: the trainer config of every best response plus the outer loop."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)

    run: RunConfig = Field(default_factory=RunConfig)
    """Trainer config of each best response; ``run.train.iterations`` per response."""
    iterations: int = Field(8, gt=0)
    """PSRO iterations, each adding one best response to the population (with
    ``recommendations=each``, one per recommended member, copies of members left
    out)."""
    meta_solver: str = "nash"
    """Meta-solver (coplay.eval.metasolvers): nash, uniform, prd, alpharank, ce, cce, ..."""
    initial: str = "lm"
    """First member (``INITIAL_MEMBERS``): lm, the untrained language model, or random,
    a uniform random bot."""
    warm_start: bool = True
    """Start each best response from the previous one's weights (saves compute)."""
    crossplay_episodes: int = Field(200, gt=0)
    """Games per pairing for the sampled meta-game of games without exact evaluation
    (and for judging ``restarts`` there)."""
    oracle: str = "lm"
    """Best-response oracle (``ORACLES``): lm, the language-model trainer, or exact,
    OpenSpiel's exact best response to the mixture (games with exact evaluation; a
    control for the LM oracle)."""
    seat_weights: list[float] | None = None
    """Share of each response's game groups per seat (see train.opponent.seat_weights),
    one non-negative weight per seat, not all 0; each group's opponent is drawn from
    the meta-strategy of the seat it faces. None rotates seats evenly. LM oracle only."""
    restarts: int = Field(1, gt=0)
    """LM responses trained for each member added, each with its own seed; the one
    with the highest value against the meta-strategy (exact where the game allows,
    else sampled cross-play) joins the population. LM oracle only."""
    recommendations: str = "likeliest"
    """What an iteration answers with a conditional meta-solver (ce, mwce;
    ``RECOMMENDATIONS``): likeliest, one best response, in each seat against the
    opponent given that seat's most likely recommended member; each, JPSRO(CE): one per
    member recommended in either seat, against the opponent given it, trained only in
    the seats that recommend it (a member recommended only in a seat that
    ``seat_weights`` gives no games gets none; an exact best response that a member
    plays already joins no more)."""

    @model_validator(mode="after")
    def _check(self) -> PsroConfig:
        for key, registry in (
            ("meta_solver", META_SOLVERS),
            ("oracle", ORACLES),
            ("initial", INITIAL_MEMBERS),
            ("recommendations", RECOMMENDATIONS),
        ):
            if getattr(self, key) not in registry:
                raise ValueError(
                    f"unknown {key} {getattr(self, key)!r}; available: {', '.join(registry)}"
                )
        check_seat_weights(self.seat_weights)
        _check_oracle_settings(self)
        _check_recommendations(self)
        if not names_user_factory(self.run.game.name):
            check_game_fits(self)  # a user's game is imported only when run_psro builds it
        return self


def _check_oracle_settings(cfg: PsroConfig) -> None:
    """Refuse LM response settings that an oracle training no LM would silently ignore."""
    if cfg.oracle not in UNTRAINED_ORACLES:
        return
    given = {
        "restarts": cfg.restarts != 1,
        "seat_weights": cfg.seat_weights is not None,
        "warm_start": not cfg.warm_start,
    }
    ignored = [key for key, changed in given.items() if changed]
    if ignored:
        raise ValueError(
            f"oracle={cfg.oracle} trains no language model: {ignored[0]}="
            f"{getattr(cfg, ignored[0])} would have no effect; drop it or use oracle=lm"
        )


def _check_recommendations(cfg: PsroConfig) -> None:
    """Refuse a ``recommendations`` setting that a solver recommending nothing would
    ignore: its responses face the opponent's marginal, one per iteration."""
    default = PsroConfig.model_fields["recommendations"].default
    if cfg.meta_solver in CONDITIONAL_SOLVERS or cfg.recommendations == default:
        return
    raise ValueError(
        f"recommendations={cfg.recommendations} answers the members a conditional "
        f"meta-solver recommends; meta_solver={cfg.meta_solver} recommends none (its "
        f"responses face the opponent's marginal): use meta_solver "
        f"{' or '.join(sorted(CONDITIONAL_SOLVERS))}, or drop it"
    )


def check_game_fits(cfg: PsroConfig) -> None:
    """Two players, one seat weight per seat, and a game with exact evaluation for an
    oracle that needs one."""
    game = cfg.run.game
    spec = resolve_factory(game.name, game.params)().spec
    if spec.num_players != 2:
        raise ValueError(f"PSRO here supports 2-player games; {game.name!r} has {spec.num_players}")
    check_weights(cfg.seat_weights, spec)
    check_meta_solver(cfg.meta_solver, spec)
    if ORACLES[cfg.oracle].needs_exact and exact_game(cfg.run) is None:
        raise ValueError(
            f"oracle={cfg.oracle} needs an exact meta-game: a turn-based OpenSpiel game "
            f"with exact evaluation and choice-mode members; {game.name!r} with "
            f"model.mode={cfg.run.model.mode} has none"
        )


def settings_yaml(cfg: PsroConfig) -> str:
    """The outer loop's settings (``psro.yaml``); the trainer's are in ``config.yaml``."""
    return yaml.safe_dump(cfg.model_dump(mode="json", exclude={"run"}), sort_keys=False)
