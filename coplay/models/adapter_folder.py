"""A LoRA adapter folder as peft saves it: its files checked before peft reads them,
and the adapter loaded onto a model.

peft's own errors for a bad file are tracebacks or lines that name no file, and some
faults it lets pass: a weight the file lacks stays at its start (a zero update, so that
projection plays as the base), and one of another size is skipped when asked to
ignore sizes. Here every fault is one ``CheckpointError`` (or ``FileNotFoundError``)
line that names the file, as ``coplay.models.hf_folder`` does for full checkpoints.
"""

from __future__ import annotations

import warnings
from itertools import pairwise
from pathlib import Path

import torch
from peft import PeftModel

from coplay.models.hf_folder import (
    CheckpointError,
    check_safetensors,
    check_stored_dtypes,
    listed,
    one_line,
    read_json,
    stored_tensors,
)

ADAPTER_CONFIG, ADAPTER_WEIGHTS = "adapter_config.json", "adapter_model.safetensors"
"""The files peft's ``save_pretrained`` writes for an adapter."""


def check_adapter(folder: Path) -> None:
    """Raise naming the first file of a saved LoRA adapter that cannot be loaded,
    before peft reads it."""
    config = read_json(folder / ADAPTER_CONFIG)
    if not isinstance(config, dict) or config.get("peft_type") != "LORA":
        raise CheckpointError(
            f"{folder / ADAPTER_CONFIG} is not the config of a LoRA adapter "
            '(a JSON object with "peft_type": "LORA")'
        )
    weights = folder / ADAPTER_WEIGHTS
    if not weights.is_file():
        raise FileNotFoundError(f"{weights} is missing (the adapter's weights)")
    check_safetensors(weights)


def load_adapter(model: torch.nn.Module, folder: Path, role: str, *, trainable: bool):
    """``model`` (a base, or a peft model of the roles before) with the adapter saved in
    ``folder`` as ``role``; every fault of its files one ``CheckpointError``."""
    check_adapter(folder)
    try:
        # peft warns of sizes that differ from the config and skips them: refused below.
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            if isinstance(model, PeftModel):
                model.load_adapter(
                    folder, adapter_name=role, is_trainable=trainable, ignore_mismatched_sizes=True
                )
            else:
                model = PeftModel.from_pretrained(
                    model,
                    folder,
                    adapter_name=role,
                    is_trainable=trainable,
                    ignore_mismatched_sizes=True,
                )
    except Exception as err:  # peft raises many types for a config it cannot apply
        raise CheckpointError(
            f"{folder} could not be loaded as a LoRA adapter: {one_line(err)}"
        ) from err
    _check_adapter_weights(folder / ADAPTER_WEIGHTS, _saved_names(model, role))
    return model


def _saved_names(model: PeftModel, role: str) -> dict[str, torch.Tensor]:
    """The role's adapter weights by the names peft saves them under: without the
    adapter's name after a ``lora_*`` part (``...q_proj.lora_A.<role>.weight``)."""
    out = {}
    for name, p in model.named_parameters():
        parts = name.split(".")
        for i, (a, b) in enumerate(pairwise(parts)):
            if a.startswith("lora_") and b == role:
                out[".".join(parts[: i + 1] + parts[i + 2 :])] = p
                break
    return out


def _check_adapter_weights(file: Path, own: dict[str, torch.Tensor]) -> None:
    """Refuse weights that do not fit the adapter its config builds: peft leaves a
    missing one at its start (a zero update: that projection plays as the base), drops
    one it has no place for, and skips one of another shape."""
    stored = stored_tensors(file)
    for names, fault in (
        (own.keys() - stored.keys(), "lacks weights its adapter_config.json needs"),
        (stored.keys() - own.keys(), "holds weights its adapter_config.json has no place for"),
    ):
        if names:
            raise CheckpointError(f"{file} {fault}: {listed(names)}")
    for key, (_, shape) in sorted(stored.items()):
        if shape != tuple(own[key].shape):
            raise CheckpointError(
                f"{file} holds {key} as {list(shape)}, but its {ADAPTER_CONFIG} makes it "
                f"{list(own[key].shape)}"
            )
    check_stored_dtypes(file, own)
