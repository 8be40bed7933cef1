"""Saving and loading policies: plain HF folders plus decision settings."""

import json
import shutil

import torch
from transformers import AutoModelForCausalLM

from coplay.cli import main
from coplay.models.build import ModelConfig, build_policy
from coplay.models.loading import load_policy, save_policy
from tests.models.tiny_policies import tiny_policy


def test_save_then_load_keeps_weights_and_settings(tmp_path):
    policy = tiny_policy(mode="text", temperature=0.7)
    policy.version = 5
    save_policy(policy, tmp_path / "ckpt")
    loaded = load_policy(tmp_path / "ckpt")
    assert (loaded.mode, loaded.temperature, loaded.version) == ("text", 0.7, 5)
    for a, b in zip(policy.model.parameters(), loaded.model.parameters(), strict=True):
        assert (a == b).all()
    assert AutoModelForCausalLM.from_pretrained(tmp_path / "ckpt").config.hidden_size == 32


def test_a_recorded_game_that_is_not_a_name_is_one_error_line(checkpoint, tmp_path, capsys):
    folder = tmp_path / "final"
    shutil.copytree(checkpoint, folder)
    meta = json.loads((folder / "coplay_policy.json").read_text())
    (folder / "coplay_policy.json").write_text(json.dumps({**meta, "game": 5}))
    assert main(["eval", str(folder), "--episodes", "2"]) == 2
    err = capsys.readouterr().err
    assert err == (
        f"coplay eval: error: {folder}/coplay_policy.json: game must be a name and "
        "game_params a mapping\n"
    )


def test_a_policy_loads_in_the_dtype_it_was_saved_in(tmp_path):
    folder = save_policy(tiny_policy(), tmp_path / "ckpt")
    bf16 = build_policy(ModelConfig(path=str(folder), dtype="bfloat16"), corpus=[], seed=0)
    save_policy(bf16, tmp_path / "bf16")
    assert load_policy(tmp_path / "bf16").model.dtype == torch.bfloat16
    assert load_policy(tmp_path / "bf16", dtype="float32").model.dtype == torch.float32
    assert load_policy(folder).model.dtype == torch.float32
