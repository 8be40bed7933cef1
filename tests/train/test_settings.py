"""A run's settings from text: presets, files, overrides, their warnings."""

import re
import warnings

import pytest

from coplay.cli import main
from coplay.train.config import ConfigError
from coplay.train.settings import (
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


def test_presets_name_their_game_and_purpose_in_one_line():
    from coplay.train.settings import preset_info

    for name in preset_names():
        info = preset_info(name)
        assert info.game == build_config(preset=name).game.name
        assert 20 <= len(info.purpose) <= 90 and "\n" not in info.purpose, name
    assert preset_info("kuhn-selfplay").purpose.startswith("The default: self-play on Kuhn")


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


@pytest.mark.parametrize("item", ["a..b=1", ".train=1", "train.=1", "train. .seed=1"])
def test_an_override_key_with_an_empty_part_is_refused_naming_it(item):
    # It was validated as a key named '' (invalid config: train.: unknown key).
    key = item.partition("=")[0]
    with pytest.raises(ConfigError) as err:
        build_config(overrides=[item])
    assert str(err.value) == (
        f"override {item!r}: the key {key!r} has an empty part between its dots "
        "(e.g. train.iterations=50)"
    )


@pytest.mark.parametrize(
    "item", ["train.eval_opponents=[random,", "train.opponent={name:", 'train.opponent="random']
)
def test_an_override_value_that_opens_yaml_and_does_not_parse_is_refused(item):
    # Taken as text, the opponent '{name:' was a config that validated.
    with pytest.raises(ConfigError, match=rf"^override {re.escape(repr(item))}: the value is not"):
        build_config(overrides=[item])


def test_an_override_value_that_is_no_yaml_and_opens_none_stays_text():
    assert build_config(overrides=["train.opponent=@me"]).train.opponent.name == "@me"


@pytest.mark.parametrize(
    "item",
    [
        "rollout.games_per_iter=99999999999999999999999",
        "game.params.players=99999999999999999999999",
        "model.tiny.hidden_size=-99999999999999999999999",
    ],
)
def test_an_integer_beyond_64_bits_is_refused_naming_its_key(item):
    # rollout.games_per_iter of 10**23 validated, and the run stopped on an OverflowError
    # traceback after writing its directory; a game's parameter named no key.
    key, _, value = item.partition("=")
    with pytest.raises(ConfigError) as err:
        build_config(overrides=[item])
    assert str(err.value) == (
        f"invalid config: {key}: {value} is beyond a 64-bit integer (|x| <= {2**63 - 1})"
    )


def test_an_error_names_the_key_as_given_not_the_unions_member():
    # pydantic's location holds the name of the union member tried: train.exact.bool.
    with pytest.raises(ConfigError) as err:
        build_config(overrides=["train.exact=maybe"])
    assert str(err.value).startswith("invalid config: train.exact: Input should be a valid bool")
    assert "train.exact.bool" not in str(err.value)
    assert "train.exact.literal" not in str(err.value)


def test_a_config_file_may_be_a_pipe(tmp_path):
    # coplay train --config <(...) names a pipe, which was said not to exist.
    import os
    import threading

    pipe = tmp_path / "pipe.yaml"
    os.mkfifo(pipe)
    text = "train: {iterations: 3}\n"
    writer = threading.Thread(target=pipe.write_text, args=(text,), daemon=True)
    writer.start()
    try:
        assert build_config(file=pipe).train.iterations == 3
    finally:
        writer.join(timeout=5)
        if writer.is_alive():  # nothing opened the pipe to read: the writer waits for it
            pipe.read_text()


def test_a_config_file_that_is_a_device_is_refused_as_no_file():
    # It was said not to exist; read, /dev/zero would never end.
    with pytest.raises(ConfigError, match="^config file /dev/zero is not a file$"):
        build_config(file="/dev/zero")
