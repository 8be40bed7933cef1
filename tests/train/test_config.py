"""The run config's rules: one-line errors for bad values, renamed keys, documented keys."""

import re
import typing
from collections.abc import Iterator

import pytest
from pydantic import BaseModel

from coplay.train.config import RENAMED, ConfigError, RunConfig
from coplay.train.settings import (
    build_config,
    to_yaml,
)


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["train.iterations=-1"], "train.iterations"),
        (["nonsense.key=1"], "nonsense: unknown key"),
        (["game.name=chess_x"], "unknown game 'chess_x'"),
        (["game.params.players=30"], "bad parameters"),
        (["game.params.bogus=1"], "unknown parameter"),
        (["algo.estimator=ppo_magic"], "unknown estimator"),
        (["algo.params={bogus: 1}"], "has no parameter 'bogus'"),
        (["loss.aggregation=median"], "aggregation must be one of"),
        (["model.mode=telepathy"], "model.mode"),
        (["model.temperature=0"], "model.temperature"),
        (["rollout.max_staleness=1"], "lets Ray workers play ahead: it needs rollout.workers >= 1"),
        (["model.backend=vllm", "rollout.workers=1"], "which rollout.workers=1 cannot share"),
        (["game.invalid.on_fail=explode"], "game.invalid.on_fail"),
        (["train.iterations"], "key=value"),
        (["rollout.group_size=1"], "rollout.group_size >= 2"),
        (["rollout.group_size=1", "algo.estimator=gigpo", "algo.params={}"], "group_size >= 2"),
        (
            [
                "rollout.group_size=1",
                "algo.estimator=gae",
                "algo.params={}",
                "algo.filter_flat_groups=true",
            ],
            "a group of one always is: set rollout.group_size >= 2",
        ),
        (["loss.clip_low=1.5"], "loss.clip_low: Input should be less than 1"),
        (
            ["rollout.restarts={share: 0.5, exploring_starts: {target: {memory: 64}}}"],
            "rollout.restarts.exploring_starts.target.coef: Field required",
        ),
        (["rollout.restarts={buffer: 64}"], "rollout.restarts.share: Field required"),
        (["rollout.restarts.share=1.0"], "rollout.restarts.share: Input should be less than 1"),
        (["rollout.restarts={share: 0.5, sources: some}"], "rollout.restarts.sources"),
        (["rollout.explore.share=0"], "rollout.explore.share: Input should be greater than 0"),
        (["rollout.explore.share=1.0"], "rollout.explore.share: Input should be less than 1"),
        (["rollout.explore={share: 0.1, tis_cap: 0}"], "rollout.explore.tis_cap"),
        (["rollout.explore=0"], "rollout.explore is now a section: leave it unset"),
        (["rollout.explore=0.1"], "rollout.explore is now a section: {share: 0.1}"),
        (["train.opponent=self"], "self-play is now the default: leave it unset"),
        (["magnet={final: true}"], "magnet.ema: Field required"),
        (["loss.kl_coef=0.1"], "loss.kl_coef is now loss.kl.coef"),
        (
            ["loss.policy_iteration_coef=1"],
            "loss.policy_iteration_coef is now rollout.restarts.exploring_starts.target.coef",
        ),
        (["loss.kl.coef=0"], "loss.kl.coef: Input should be greater than 0"),
        (
            ["rollout.explore.share=0.1", "model.mode=text"],
            "rollout.explore picks listed moves: it needs model.mode=choice",
        ),
        (
            ["rollout.restarts={share: 0.5, exploring_starts: {}}", "model.mode=text"],
            "rollout.restarts.exploring_starts picks listed moves: it needs model.mode=choice",
        ),
    ],
)
def test_malformed_configs_give_one_clear_line(overrides, message):
    with pytest.raises(ConfigError) as err:
        build_config(preset="kuhn-selfplay", overrides=overrides)
    text = str(err.value)
    assert message in text
    assert "\n" not in text
    assert "(got {'game'" not in text  # never the whole config after a cross-section rule


