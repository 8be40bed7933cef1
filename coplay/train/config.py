"""The run configuration: one validated record per component, composed.

``RunConfig`` holds a section per component (game, model, rollout, algo, loss, optim,
magnet, critic, train, ray); every value is validated when it is built, and errors
name the key and what is allowed. A run's config comes from text, a preset, a YAML
file and ``key=value`` overrides, through ``coplay.train.settings.build_config``.
"""

from __future__ import annotations

import typing
from typing import Any

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SerializeAsAny,
    TypeAdapter,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic.errors import PydanticSchemaGenerationError
from pydantic_core import PydanticCustomError

from coplay.algos.advantages import ESTIMATORS, make_estimator
from coplay.algos.losses.compose import LossConfig
from coplay.backends import ENGINE_SETTINGS
from coplay.distributed.config import RayConfig, check_room, require_ray
from coplay.models.build import ModelConfig
from coplay.models.loading import PlayedGame
from coplay.rollout.invalid import InvalidActionConfig
from coplay.train.critic import CriticConfig
from coplay.train.parts.planning import ExploreConfig, RestartsConfig
from coplay.train.parts.sections import import_plugins, open_loss, open_rollout
from coplay.train.schedules import check_schedule, check_warmup
from coplay.train.train_config import TrainConfig


class ConfigError(ValueError):
    """A configuration that cannot be used; the message is one readable line."""


