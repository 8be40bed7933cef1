"""coplay sft's settings: one-line errors for bad ``sft.*`` values, the ``optim``
overrides it refuses, a preset's or file's ``optim`` left as coplay train's, and the
warning naming a setting the run ignores."""

import pytest

from coplay.sft.config import SftSettings, build_sft_config
from coplay.train.config import ConfigError
from coplay.train.settings import IgnoredSetting


@pytest.mark.parametrize(
    ("override", "message"),
    [
        # pydantic reads a bool as 0 or 1: sft.epochs=true ran one epoch.
        ("sft.epochs=true", "sft.epochs: expected a number, got true"),
        ("sft.lr=true", "sft.lr: expected a number, got true"),
        ("sft.lora.alpha=on", "sft.lora.alpha: expected a number, got true"),
        # gt=0 refused NaN but not inf, which trained on NaN.
        ("sft.lr=.inf", "sft.lr: Input should be a finite number"),
        ("sft.weight_decay=.inf", "sft.weight_decay: Input should be a finite number"),
        ("sft.max_grad_norm=.inf", "sft.max_grad_norm: Input should be a finite number"),
    ],
)
def test_bad_sft_settings_are_one_line_errors(override, message):
    with pytest.raises(ConfigError) as err:
        build_sft_config(preset=None, file=None, overrides=[override])
    assert str(err.value).startswith(f"invalid config: {message}") and "\n" not in str(err.value)


@pytest.mark.parametrize(
    ("override", "key", "instead"),
    [
        ("optim.lr=100", "lr", "pass sft.lr instead"),
        ("optim.weight_decay=0.1", "weight_decay", "pass sft.weight_decay instead"),
        ("optim.max_grad_norm=5", "max_grad_norm", "pass sft.max_grad_norm instead"),
        ("optim.epochs=2", "epochs", "pass sft.epochs instead"),
        ("optim.minibatch_size=4", "minibatch_size", "pass sft.batch_size instead"),
        ("optim.micro_batch_size=4", "micro_batch_size", "pass sft.micro_batch_tokens instead"),
        ("optim.micro_batch_tokens=64", "micro_batch_tokens", "pass sft.micro_batch_tokens"),
        ("optim.lr_schedule=linear", "lr_schedule", "coplay sft keeps sft.lr constant"),
        ("optim.warmup_updates=2", "warmup_updates", "coplay sft keeps sft.lr constant"),
        ("optim={lr: 100}", "lr", "pass sft.lr instead"),
    ],
)
def test_optim_settings_sft_does_not_read_are_refused(override, key, instead):
    # They were accepted, recorded in config.yaml and ignored: optim.lr=100 trained at sft.lr.
    with pytest.raises(ConfigError) as err:
        build_sft_config(preset="kuhn-text", file=None, overrides=[override])
    message = str(err.value)
    assert message.startswith(f"optim.{key} is a coplay train setting that coplay sft does not")
    assert instead in message and "\n" not in message


def test_optim_settings_of_a_preset_or_file_stay_coplay_trains(tmp_path):
    # kuhn-text's optim.lr is its RL recipe's: sft runs from the preset, as documented,
    # and from a file that holds a recipe for both stages.
    cfg = build_sft_config(preset="kuhn-text", file=None, overrides=())
    assert cfg.run.optim.lr == 0.002 and cfg.sft.lr == SftSettings().lr
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text("optim: {lr: 0.5, epochs: 2}\n")
    assert build_sft_config(preset=None, file=recipe).run.optim.lr == 0.5
    with pytest.raises(ConfigError, match="optim.lrr: unknown key"):
        build_sft_config(preset=None, file=None, overrides=["optim.lrr=1"])


def test_tiny_settings_beside_model_path_are_named_in_one_warning():
    overrides = ["model.path=runs/sft/checkpoints/final", "model.tiny.hidden_size=32"]
    with pytest.warns(IgnoredSetting, match=r"^model\.tiny\.hidden_size is ignored: model\.path"):
        build_sft_config(preset=None, file=None, overrides=overrides)
