"""The run configuration: one validated record per component, composed.

A run is described by a preset (``coplay/presets/*.yaml``), optionally a YAML file,
and ``key=value`` overrides with dotted keys (``train.iterations=50``). Every value
is validated when the config is built; errors name the key and what is allowed.
"""

from __future__ import annotations

from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from coplay.algos.advantages import make_estimator
from coplay.algos.losses.compose import LossConfig, moved_key
from coplay.models.loading import ModelConfig, PlayedGame
from coplay.rollout.invalid import InvalidActionConfig
from coplay.train.critic import CriticConfig
from coplay.train.parts.policy_iteration import TargetConfig


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
    explore: float = Field(0.0, ge=0.0, lt=1.0)
    """Share of uniform choices mixed into the learner's sampling during training
    rollouts (choice mode; evaluation stays on-policy), so a policy that has collapsed
    onto a losing move still tries the others. The update reweights each turn by the
    truncated ratio policy / mixture, so it needs rollout.tis_cap (see explore_correction)."""
    tis_cap: float | None = Field(None, gt=0.0)
    """Cap of the truncated importance weights policy / mixture of explored turns
    (rollout.explore with explore_correction=tis), e.g. 1.0; None is off."""
    explore_correction: Literal["tis", "none"] = "tis"
    """How explored moves are trained: 'tis' reweights by policy / mixture (unbiased, but
    a move the policy gives probability p moves its logit by about p: a near-certain
    habit is never unlearned); 'none' trains them as if the policy had chosen them
    (Monte Carlo with exploring moves: biased toward moves better than the mixture's
    average, which suits games with a pure optimum, not mixed equilibria)."""
    restart_share: float = Field(0.0, ge=0.0, lt=1.0)
    """Share of each iteration's groups that restart, as a whole group, from a position
    of a recently lost game (the history just before one of the learner's turns there;
    ``coplay.rollout.restarts``), so rare positions where the learner goes wrong get
    groups of their own. Against a fixed opponent or in self-play."""
    restart_buffer: int = Field(512, gt=0)
    """How many of the latest lost-game positions restarts are drawn from."""
    restart_sources: Literal["fresh", "all"] = "fresh"
    """Which lost games give restart positions: 'fresh' only those played from the
    initial state, 'all' restarted ones too (whose positions after an exploring move
    are often lost already and crowd the buffer; see ``lost_starts``)."""
    restart_explore: bool = False
    """Assign the learner's first move in restarted games instead of sampling it: the
    copies of a group take the legal moves in turn, each trained as the policy's own
    (Monte Carlo exploring starts), so a move the policy has all but ruled out at a
    position it keeps losing from is tried and compared with its habit there. Needs
    restart_share > 0 and model.mode=choice."""
    restart_target: TargetConfig | None = None
    """The policy-iteration target at restart positions, e.g. {coef: 1.0, memory: 256}:
    the cross-entropy from the best-scoring first moves of each restarted group
    (``opening_targets``) to the policy there, and how many positions' latest targets
    are trained toward again at every update (``coplay.train.parts.policy_iteration``).
    Needs restart_explore; None is off."""


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
    lr: float = Field(1e-3, gt=0.0)
    """Adam learning rate."""
    lr_schedule: Literal["constant", "linear"] = "constant"
    """'linear' decays the learning rate to lr * final_lr_frac over the run, which damps
    the cycling of self-play in the last iterations."""
    final_lr_frac: float = Field(0.1, gt=0.0, le=1.0)
    """Final learning rate as a fraction of lr (linear schedule)."""
    weight_decay: float = Field(0.0, ge=0.0)
    """AdamW weight decay."""
    max_grad_norm: float = Field(1.0, gt=0.0)
    """Gradient clipping threshold."""
    epochs: int = Field(1, gt=0)
    """Passes over each batch of turns (PPO epochs)."""
    minibatch_size: int = Field(512, gt=0)
    """Turns per optimizer step."""
    micro_batch_size: int = Field(512, gt=0)
    """Turns per forward/backward pass; gradients accumulate exactly across them."""


class ReferenceConfig(_Strict):
    ema: float = Field(0.0, ge=0.0, le=1.0)
    """0 keeps the initial policy as the KL reference; > 0 turns it into a *magnet* that
    moves toward the learner by this fraction of the gap after every iteration
    (magnetic mirror descent, Sokota et al. 2023), for last-iterate convergence in
    two-player zero-sum self-play. Without loss.kl nothing pulls toward it: it is
    then only an exponential average of the learner's weights (Polyak averaging),
    which train.final_policy=magnet evaluates and saves."""


class TrainConfig(_Strict):
    iterations: int = Field(100, gt=0)
    """Training iterations (collect, learn, maybe evaluate)."""
    seed: int = 0
    """Seeds the model initialisation, game deals and sampling."""
    opponent: str = "self"
    """'self' for shared-weight self-play, a scripted bot (random, nash, perfect) or a
    checkpoint path for training against a fixed opponent."""
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
    final_policy: Literal["learner", "magnet"] = "learner"
    """What the run evaluates and saves as its policy: the learner's last iterate, or
    the magnet (an EMA of the learner's weights, i.e. an average of recent iterates,
    which sits closer to equilibrium than the last iterate in two-player zero-sum
    self-play; measured in docs/results.md). The learner is always what trains."""
    transcripts: int = Field(4, ge=0)
    """Sample episodes written as JSONL transcripts at each evaluation."""
    seat_weights: list[float] | None = None
    """Share of the learner's game groups per seat when it plays a fixed opponent or a
    league, e.g. [1, 3]: a quarter of the groups in seat 0, three quarters in seat 1
    (a seat it has already mastered teaches nothing: every return there is the same).
    None rotates seats evenly. One non-negative weight per seat, not all 0."""

    @model_validator(mode="after")
    def _seat_weights_valid(self) -> TrainConfig:
        w = self.seat_weights
        if w is not None and (any(x < 0 for x in w) or sum(w) <= 0):
            raise ValueError(f"train.seat_weights must be >= 0 and not all 0, got {w}")
        return self