@pytest.mark.parametrize(("old", "new"), RENAMED.items())
def test_each_renamed_key_names_its_new_place_in_one_line(old, new):
    with pytest.raises(ConfigError) as err:
        build_config(preset="kuhn-selfplay", overrides=[f"{old}=1"])
    assert str(err.value) == f"invalid config: {old} is now {new}"


def test_every_config_key_is_documented():
    from coplay.train.settings import describe

    rows = describe(build_config(preset="kuhn-selfplay"))
    assert len(rows) > 30
    assert [key for key, _, doc in rows if not doc] == []


SIDE_EFFECT_GAME = """
import os
os.environ["COPLAY_TEST_IMPORTED"] = "yes"

def make(**params):
    from coplay.envs.frozen_lake import make_frozen_lake
    return make_frozen_lake(**params)
"""


def test_a_game_factory_is_imported_only_when_a_game_is_built(tmp_path, monkeypatch):
    from coplay.envs.probe import resolve_factory

    (tmp_path / "sideeffect_game.py").write_text(SIDE_EFFECT_GAME)
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("COPLAY_TEST_IMPORTED", raising=False)
    cfg = build_config(overrides=["game.name=sideeffect_game:make", "game.params={size: 3}"])
    to_yaml(cfg)
    assert "COPLAY_TEST_IMPORTED" not in __import__("os").environ  # validated, printed: no import
    assert resolve_factory(cfg.game.name, cfg.game.params)().spec.num_players == 1
    assert __import__("os").environ["COPLAY_TEST_IMPORTED"] == "yes"


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("nosuchpkg_xyz.mod:make", "no module 'nosuchpkg_xyz'"),
        ("some module:make", "package.module:function"),
        ("os:1x", "package.module:function"),
    ],
)
def test_a_malformed_or_missing_factory_fails_validation_in_one_line(name, message):
    with pytest.raises(ConfigError, match=message):
        build_config(overrides=[f"game.name={name}"])


def test_chat_context_needs_text_mode():
    with pytest.raises(ConfigError, match="model.text.context=chat .* needs model.mode=text"):
        build_config(overrides=["model.text.context=chat"])


def test_the_text_section_takes_its_settings_from_overrides():
    cfg = build_config(
        overrides=["model.mode=text", "model.text.answer=think-boxed", "model.text.top_k=5"]
    )
    assert (cfg.model.text.answer, cfg.model.text.top_k) == ("think-boxed", 5)
    with pytest.raises(ConfigError, match="unknown answer format 'xml'"):
        build_config(overrides=["model.mode=text", "model.text.answer=xml"])


@pytest.mark.parametrize("bad", ["train=5", "rollout=abc", "rollout=[1]"])
def test_a_section_that_is_not_a_mapping_is_one_error(bad):
    with pytest.raises(ConfigError, match=r"^invalid config: (train|rollout): Input should be"):
        build_config(overrides=[bad])


@pytest.mark.parametrize(
    "override",
    ["optim.lr=.inf", "optim.lr=1e400", "optim.weight_decay=.inf", "optim.max_grad_norm=.inf"],
)
def test_an_infinite_optimizer_setting_is_refused(override):
    # gt=0 refused NaN but not inf: optim.lr=.inf trained on NaN and failed later.
    key = override.partition("=")[0]
    with pytest.raises(ConfigError, match=rf"^invalid config: {key}: Input should be a finite"):
        build_config(preset="kuhn-selfplay", overrides=[override])


@pytest.mark.parametrize("device", ["bogus", "meta", "cuda:x"])
def test_an_unknown_device_is_one_config_error(device):
    with pytest.raises(ConfigError, match=r"^invalid config: model.device: expected cpu, cuda"):
        build_config(overrides=[f"model.device={device}"])


# --- settings given but not used -----------------------------------------------------------


