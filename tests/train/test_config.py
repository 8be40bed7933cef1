"""Config building: presets, files, overrides, and one-line errors for bad input."""

import re
import warnings

import pytest

from coplay.cli import main
from coplay.train.config import (
    RENAMED,
    ConfigError,
    base_preset,
    build_config,
    load_yaml,
    parse_override,
    preset_names,
    to_yaml,
)


def test_presets_exist_and_validate():
    assert {"kuhn-selfplay", "leduc-selfplay", "tictactoe-selfplay"} <= set(preset_names())
    for name in preset_names():
        build_config(preset=name)


def test_overrides_are_typed_and_nested():
    cfg = build_config(
        preset="kuhn-selfplay", overrides=["train.iterations=7", "loss.clip_high=0.28"]
    )
    assert cfg.train.iterations == 7 and cfg.loss.clip_high == 0.28
    assert parse_override("a.b.c=[1, 2]") == {"a": {"b": {"c": [1, 2]}}}


def test_file_is_merged_over_preset(tmp_path):
    f = tmp_path / "c.yaml"
    f.write_text("train:\n  iterations: 3\n")
    cfg = build_config(preset="kuhn-selfplay", file=f)
    assert cfg.train.iterations == 3 and cfg.game.name == "kuhn_poker"


def test_resolved_config_round_trips(tmp_path):
    import yaml

    cfg = build_config(preset="leduc-selfplay")
    f = tmp_path / "config.yaml"
    f.write_text(to_yaml(cfg))
    assert build_config(file=f) == cfg
    assert yaml.safe_load(f.read_text())["game"]["name"] == "leduc_poker"


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


