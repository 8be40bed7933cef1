"""The run configuration: one validated record per component, composed.

A run is described by a preset (``coplay/presets/*.yaml``), optionally a YAML file,
and ``key=value`` overrides with dotted keys (``train.iterations=50``). Every value
is validated when the config is built; errors name the key and what is allowed, and
a setting given in the file or an override that the run would not use is named in a
warning.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Hashable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SerializeAsAny,
    ValidationError,
    field_validator,
    model_validator,
)

from coplay.algos.advantages import make_estimator
from coplay.algos.losses.compose import LossConfig, moved_key
from coplay.backends import ENGINE_SETTINGS
from coplay.distributed.config import RayConfig, check_room, require_ray
from coplay.models.loading import ModelConfig, PlayedGame
from coplay.report.loggers import check_logger
from coplay.rollout.invalid import InvalidActionConfig
from coplay.train.critic import CriticConfig
from coplay.train.parts.planning import ExploreConfig, RestartsConfig
from coplay.train.parts.sections import import_plugins, open_loss, open_rollout
from coplay.types import MAX_SEED


class ConfigError(ValueError):
    """A configuration that cannot be used; the message is one readable line."""


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

    @model_validator(mode="after")
    def _buildable(self) -> AlgoConfig:
        make_estimator(self.estimator, **self.params)  # names a bad estimator or parameter
        return self


class OptimConfig(_Strict):
    # ``allow_inf_nan=False``: ``gt`` refuses NaN but not inf, with which a run trained
    # on NaN weights and failed later, far from the setting.
    lr: float = Field(1e-3, gt=0.0, allow_inf_nan=False)
    """Adam learning rate."""
    lr_schedule: Literal["constant", "linear"] = "constant"
    """'linear' decays the learning rate to lr * final_lr_frac over the run's
    train.iterations updates (an iteration with nothing to train on is none), which
    damps the cycling of self-play in the last iterations."""
    final_lr_frac: float = Field(0.1, gt=0.0, le=1.0)
    """Final learning rate as a fraction of lr (linear schedule)."""
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


class OpponentConfig(_Strict):
    name: str
    """A scripted bot (random, nash, perfect, optimal) or a checkpoint path."""
    seat_weights: list[float] | None = None
    """Share of the learner's game groups per seat, e.g. [1, 3]: a quarter of the
    groups in seat 0, three quarters in seat 1 (a seat it has already mastered teaches
    nothing: every return there is the same). None rotates seats evenly. One
    non-negative weight per seat, not all 0."""

    @model_validator(mode="before")
    @classmethod
    def _from_name(cls, data: Any) -> Any:
        # ``train.opponent=random`` names the opponent alone: the common case.
        return {"name": data} if isinstance(data, str) else data

    @model_validator(mode="after")
    def _seat_weights_valid(self) -> OpponentConfig:
        check_seat_weights(self.seat_weights)
        return self


def check_seat_weights(weights: list[float] | None) -> None:
    """Seat weights are shares: non-negative and not all 0 (their count is checked
    against the game's seats when it is built, ``trainer.check_weights``). Shared by
    ``train.opponent`` and the league's and PSRO's configs."""
    if weights is None:
        return
    # NaN passes every comparison as False: it would seat every group in seat 0.
    if not all(map(math.isfinite, weights)):
        raise ValueError(f"seat_weights must be finite numbers, got {weights}")
    if any(x < 0 for x in weights) or sum(weights) <= 0:
        raise ValueError(f"seat_weights must be >= 0 and not all 0, got {weights}")


class TrainConfig(_Strict):
    iterations: int = Field(100, gt=0)
    """Training iterations (collect, learn, maybe evaluate)."""
    seed: int = Field(0, ge=0, le=MAX_SEED)
    """Seeds the model initialisation, game deals and sampling (episode seeds are
    derived from it by multiplying, within the generators' integers)."""
    opponent: OpponentConfig | None = None
    """None (unset) for shared-weight self-play; else the fixed opponent the learner
    trains against: a name (``train.opponent=perfect``) or a section with seat weights
    (``{name: perfect, seat_weights: [1, 3]}``)."""
    eval_every: int = Field(10, gt=0)
    """Iterations between evaluations (exploitability where exact, matches otherwise)."""
    eval_episodes: int = Field(200, gt=0)
    """Games per evaluation opponent."""
    eval_opponents: list[str] = Field(default_factory=lambda: ["random"])
    """Opponents for evaluation matches."""
    save_every: int = Field(50, ge=0)
    """Iterations between saved states (for --resume) and intermediate checkpoints;
    0 saves only at the end."""
    exact: bool | Literal["auto"] = "auto"
    """Exact exploitability at each evaluation: 'auto' for imperfect-information
    OpenSpiel games whose tree has at most 100,000 histories (Kuhn, Leduc, small
    bargaining; not Liar's dice), true (or on) for any such game however large,
    false (or off) never."""
    exact_matches: bool | Literal["auto"] = "auto"
    """Exact win / loss probabilities and mean return against evaluation opponents, by
    walking the game tree with both sides' action probabilities
    (coplay.eval.exact_match): 'auto' against the optimal bots (nash, perfect) where
    exact exploitability is on and in perfect-information OpenSpiel games of at most
    1,000,000 histories (tic-tac-toe); true (or on) against every opponent that
    reports probabilities (scripted bots, checkpoints) in any OpenSpiel game; false
    (or off) never. Logged next to the sampled match as eval/<opponent>/exact_loss_seat<i>
    (and greedy_loss_seat<i>, the argmax policy, in perfect-information games)."""
    transcripts: int = Field(4, ge=0)
    """Sample episodes written as JSONL transcripts at each evaluation."""
    eval_samples: int = Field(32, gt=0)
    """Text mode: answers sampled per information state to estimate the policy's action
    distribution for exploitability and exact matches (coplay.eval.sampled), logged
    under *_sampled keys with a bootstrap interval; choice mode is evaluated exactly."""
    eval_bootstrap: int = Field(100, ge=0)
    """Text mode: bootstrap replicates for the interval of each sampled estimate (each
    replicate repeats the exact computation on resampled answers)."""
    loggers: list[str] = Field(default_factory=lambda: ["jsonl"])
    """Metric sinks (coplay.report.loggers): jsonl (metrics.jsonl, always on), tensorboard
    (event files in <run>/tensorboard), wandb (an offline run in <run>/wandb); each
    receives the same namespaced keys. tensorboard and wandb are optional extras."""
    report: bool = False
    """Write the HTML report (coplay report) to <run>/report.html at each evaluation and
    at the end; `coplay train --report` sets it."""

    @field_validator("loggers")
    @classmethod
    def _loggers_installed(cls, names: list[str]) -> list[str]:
        return [check_logger(n) for n in names]


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

    Two rules cross sections and stay validators, as no nesting can say them: modes
    of the model that a planning part needs, and group sizes that an estimator needs.
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


DEFAULT_PRESET = "kuhn-selfplay"
"""The preset of a run that names neither a preset nor a config file."""


def base_preset(preset: str | None, file: str | Path | None) -> str | None:
    """The preset a run starts from: the one named (an unknown name, the empty one too,
    is a ConfigError listing the presets); else, with a config file, none (the file
    goes over the built-in defaults); else ``DEFAULT_PRESET``."""
    if preset is not None:
        _check_preset(preset)
        return preset
    return None if file else DEFAULT_PRESET


def preset_names() -> list[str]:
    """Names of the bundled presets."""
    files = resources.files("coplay.presets").iterdir()
    return sorted(f.name.removesuffix(".yaml") for f in files if f.name.endswith(".yaml"))


@dataclass(frozen=True)
class PresetInfo:
    """A bundled preset as ``coplay presets`` lists it."""

    name: str
    game: str
    purpose: str
    """The first line of the preset's header comment."""


def preset_info(name: str) -> PresetInfo:
    """Name, game and one-line purpose of a bundled preset."""
    text = _preset_text(name)
    first = text.splitlines()[0] if text else ""
    purpose = first.removeprefix("#").strip() if first.startswith("#") else ""
    game = ((yaml.safe_load(text) or {}).get("game") or {}).get("name", GameConfig().name)
    return PresetInfo(name, game, purpose)


def _check_preset(name: str) -> None:
    if name not in preset_names():
        raise ConfigError(f"unknown preset {name!r}; presets: {', '.join(preset_names())}")


def _preset_text(name: str) -> str:
    _check_preset(name)
    return resources.files("coplay.presets").joinpath(f"{name}.yaml").read_text()


def load_preset(name: str) -> dict[str, Any]:
    """The raw mapping of a bundled preset."""
    return yaml.safe_load(_preset_text(name)) or {}


def load_yaml(
    path: str | Path, what: str = "config file", *, empty_ok: bool = True
) -> dict[str, Any]:
    """A YAML mapping from a file, with a clear error if it is not one (``what`` names
    the file's kind in it). A file a run saved is never empty (``empty_ok=False``): read
    as no settings, an emptied one resumed the run with the defaults."""
    path = Path(path)
    if path.is_dir():
        raise ConfigError(f"{what} {path} is a directory, not a YAML file")
    if not path.is_file():
        raise ConfigError(f"{what} {path} does not exist")
    try:
        data = yaml.load(path.read_text(encoding="utf-8"), Loader=_UniqueKeys)  # noqa: S506
    except yaml.YAMLError as err:
        raise ConfigError(f"{what} {path} is not valid YAML: {err}".splitlines()[0]) from err
    except UnicodeDecodeError as err:
        raise ConfigError(f"{what} {path} is not UTF-8 text ({err.reason})") from None
    if data is None and not empty_ok:
        raise ConfigError(f"{what} {path} is empty: the settings the run saved there are lost")
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"{what} {path} must hold a mapping, not {type(data).__name__}")
    return data


MERGE_TAG = "tag:yaml.org,2002:merge"
"""The tag of YAML's merge key (``<<: *anchor``)."""


class _UniqueKeys(yaml.SafeLoader):
    """PyYAML's safe loader, refusing a key given twice in one mapping: the plain loader
    keeps the last, so a second ``train:`` block would drop the first without a word.
    Merge keys (``<<: *defaults``) work as in the plain loader: a merged key is a
    default that a key of the mapping's own may override."""

    def __init__(self, stream) -> None:
        super().__init__(stream)
        self._checked: set[int] = set()

    def flatten_mapping(self, node) -> None:
        # Every mapping, a merge's source too, is flattened before it is built, and
        # flattening mixes the merged keys in with its own: check its own keys first,
        # once (a source merged twice is flattened again).
        if id(node) not in self._checked:
            self._checked.add(id(node))
            keys = set()
            for key_node, _ in node.value:
                if key_node.tag == MERGE_TAG:
                    continue
                key = self.construct_object(key_node)
                if not isinstance(key, Hashable):
                    continue  # the loader itself names a key that cannot be one
                if key in keys:
                    raise yaml.constructor.ConstructorError(
                        None, None, f"found the key {key!r} twice", key_node.start_mark
                    )
                keys.add(key)
        super().flatten_mapping(node)


def merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    """Deep merge of mappings; ``over`` wins."""
    out = dict(base)
    for k, v in over.items():
        out[k] = merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def split_override(item: str) -> tuple[list[str], Any]:
    """``a.b=3`` -> ``(["a", "b"], 3)``; values are parsed as YAML scalars or lists."""
    key, sep, raw = item.partition("=")
    if not sep or not key.strip():
        raise ConfigError(f"override {item!r} must look like key=value (e.g. train.iterations=50)")
    try:
        value = yaml.safe_load(raw) if raw.strip() else None
    except yaml.YAMLError:
        value = raw
    return key.strip().split("."), value


def parse_override(item: str) -> dict[str, Any]:
    """``a.b=3`` -> ``{"a": {"b": 3}}``."""
    parts, value = split_override(item)
    out: Any = value
    for part in reversed(parts):
        out = {part: out}
    return out


def build_config(
    *,
    preset: str | None = None,
    file: str | Path | None = None,
    overrides: list[str] | tuple[str, ...] = (),
    recorded: bool = False,
) -> RunConfig:
    """Preset, then file, then overrides, validated into a ``RunConfig``; what the file
    and the overrides set that the run ignores is named in a warning (``warn_ignored``).
    ``recorded``: the file is a run's own ``config.yaml`` (``--resume``), which records
    every setting the run had rather than what a user gave."""
    data: dict[str, Any] = load_preset(preset) if preset else {}
    given: list[dict[str, Any]] = []
    if file:
        own = load_yaml(file)
        data = merge(data, own)
        given += [] if recorded else [own]
    for item in overrides:
        data = apply_override(data, item)
        given.append(parse_override(item))
    cfg = validate(data)
    warn_ignored(cfg, given)
    return cfg


class IgnoredSetting(UserWarning):
    """A setting that was given but that the run does not use."""


def warn_ignored(cfg: RunConfig, given: Sequence[Mapping[str, Any]]) -> None:
    """Warn, in one line, of the ``model.tiny`` keys that ``given`` (a config file, each
    override) set when ``model.path`` gives the model, whose shape is then the
    checkpoint's. A preset's are not given: the text presets set the tiny model that
    their SFT step builds, and are then trained from its checkpoint with ``model.path``."""
    if cfg.model.path is None:
        return
    keys = dict.fromkeys(f"model.tiny.{k}" for layer in given for k in _tiny_keys(layer))
    if keys:
        verb = "is" if len(keys) == 1 else "are"
        warnings.warn(
            f"{', '.join(keys)} {verb} ignored: model.path ({cfg.model.path}) gives the "
            "model and its shape",
            IgnoredSetting,
            stacklevel=3,
        )


def _tiny_keys(layer: Mapping[str, Any]) -> list[str]:
    model = layer.get("model")
    tiny = model.get("tiny") if isinstance(model, dict) else None
    return list(tiny) if isinstance(tiny, dict) else []


def apply_override(data: dict[str, Any], item: str) -> dict[str, Any]:
    """A copy of ``data`` with ``key=value`` set. The value *replaces* what is at the
    key (mappings are not merged), so ``algo.params={}`` clears a preset's parameters."""
    parts, value = split_override(item)
    out = dict(data)
    node = out
    for depth, part in enumerate(parts[:-1], start=1):
        child = node.get(part)
        if child is not None and not isinstance(child, dict):
            # Replacing it with a mapping would drop the value without a word (a file's
            # game: leduc_poker and game.max_turns=50 would train the default game).
            key = ".".join(parts[:depth])
            raise ConfigError(f"{item}: {key} is {child!r}, not a section with keys")
        node[part] = dict(child) if isinstance(child, dict) else {}
        node = node[part]
    node[parts[-1]] = value
    return out


def validate(data: dict[str, Any]) -> RunConfig:
    """Validate a raw mapping, turning pydantic's report into one line per problem."""
    try:
        cfg = RunConfig.model_validate(data)
    except ValidationError as err:
        raise ConfigError(format_validation_error(err)) from None
    refuse_bool_numbers(data, cfg)
    return cfg


def refuse_bool_numbers(data: Any, cfg: BaseModel, what: str = "config") -> None:
    """Refuse a true or false given where the validated config holds a number.

    pydantic reads a bool as the number 0 or 1, so ``train.iterations=true`` would run
    one iteration: a slip of the keyboard (or of YAML, which reads ``on`` and ``no`` as
    bools) taken for a setting."""
    keys = list(_bool_numbers(data, cfg, ""))
    if keys:
        raise ConfigError(
            f"invalid {what}: "
            + "; ".join(f"{k}: expected a number, got {str(v).lower()}" for k, v in keys)
        )


def _bool_numbers(raw: Any, value: Any, loc: str) -> Iterator[tuple[str, bool]]:
    """(key, bool) wherever ``raw`` has a bool that validated into a number."""
    if isinstance(raw, bool):
        if isinstance(value, int | float) and not isinstance(value, bool):
            yield loc, raw
    elif isinstance(raw, dict):
        for key, item in raw.items():
            if isinstance(value, BaseModel):
                child = getattr(value, str(key), None)
            else:
                child = value.get(key) if isinstance(value, dict) else None
            yield from _bool_numbers(item, child, f"{loc}.{key}" if loc else str(key))
    elif isinstance(raw, list) and isinstance(value, list | tuple) and len(raw) == len(value):
        for i, (item, child) in enumerate(zip(raw, value, strict=True)):
            yield from _bool_numbers(item, child, f"{loc}[{i}]")


def format_validation_error(err: ValidationError) -> str:
    """``invalid config: train.iterations: must be > 0 (got -1); ...``"""
    problems = []
    for e in err.errors():
        loc = ".".join(str(p) for p in e["loc"])
        if e["type"] == "moved_key":  # an old flat loss key: name where it is now
            problems.append("; ".join(moved_key(loc, k) for k in e["ctx"]["keys"]))
            continue
        msg = e["msg"].removeprefix("Value error, ")
        if not e["loc"]:  # a rule across sections: its message names the keys; the input
            problems.append(msg)  # would be the whole config
            continue
        if e["type"] == "extra_forbidden":
            msg = "unknown key"
        got = "" if e["type"] in ("extra_forbidden", "missing") else f" (got {e.get('input')!r})"
        problems.append(f"{loc}: {msg}{got}")
    return "invalid config: " + "; ".join(problems)


def to_yaml(cfg: RunConfig) -> str:
    """The full resolved config as YAML (written to every run directory)."""
    return yaml.safe_dump(cfg.model_dump(mode="json"), sort_keys=False)


def describe(model: BaseModel, prefix: str = "") -> list[tuple[str, str, str]]:
    """(dotted key, value, meaning) for every leaf field, from the field docstrings."""
    rows = []
    for name, field in type(model).model_fields.items():
        value = getattr(model, name)
        key = f"{prefix}{name}"
        if isinstance(value, BaseModel):
            rows.extend(describe(value, key + "."))
        else:
            doc = " ".join((field.description or "").split())
            rows.append(
                (
                    key,
                    _scalar_text(value),
                    doc,
                )
            )
    return rows


def _scalar_text(value: Any) -> str:
    """A value as one line of YAML flow style (``0``, ``[random]``, ``null``)."""
    return yaml.safe_dump(value, default_flow_style=True).strip().removesuffix("...").strip()