def _float_keys(model: type[BaseModel], prefix: str = "") -> Iterator[str]:
    for name, field in model.model_fields.items():
        args = typing.get_args(field.annotation) or (field.annotation,)
        for arg in args:
            if isinstance(arg, type) and issubclass(arg, BaseModel):
                yield from _float_keys(arg, f"{prefix}{name}.")
        if float in args:
            yield f"{prefix}{name}"


UNBOUNDED = {
    "model.text.tis_cap",
    "rollout.explore.tis_cap",
    "loss.clip_high",
    "loss.dual_clip",
    "critic.clip",
    "critic.max_grad_norm",
}
"""Settings where infinity means no limit: no cap, no clip."""


@pytest.mark.parametrize("key", sorted(set(_float_keys(RunConfig)) - UNBOUNDED))
@pytest.mark.parametrize("value", [".nan", ".inf", "-.inf"])
def test_a_setting_that_is_not_a_finite_number_is_refused(key, value):
    # An infinite KL coefficient was accepted and the run died blaming optim.lr.
    text = ["model.mode=text"] if key.startswith("model.text.") else []
    with pytest.raises(ConfigError, match=re.escape(key)):
        build_config(overrides=[*text, f"{key}={value}"])


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (
            ["optim.lr_schedule=cosin"],
            "optim.lr_schedule: unknown lr schedule 'cosin'; registered: constant, linear, cosine",
        ),
        (
            ["optim.warmup_updates=-1"],
            "optim.warmup_updates: Input should be greater than or equal",
        ),
        (
            ["train.iterations=4", "optim.warmup_updates=4"],
            "optim.warmup_updates=4 would take all of train.iterations=4 updates, leaving none "
            "to optim.lr_schedule: set it below 4",
        ),
        (["train.iterations=4", "optim.warmup_updates=9"], "set it below 4"),
    ],
)
def test_a_bad_schedule_or_warm_up_is_one_line(overrides, message):
    with pytest.raises(ConfigError) as err:
        build_config(preset="kuhn-selfplay", overrides=overrides)
    assert message in str(err.value) and "\n" not in str(err.value)


def test_a_warm_up_shorter_than_the_run_and_a_cosine_decay_are_taken():
    over = ["train.iterations=4", "optim.warmup_updates=3", "optim.lr_schedule=cosine"]
    optim = build_config(preset="kuhn-selfplay", overrides=over).optim
    assert (optim.warmup_updates, optim.lr_schedule) == (3, "cosine")


def test_the_config_command_shows_the_warm_up_with_its_meaning(capsys):
    from coplay.cli import main

    assert main(["config", "--preset", "kuhn-selfplay"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "optim.warmup_updates" in out and "optim.lr_schedule" in out
    assert "Updates over which the learning rate first rises" in out


def test_estimator_parameters_are_read_as_their_keywords_types():
    # YAML reads 1e-8 as text: the estimator took eps='1e-8' and the config failed on
    # "'<' not supported between instances of 'str' and 'int'", naming no key.
    grpo = ["algo.estimator=grpo", "rollout.group_size=4"]
    assert build_config(overrides=[*grpo, "algo.params.eps=1e-8"]).algo.params["eps"] == 1e-8


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (
            ["algo.estimator=gae", "algo.params={gamma: abc}"],
            "invalid config: algo.params.gamma: Input should be a valid number, unable to "
            "parse string as a number (got 'abc')",
        ),
        (
            ["algo.estimator=rae", "algo.params={alpha: [0.5]}"],
            "invalid config: algo.params.alpha: Input should be a valid number (got [0.5])",
        ),
        (
            # pydantic reads on as 1.0: a flag slipped into a number, without a word
            ["algo.estimator=grpo", "rollout.group_size=4", "algo.params.eps=on"],
            "invalid config: algo.params.eps: expected a number, got true",
        ),
    ],
)
def test_an_estimator_parameter_of_the_wrong_type_is_one_line_naming_it(overrides, message):
    with pytest.raises(ConfigError) as err:
        build_config(overrides=overrides)
    assert str(err.value) == message