class RunConfig(_Strict):
    @model_validator(mode="after")
    def _magnet_exists(self) -> RunConfig:
        if self.train.final_policy == "magnet" and not self.reference.ema > 0:
            raise ValueError(
                "train.final_policy=magnet needs a magnet: set reference.ema > 0 (with "
                "loss.kl it also pulls the learner; without it only averages)"
            )
        return self

    @model_validator(mode="after")
    def _restart_explore_has_restarts(self) -> RunConfig:
        if self.rollout.restart_explore and not self.rollout.restart_share:
            raise ValueError(
                "rollout.restart_explore assigns first moves in restarted games: "
                "set rollout.restart_share > 0 as well"
            )
        if self.rollout.restart_target is not None and not self.rollout.restart_explore:
            raise ValueError(
                "rollout.restart_target trains toward the best assigned first move of "
                "restarted groups: set rollout.restart_explore=true (and restart_share > 0)"
            )
        if self.rollout.restart_explore and self.model.mode != "choice":
            raise ValueError(
                "rollout.restart_explore picks listed moves: it needs model.mode=choice"
            )
        return self

    @model_validator(mode="after")
    def _exploration_is_corrected(self) -> RunConfig:
        if self.rollout.explore and self.model.mode != "choice":
            raise ValueError("rollout.explore mixes uniform choices: it needs model.mode=choice")
        corrected = self.rollout.explore_correction == "tis"
        if self.rollout.explore and corrected and self.rollout.tis_cap is None:
            raise ValueError(
                "rollout.explore samples off-policy: set rollout.tis_cap (e.g. 1.0) so the "
                "update reweights each turn by policy / mixture, or "
                "rollout.explore_correction=none to train explored moves uncorrected"
            )
        if self.rollout.explore and not corrected and self.rollout.tis_cap is not None:
            raise ValueError(
                "rollout.explore_correction=none trains explored moves uncorrected, but "
                "rollout.tis_cap would reweight them: leave rollout.tis_cap unset"
            )
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
        return self

    game: GameConfig = Field(default_factory=GameConfig)
    model: ModelConfig = Field(default_factory=ModelConfig)
    rollout: RolloutConfig = Field(default_factory=RolloutConfig)
    algo: AlgoConfig = Field(default_factory=AlgoConfig)
    loss: LossConfig = Field(default_factory=LossConfig)
    optim: OptimConfig = Field(default_factory=OptimConfig)
    reference: ReferenceConfig = Field(default_factory=ReferenceConfig)
    critic: CriticConfig = Field(default_factory=CriticConfig)
    train: TrainConfig = Field(default_factory=TrainConfig)


DEFAULT_PRESET = "kuhn-selfplay"
"""The preset of a run that names neither a preset nor a config file."""


def base_preset(preset: str | None, file: str | Path | None) -> str | None:
    """The preset a run starts from: the one named; else, with a config file, none (the
    file goes over the built-in defaults); else ``DEFAULT_PRESET``."""
    return preset or (None if file else DEFAULT_PRESET)


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


def _preset_text(name: str) -> str:
    if name not in preset_names():
        raise ConfigError(f"unknown preset {name!r}; presets: {', '.join(preset_names())}")
    return resources.files("coplay.presets").joinpath(f"{name}.yaml").read_text()


def load_preset(name: str) -> dict[str, Any]:
    """The raw mapping of a bundled preset."""
    return yaml.safe_load(_preset_text(name)) or {}


def load_yaml(path: str | Path) -> dict[str, Any]:
    """A YAML mapping from a file, with a clear error if it is not one."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"config file {path} does not exist")
    try:
        data = yaml.safe_load(path.read_text())
    except yaml.YAMLError as err:
        raise ConfigError(f"config file {path} is not valid YAML: {err}".splitlines()[0]) from err
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"config file {path} must hold a mapping, not {type(data).__name__}")
    return data


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
) -> RunConfig:
    """Preset, then file, then overrides, validated into a ``RunConfig``."""
    data: dict[str, Any] = load_preset(preset) if preset else {}
    if file:
        data = merge(data, load_yaml(file))
    for item in overrides:
        data = apply_override(data, item)
    return validate(data)


def apply_override(data: dict[str, Any], item: str) -> dict[str, Any]:
    """A copy of ``data`` with ``key=value`` set. The value *replaces* what is at the
    key (mappings are not merged), so ``algo.params={}`` clears a preset's parameters."""
    parts, value = split_override(item)
    out = dict(data)
    node = out
    for part in parts[:-1]:
        child = node.get(part)
        node[part] = dict(child) if isinstance(child, dict) else {}
        node = node[part]
    node[parts[-1]] = value
    return out


def validate(data: dict[str, Any]) -> RunConfig:
    """Validate a raw mapping, turning pydantic's report into one line per problem."""
    try:
        return RunConfig.model_validate(data)
    except ValidationError as err:
        raise ConfigError(format_validation_error(err)) from None


def format_validation_error(err: ValidationError) -> str:
    """``invalid config: train.iterations: must be > 0 (got -1); ...``"""
    problems = []
    for e in err.errors():
        loc = ".".join(str(p) for p in e["loc"])
        if e["type"] == "moved_key":  # an old flat loss key: name where it is now
            problems.append("; ".join(moved_key(loc, k) for k in e["ctx"]["keys"]))
            continue
        msg = e["msg"].removeprefix("Value error, ")
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
