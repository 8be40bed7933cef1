"""LoRA adapter folders: every bad file one error line naming it, before peft reads it."""

import json
import shutil

import pytest
import torch
from safetensors.torch import load_file, save_file

from coplay.cli import main
from coplay.models.lora import LoraSettings, attach_roles, load_roles, save_roles
from tests.models.tiny_policies import tiny_policy

ROLES = ("first", "second")


@pytest.fixture(scope="module")
def lora_run(tmp_path_factory):
    run = tmp_path_factory.mktemp("lora")
    views = attach_roles(tiny_policy(), ROLES, LoraSettings(rank=2), seed=0)
    save_roles(views, run / "checkpoints" / "final")
    return run


def _adapter_weights(folder):
    return folder / "adapter_model.safetensors"


def _edit_adapter_config(**changes):
    def edit(folder):
        config = json.loads((folder / "adapter_config.json").read_text())
        (folder / "adapter_config.json").write_text(json.dumps({**config, **changes}))

    return edit


def _edit_adapter_weights(change):
    def edit(folder):
        weights = load_file(_adapter_weights(folder))
        save_file(change(weights), _adapter_weights(folder))

    return edit


DOWN_A = "base_model.model.model.layers.0.mlp.down_proj.lora_A.weight"
"""The first weight of a saved adapter (the tiny model's: 64 wide into the projection)."""


BAD_ADAPTERS = {
    "adapter_config.json not JSON": (
        lambda a: (a / "adapter_config.json").write_text("{r: 2"),
        "{a}/adapter_config.json is not valid JSON: ",
    ),
    "adapter_config.json a list": (
        lambda a: (a / "adapter_config.json").write_text("[]"),
        "{a}/adapter_config.json is not the config of a LoRA adapter",
    ),
    "another kind of adapter": (
        _edit_adapter_config(peft_type="IA3"),
        "{a}/adapter_config.json is not the config of a LoRA adapter",
    ),
    "no adapter weights": (
        lambda a: _adapter_weights(a).unlink(),
        "{a}/adapter_model.safetensors is missing (the adapter's weights)",
    ),
    "truncated adapter weights": (
        lambda a: _adapter_weights(a).write_bytes(_adapter_weights(a).read_bytes()[:100]),
        "{a}/adapter_model.safetensors is not a valid safetensors file (truncated or corrupt): ",
    ),
    "a rank the weights do not have": (
        _edit_adapter_config(r=4),
        f"{{a}}/adapter_model.safetensors holds {DOWN_A} as [2, 64], but its "
        "adapter_config.json makes it [4, 64]",
    ),
    "a target the base does not have": (
        _edit_adapter_config(target_modules=["nosuch_proj"]),
        "{a} could not be loaded as a LoRA adapter: Target modules {{'nosuch_proj'}} not found",
    ),
    "a weight left out": (
        _edit_adapter_weights(lambda w: {k: v for k, v in w.items() if k != DOWN_A}),
        f"{{a}}/adapter_model.safetensors lacks weights its adapter_config.json needs: {DOWN_A}",
    ),
    "a weight of a layer the base does not have": (
        _edit_adapter_weights(lambda w: {**w, DOWN_A.replace(".0.", ".7."): w[DOWN_A].clone()}),
        "{a}/adapter_model.safetensors holds weights its adapter_config.json has no place "
        f"for: {DOWN_A.replace('.0.', '.7.')}",
    ),
    "a weight stored as integers": (
        _edit_adapter_weights(lambda w: {**w, DOWN_A: (w[DOWN_A] * 100).to(torch.int32)}),
        f"{{a}}/adapter_model.safetensors holds {DOWN_A} as I32, not as floating point numbers",
    ),
}


@pytest.mark.parametrize("case", list(BAD_ADAPTERS))
def test_eval_of_a_bad_adapter_is_one_error_line(lora_run, tmp_path, capsys, case):
    # peft's own errors were tracebacks, lines that named no file, or nothing at all: a
    # left-out weight loaded as zeros, so that projection played as the base.
    corrupt, message = BAD_ADAPTERS[case]
    run = tmp_path / "run"
    shutil.copytree(lora_run, run)
    adapter = run / "checkpoints" / "final" / "second"
    corrupt(adapter)
    args = ["eval", str(run), "--role", "second", "--game", "kuhn_poker", "--episodes", "2"]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert err.startswith("coplay eval: error: " + message.format(a=adapter)), err
    assert len(err.splitlines()) == 1
    assert len(load_roles(run / "checkpoints" / "final", ["first"])) == 1  # the other loads


def test_a_good_adapter_still_loads_after_the_checks(lora_run):
    loaded = load_roles(lora_run / "checkpoints" / "final", ROLES)
    assert [len(v.adapter_parameters()) for v in loaded.values()] == [2 * 7 * 2] * 2