def test_unknown_preset_and_bad_files(tmp_path):
    with pytest.raises(ConfigError, match="unknown preset"):
        build_config(preset="nope")
    with pytest.raises(ConfigError, match="does not exist"):
        build_config(file=tmp_path / "missing.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("train: [unclosed")
    with pytest.raises(ConfigError, match="not valid YAML"):
        build_config(file=bad)
    listy = tmp_path / "list.yaml"
    listy.write_text("- 1\n- 2\n")
    with pytest.raises(ConfigError, match="must hold a mapping"):
        build_config(file=listy)


def test_a_directory_given_as_the_config_file_is_named_a_directory(tmp_path):
    with pytest.raises(ConfigError) as err:
        load_yaml(tmp_path, "config file")
    assert str(err.value) == f"config file {tmp_path} is a directory, not a YAML file"


@pytest.mark.parametrize("file", [None, "c.yaml"])
def test_the_empty_preset_name_is_unknown_not_the_default(file):
    with pytest.raises(ConfigError, match=r"^unknown preset ''; presets: .*kuhn-selfplay"):
        base_preset("", file)
    assert base_preset(None, file) == (None if file else "kuhn-selfplay")  # none named


def test_every_config_key_is_documented():
    from coplay.train.config import describe

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


def test_presets_name_their_game_and_purpose_in_one_line():
    from coplay.train.config import preset_info

    for name in preset_names():
        info = preset_info(name)
        assert info.game == build_config(preset=name).game.name
        assert 20 <= len(info.purpose) <= 90 and "\n" not in info.purpose, name
    assert preset_info("kuhn-selfplay").purpose.startswith("The default: self-play on Kuhn")


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


def test_a_dotted_key_under_a_value_is_refused_not_dropped(tmp_path):
    # Replacing the file's game with a mapping would train the default game instead.
    path = tmp_path / "c.yaml"
    path.write_text("game: leduc_poker\n")
    with pytest.raises(ConfigError, match="game is 'leduc_poker', not a section with keys"):
        build_config(file=path, overrides=["game.max_turns=50"])


def test_a_key_given_twice_in_a_file_is_refused(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("train: {iterations: 1, seed: 7}\ntrain: {eval_episodes: 8}\n")
    with pytest.raises(ConfigError, match="not valid YAML: found the key 'train' twice"):
        build_config(file=path)


def test_merge_keys_reuse_a_mapping_and_a_key_may_override_a_merged_one(tmp_path):
    # The duplicate check built the merge key ``<<`` as a key and refused the file.
    path = tmp_path / "c.yaml"
    path.write_text(
        "common: &common {lr: 0.002, epochs: 2}\n"
        "schedule: &schedule {<<: *common, lr_schedule: linear}\n"
        "optim:\n  <<: *schedule\n  lr: 0.004\n"
    )
    assert load_yaml(path)["optim"] == {"lr": 0.004, "epochs": 2, "lr_schedule": "linear"}
    # A key given twice beside a merge, or inside the merged mapping, is still refused.
    for text, key in (
        ("a: &a {x: 1}\nb: {<<: *a, y: 1, y: 2}\n", "y"),
        ("a: &a {x: 1, x: 2}\nb: {<<: *a}\n", "x"),
    ):
        path.write_text(text)
        with pytest.raises(ConfigError, match=f"not valid YAML: found the key '{key}' twice"):
            load_yaml(path)


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


@pytest.mark.parametrize("seed", ["-1", str(2**31)])
def test_a_seed_out_of_range_names_the_key(seed):
    with pytest.raises(ConfigError, match=r"^invalid config: train.seed: Input should be"):
        build_config(overrides=[f"train.seed={seed}"])


@pytest.mark.parametrize(
    ("override", "key"),
    [
        ("train.iterations=true", "train.iterations"),
        ("model.tiny.hidden_size=on", "model.tiny.hidden_size"),  # YAML reads on as true
        ("optim.weight_decay=false", "optim.weight_decay"),
        (
            "train.opponent={name: perfect, seat_weights: [true, 3]}",
            "train.opponent.seat_weights[0]",
        ),
    ],
)
def test_a_bool_where_a_number_belongs_is_refused(override, key):
    # pydantic alone reads true as 1: train.iterations=true ran one iteration.
    with pytest.raises(ConfigError, match=rf"^invalid config: {re.escape(key)}: expected a number"):
        build_config(preset="kuhn-selfplay", overrides=[override])


def test_bools_stay_where_bools_belong():
    cfg = build_config(
        preset="kuhn-selfplay", overrides=["train.exact=true", "train.exact_matches=false"]
    )
    assert cfg.train.exact is True and cfg.train.exact_matches is False


# --- settings given but not used -----------------------------------------------------------

CHECKPOINT = ["model.path=runs/sft/checkpoints/final"]


def _ignored(keys: str) -> str:
    return f"{keys} ignored: model.path (runs/sft/checkpoints/final) gives the model and its shape"


def _warnings(**given) -> list[str]:
    """The warnings that ``build_config(**given)`` gives, one message each."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        build_config(**given)
    return [str(w.message) for w in caught]


def test_tiny_settings_given_beside_model_path_are_named_in_one_warning():
    # The weights and the shape come from the checkpoint: config.yaml recorded the
    # setting, and nothing said it did nothing.
    over = [*CHECKPOINT, "model.tiny.hidden_size=32", "model.tiny.num_layers=1"]
    assert _warnings(preset="kuhn-selfplay", overrides=over) == [
        _ignored("model.tiny.hidden_size, model.tiny.num_layers are")
    ]


def test_tiny_settings_of_a_config_file_beside_model_path_are_named(tmp_path):
    f = tmp_path / "mine.yaml"
    f.write_text("model:\n  tiny: {hidden_size: 32}\n")
    over = ["model.tiny={num_layers: 1, hidden_size: 32}", *CHECKPOINT]
    assert _warnings(file=f, overrides=over) == [
        _ignored("model.tiny.hidden_size, model.tiny.num_layers are")
    ]


@pytest.mark.parametrize("preset", ["negotiation-text", "leduc-selfplay"])
def test_a_presets_own_tiny_settings_beside_model_path_are_not_warned_of(preset):
    # negotiation-text sets the tiny model its SFT step builds, then trains from that
    # step's checkpoint with model.path.
    assert _warnings(preset=preset, overrides=CHECKPOINT) == []


def test_tiny_settings_without_model_path_are_not_warned_of():
    assert _warnings(preset="kuhn-selfplay", overrides=["model.tiny.hidden_size=32"]) == []


def test_a_runs_own_config_yaml_is_not_taken_for_given_tiny_settings(tmp_path):
    # --resume reads the run's config.yaml as its file, every key of model.tiny in it.
    f = tmp_path / "config.yaml"
    f.write_text(to_yaml(build_config(preset="negotiation-text", overrides=CHECKPOINT)))
    assert _warnings(file=f, recorded=True) == []
    assert _warnings(file=f, recorded=True, overrides=["model.tiny.max_positions=2048"]) == [
        _ignored("model.tiny.max_positions is")
    ]


def test_the_cli_prints_ignored_settings_as_one_warning_line(capsys):
    argv = ["config", "--preset", "negotiation-text", *CHECKPOINT, "model.tiny.hidden_size=32"]
    assert main(argv) == 0
    err = capsys.readouterr().err
    assert err == f"coplay config: warning: {_ignored('model.tiny.hidden_size is')}\n"