INNER_KEY = "inner_key"
"""The type of a validation error about a key inside a free mapping (``algo.params``):
its message starts with that key, which the error line names after the mapping's."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)


class GameConfig(_Strict):
    name: str = "kuhn_poker"
    """Registered game name (see `coplay games`), `openspiel:<name>`, or your own
    `package.module:factory` importable from the current directory (imported, i.e. its
    code run, only when a game is built: never to print or validate a config)."""
    params: dict[str, int | float | bool | str] = Field(default_factory=dict)
    """Game parameters passed to the game (e.g. players: 3)."""
    invalid: InvalidActionConfig = Field(default_factory=InvalidActionConfig)
    """Treatment of answers that name no legal action."""
    max_turns: int | None = Field(None, gt=0)
    """Truncate episodes after this many steps (default: the game's own bound)."""

    @model_validator(mode="after")
    def _game_exists(self) -> GameConfig:
        from coplay.envs.probe import check_game

        check_game(self.name, self.params)  # a one-line error naming the problem
        return self

    def played(self) -> PlayedGame:
        """The record a checkpoint keeps of its game (``coplay eval`` reads it)."""
        return PlayedGame(self.name, dict(self.params))


class RolloutConfig(_Strict):
    games_per_iter: int = Field(128, gt=0)
    """Episodes played per training iteration."""
    group_size: int = Field(1, gt=0)
    """Episodes sharing one seed (same chance outcomes); GRPO needs at least 2."""
    explore: ExploreConfig | None = None
    """Mix uniform choices into the learners' sampling (``coplay.train.parts.planning``);
    None: off. Needs model.mode=choice."""
    restarts: RestartsConfig | None = None
    """Restart some groups from positions of recently lost games, optionally with
    exploring starts and a policy-iteration target there; None: off."""
    workers: int = Field(0, ge=0)
    """Ray rollout workers playing each iteration's games (whole groups per worker);
    0: the batched engine of this process. Needs the ray extra (section ``ray``)."""
    max_staleness: int = Field(0, ge=0)
    """With workers: updates a sample may lag the learner. 0 plays every iteration with
    the latest weights (the same run as 0 workers); k >= 1 lets the workers play the
    next k iterations' games while the learner updates, dropping groups staler than k."""

    @field_validator("workers")
    @classmethod
    def _ray_installed(cls, workers: int) -> int:
        if workers:
            require_ray(f"rollout.workers={workers}")
        return workers

    @model_validator(mode="after")
    def _ahead_needs_workers(self) -> RolloutConfig:
        # This process's engine plays each plan when its iteration comes: the setting
        # would do nothing, and a run believed asynchronous would not be.
        if self.max_staleness and not self.workers:
            raise ValueError(
                f"rollout.max_staleness={self.max_staleness} lets Ray workers play ahead: "
                "it needs rollout.workers >= 1"
            )
        return self


class AlgoConfig(_Strict):
    estimator: str = "rae"
    """Advantage estimator (registry name)."""
    params: dict[str, Any] = Field(default_factory=dict)
    """Estimator hyper-parameters."""

    filter_zero_advantage: bool = False
    """Drop turns whose advantage is exactly 0 from the update (they only dilute it)."""
    filter_flat_groups: bool = False
    """Drop trajectories whose group (same seed, same seat) has all-equal returns:
    DAPO's dynamic sampling without refilling."""

    @field_validator("params")
    @classmethod
    def _typed_params(cls, params: dict[str, Any], info: ValidationInfo) -> dict[str, Any]:
        # YAML reads 1e-8 as text: an estimator took eps='1e-8' and failed at its first
        # comparison, in a line that named no key. Each value is read as its keyword's type.
        return typed_params(info.data.get("estimator"), params)

    @model_validator(mode="after")
    def _buildable(self) -> AlgoConfig:
        make_estimator(self.estimator, **self.params)  # names a bad estimator or parameter
        return self


def typed_params(estimator: str | None, params: dict[str, Any]) -> dict[str, Any]:
    """``params`` read as the keywords of ``estimator``'s factory are typed (``"1e-8"``
    as a float where the keyword is one); a value of another type is an ``INNER_KEY``
    error naming its parameter. Unknown estimators and parameters are left for
    ``make_estimator`` to name."""
    factory = ESTIMATORS.get(estimator) if estimator is not None else None
    try:
        hints = typing.get_type_hints(factory) if factory is not None else {}
    except (NameError, TypeError):  # a plugin's annotations that do not resolve
        return params
    typed = dict(params)
    for key, value in params.items():
        try:
            adapter = TypeAdapter(hints[key])
        except (KeyError, PydanticSchemaGenerationError):  # unknown, or a type of its own
            continue
        try:
            typed[key] = adapter.validate_python(value)
        except ValidationError as err:
            problem = f"{err.errors()[0]['msg']} (got {value!r})"
            raise PydanticCustomError(
                INNER_KEY, "{key}: {problem}", {"key": key, "problem": problem}
            ) from None
    return typed


class OptimConfig(_Strict):
    # ``allow_inf_nan=False``: ``gt`` refuses NaN but not inf, with which a run trained
    # on NaN weights and failed later, far from the setting.
    lr: float = Field(1e-3, gt=0.0, allow_inf_nan=False)
    """Adam learning rate."""
    lr_schedule: str = "constant"
    """How the learning rate moves over the run's train.iterations updates (an
    iteration with nothing to train on is none), by name (coplay.train.schedules):
    'constant'; 'linear' decays it to lr * final_lr_frac at the last update, which damps
    the cycling of self-play in the last iterations; 'cosine' decays it along half a
    cosine. After a warm-up (warmup_updates) the decay spans the updates left."""
    final_lr_frac: float = Field(0.1, gt=0.0, le=1.0)
    """Final learning rate as a fraction of lr (linear and cosine schedules)."""
    warmup_updates: int = Field(0, ge=0)
    """Updates over which the learning rate first rises linearly from 0 to lr, before
    lr_schedule starts: as in transformers' get_linear_schedule_with_warmup (TRL's
    warmup_steps), the first update runs at 0 and moves no weight, only Adam's moments.
    0: none; fewer than train.iterations."""
    weight_decay: float = Field(0.0, ge=0.0, allow_inf_nan=False)
    """AdamW weight decay."""
    max_grad_norm: float = Field(1.0, gt=0.0, allow_inf_nan=False)
    """Gradient clipping threshold."""
    epochs: int = Field(1, gt=0)
    """Passes over each batch of turns (PPO epochs)."""
    minibatch_size: int = Field(512, gt=0)
    """Turns per optimizer step."""
    micro_batch_size: int = Field(512, gt=0)
    """Most turns per forward/backward pass; gradients accumulate exactly across them."""
    fused: bool | None = None
    """Run AdamW's fused kernel (no temporaries, faster; float rounding differs from the
    plain step); None: fused for models over 20M trainable parameters. The plain step of
    smaller models runs as one foreach call per operation (bit for bit the same)."""
    micro_batch_tokens: int | None = Field(None, gt=0)
    """Most padded tokens per forward/backward pass (a scored position's vocabulary
    counted as tokens too); None: as many as fit about 256 MiB of activations by the
    model's width and depth (coplay.train.micro), so a bigger model needs no setting."""
    activation_checkpointing: bool = False
    """Keep only each block's input for the backward pass and recompute the rest there
    (Hugging Face activation checkpointing): activation memory per token falls to about
    one hidden vector per layer, for about one more forward pass of time. For long
    conversations of large models, where one sequence's activations outgrow the
    memory; the token budget stays as set (raise it to use the memory saved). The
    update's numbers are the same up to float rounding."""
    vocab_grads_in_place: bool | None = None
    """Add the gradients of the input embedding and the output projection into their
    ``.grad`` in place (coplay.train.vocab_grads) instead of building each as a new
    vocabulary-sized tensor first: a run's later updates of a 0.1B Qwen2 (151,936-token
    vocabulary) peak at about 2,130 MiB instead of 3,000 and take about half the time
    (docs/results.md); float rounding differs. None: on when either matrix weighs 32 MiB
    or more."""

    @field_validator("lr_schedule")
    @classmethod
    def _known_schedule(cls, name: str) -> str:
        return check_schedule(name)


class MagnetConfig(_Strict):
    ema: float = Field(gt=0.0, le=1.0)
    """The KL reference (loss.kl) becomes a *magnet* that moves toward the learner by
    this fraction of the gap after every update (magnetic mirror descent, Sokota et
    al. 2023), for last-iterate convergence in two-player zero-sum self-play. Without
    loss.kl nothing pulls toward it: it is then only an exponential average of the
    learner's weights (Polyak averaging)."""
    final: bool = False
    """Evaluate and save the magnet as the run's policy instead of the learner's last
    iterate (an average of recent iterates sits closer to equilibrium in two-player
    zero-sum self-play; measured in docs/results.md). The learner is always what
    trains."""


RENAMED = {
    "rollout.explore_correction": "rollout.explore.tis_cap (null: uncorrected)",
    "rollout.restart_share": "rollout.restarts.share",
    "rollout.restart_buffer": "rollout.restarts.buffer",
    "rollout.restart_sources": "rollout.restarts.sources",
    "rollout.restart_explore": "rollout.restarts.exploring_starts",
    "rollout.restart_target": "rollout.restarts.exploring_starts.target",
    "rollout.tis_cap": "rollout.explore.tis_cap",
    "reference.ema": "magnet.ema",
    "train.final_policy": "magnet.final",
    "train.seat_weights": "train.opponent.seat_weights",
}
"""Keys of earlier versions -> where their setting lives now, for a one-line error."""


class RunConfig(_Strict):
    """A run: one section per component; a part is on when its section is set.

    Five rules cross sections and stay validators, as no nesting can say them: modes
    of the model that a planning part needs, group sizes that an estimator needs, a
    backend and room that Ray workers need, and a warm-up shorter than the run.
    ``loss`` and ``rollout`` also take a section per registered part (``plugins``
    imports the modules that register them; ``coplay.train.parts.sections``)."""

    @model_validator(mode="before")
    @classmethod
    def _import_plugins(cls, data: Any) -> Any:
        # Before any section is validated: the plugins register the parts that
        # ``loss`` and ``rollout`` then accept sections for.
        plugins = data.get("plugins") if isinstance(data, dict) else None
        if isinstance(plugins, list) and all(isinstance(p, str) for p in plugins):
            import_plugins(plugins)
        return data

    @field_validator("loss", mode="before")
    @classmethod
    def _open_loss(cls, value: Any) -> Any:
        return open_loss(LossConfig).model_validate(value) if isinstance(value, dict) else value

    @field_validator("rollout", mode="before")
    @classmethod
    def _open_rollout(cls, value: Any) -> Any:
        if isinstance(value, dict):
            return open_rollout(RolloutConfig).model_validate(value)
        return value

    @model_validator(mode="before")
    @classmethod
    def _renamed(cls, data: Any) -> Any:
        if isinstance(data, dict):
            for old, new in RENAMED.items():
                section, _, key = old.partition(".")
                if isinstance(data.get(section), dict) and key in data[section]:
                    raise ValueError(f"{old} is now {new}")
            train, rollout = data.get("train"), data.get("rollout")
            # Not mappings: the sections' own validation names them in one line.
            train = train if isinstance(train, dict) else {}
            rollout = rollout if isinstance(rollout, dict) else {}
            if train.get("opponent") == "self":
                raise ValueError("train.opponent: self-play is now the default: leave it unset")
            explore = rollout.get("explore")
            if explore in (0, 0.0):
                raise ValueError("rollout.explore is now a section: leave it unset to turn it off")
            if isinstance(explore, int | float) and not isinstance(explore, bool):
                raise ValueError(f"rollout.explore is now a section: {{share: {explore}}}")
        return data

    @model_validator(mode="after")
    def _choice_parts_have_choices(self) -> RunConfig:
        # The model's decision mode is the model's own setting; exploration and
        # exploring starts pick among listed moves, which only choice mode lists.
        r = self.rollout
        starts = r.restarts is not None and r.restarts.exploring_starts is not None
        for on, key in (
            (r.explore is not None, "rollout.explore"),
            (starts, "rollout.restarts.exploring_starts"),
        ):
            if on and self.model.mode != "choice":
                raise ValueError(f"{key} picks listed moves: it needs model.mode=choice")
        return self

    @model_validator(mode="after")
    def _workers_can_ship_the_backend(self) -> RunConfig:
        # A backend that starts an engine (vLLM) runs it in the learner's process; it
        # is not shipped: each Ray worker would need an engine (and a GPU) of its own.
        if self.rollout.workers and self.model.backend in ENGINE_SETTINGS:
            raise ValueError(
                f"model.backend={self.model.backend} starts its engine in the learner's "
                f"process, which rollout.workers={self.rollout.workers} cannot share: "
                "set one or the other"
            )
        return self

    @model_validator(mode="after")
    def _warmup_within_run(self) -> RunConfig:
        # optim's own rule, but the run's length is train's.
        check_warmup(self.optim.warmup_updates, self.train.iterations)
        return self

    @model_validator(mode="after")
    def _workers_fit_the_local_ray(self) -> RunConfig:
        check_room(self.ray, self.rollout.workers)
        return self

    @model_validator(mode="after")
    def _groups_exist(self) -> RunConfig:
        # A group-baseline estimator on groups of one game trains on all-zero advantages.
        if (
            self.rollout.group_size < 2
            and make_estimator(self.algo.estimator, **self.algo.params).needs_groups
        ):
            raise ValueError(
                f"algo.estimator={self.algo.estimator} takes its baseline from the other games "
                "of a group: set rollout.group_size >= 2 (every advantage is 0 with groups of one)"
            )
        if self.rollout.group_size < 2 and self.algo.filter_flat_groups:
            raise ValueError(
                "algo.filter_flat_groups drops groups whose returns are all equal, and a group "
                "of one always is: set rollout.group_size >= 2, or the filter off"
            )
        return self

    plugins: list[str] = Field(default_factory=list)
    """Python modules imported before the rest is validated, e.g. [mypkg.parts]: they
    register games, loss terms and planning parts whose sections this config may set
    (``loss.<name>``, ``rollout.<name>``). Importing runs their code."""
    game: GameConfig = Field(default_factory=GameConfig)
    model: ModelConfig = Field(default_factory=ModelConfig)
    # SerializeAsAny: a section of a registered part is a field of the open subclass,
    # which config.yaml must keep.
    rollout: SerializeAsAny[RolloutConfig] = Field(default_factory=RolloutConfig)
    algo: AlgoConfig = Field(default_factory=AlgoConfig)
    loss: SerializeAsAny[LossConfig] = Field(default_factory=LossConfig)
    optim: OptimConfig = Field(default_factory=OptimConfig)
    magnet: MagnetConfig | None = None
    """A moving KL reference / average of the learner's weights; None: off."""
    critic: CriticConfig = Field(default_factory=CriticConfig)
    train: TrainConfig = Field(default_factory=TrainConfig)
    ray: RayConfig = Field(default_factory=RayConfig)
    """Where rollout workers run (``rollout.workers``): a private local Ray by default."""
