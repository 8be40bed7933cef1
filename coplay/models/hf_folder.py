"""A checkpoint folder as Hugging Face saves it: found from a run directory, its files
checked before transformers reads them, its model and tokenizer loaded.

Transformers' own errors for a bad file are tracebacks that seldom say which file it
was; here every fault is one ``CheckpointError`` (or ``FileNotFoundError``) line that
names the file.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from functools import partial
from pathlib import Path

import torch
from safetensors import SafetensorError, safe_open
from transformers import (
    CONFIG_MAPPING,
    AutoModelForCausalLM,
    AutoTokenizer,
    PreTrainedTokenizerFast,
)

POLICY_FILE = "coplay_policy.json"
"""coplay's own record beside the Hugging Face files (``coplay.models.loading``)."""

INTERMEDIATE = re.compile(r"iter_([0-9]+)")
"""Names of a run's intermediate checkpoints (``checkpoints/iter_000004``)."""


class CheckpointError(ValueError):
    """A checkpoint file that cannot be loaded; the message names the file and the fault."""


def load_hf(path: str | Path, dtype: str | torch.dtype):
    """The model (in ``dtype``) and tokenizer of the checkpoint folder ``path``."""
    path = Path(path)
    check_checkpoint(path)
    tok = _load_tokenizer(path)
    _check_chat_template(path, tok)
    if tok.pad_token_id is None:
        tok.pad_token = tok.eos_token
    model = _from_pretrained(AutoModelForCausalLM, path, dtype=dtype)
    _check_vocab(path, tok, model)
    return model, tok


def _check_vocab(folder: Path, tok, model) -> None:
    """Refuse a tokenizer with ids the model has no embedding row for: the first batch
    that used one (a pad token, an added special token) would fail with an IndexError
    deep in torch, and ``save_policy`` would pass the mismatch on."""
    rows = model.get_input_embeddings().num_embeddings
    top = max([len(tok) - 1, *(i for i in tok.all_special_ids if i is not None)])
    if top >= rows:
        raise CheckpointError(
            f"{folder}: the tokenizer has token ids up to {top} but the model's embedding has "
            f"{rows} rows (ids 0-{rows - 1}); save the tokenizer the model was built with"
        )


def check_checkpoint(folder: Path) -> None:
    """Raise naming the first file of a HF checkpoint folder that cannot be loaded
    (``config.json``, the safetensors weights, ``generation_config.json``), before
    transformers reads them: its
    own errors for a bad file are tracebacks that seldom say which file it was."""
    config_file = folder / "config.json"
    if not config_file.is_file():
        raise FileNotFoundError(
            f"no Hugging Face checkpoint at {folder} (config.json missing){_run_hint(folder)}"
        )
    config = read_json(config_file)
    if not isinstance(config, dict):
        raise CheckpointError(f"{config_file} is not a model config (a JSON object)")
    kind = config.get("model_type")
    if kind is None:
        raise CheckpointError(f"{config_file} has no model_type (which architecture it holds)")
    if not isinstance(kind, str) or kind not in CONFIG_MAPPING:
        raise CheckpointError(
            f"{config_file} names model type {kind!r}, which transformers does not know"
        )
    weights = sorted(folder.glob("*.safetensors"))
    if not weights and not any(folder.glob("*.bin")):
        raise FileNotFoundError(f"{folder / 'model.safetensors'} is missing (no model weights)")
    for file in weights:
        check_safetensors(file)
    _check_generation_config(folder / "generation_config.json")


def _check_generation_config(file: Path) -> None:
    """Refuse a generation config transformers cannot read, which it skips without a
    word, and with it the ends of turn it lists (``coplay.policies.chat.turn_ends``):
    answers would run on past them. Refuse ends that are not token ids too."""
    if not file.is_file():
        return
    config = read_json(file)
    if not isinstance(config, dict):
        raise CheckpointError(f"{file} is not a generation config (a JSON object)")
    ends = config.get("eos_token_id")
    ids = ends if isinstance(ends, list) else [ends]
    if not all(i is None or (type(i) is int and i >= 0) for i in ids):
        raise CheckpointError(
            f"{file}: eos_token_id must be a token id or a list of token ids, not {ends!r}"
        )


def _run_hint(folder: Path) -> str:
    """For a run directory given where a checkpoint is expected (``model.path``): the
    checkpoint to give instead, as ``coplay eval`` would resolve the run."""
    if not (folder / "checkpoints").is_dir():
        return ""
    try:
        return f"; {folder} is a run directory: give its checkpoint, {resolve_checkpoint(folder)}"
    except FileNotFoundError:  # a roster run's are one per role
        return f"; {folder} is a run directory: give a checkpoint under {folder / 'checkpoints'}"


def check_safetensors(file: Path) -> None:
    """Read the header of ``file``, which also checks that the file holds all its data."""
    stored_tensors(file)


def stored_tensors(file: Path) -> dict[str, tuple[str, tuple[int, ...]]]:
    """The dtype (safetensors' name: ``F32``, ``I64``...) and shape of every tensor of
    ``file``, from its header; a ``CheckpointError`` naming a file that has none."""
    try:
        with safe_open(str(file), framework="pt") as f:
            names = f.keys()  # a safetensors handle, not a mapping
            slices = {k: f.get_slice(k) for k in names}
            return {k: (t.get_dtype(), tuple(t.get_shape())) for k, t in slices.items()}
    except (SafetensorError, OSError) as err:
        raise CheckpointError(
            f"{file} is not a valid safetensors file (truncated or corrupt): {err}"
        ) from err


NOT_FLOATS = ("BOOL", "I", "U")
"""Beginnings of safetensors' names of the dtypes that are no floating point numbers."""


def check_stored_dtypes(file: Path, tensors: Mapping[str, torch.Tensor]) -> None:
    """Refuse integers or booleans in ``file`` where ``tensors`` (the model's, by the
    file's names) are floating point: transformers and peft cast them without a word,
    and a trained weight keeps only its integer part."""
    for key, (dtype, _) in stored_tensors(file).items():
        own = tensors.get(key)
        if own is not None and own.is_floating_point() and dtype.startswith(NOT_FLOATS):
            raise CheckpointError(
                f"{file} holds {key} as {dtype}, not as floating point numbers: the model's "
                f"weight is {str(own.dtype).removeprefix('torch.')}"
            )


def read_json(file: Path):
    try:
        return json.loads(file.read_bytes().decode("utf-8"))
    except ValueError as err:  # JSONDecodeError and UnicodeDecodeError
        raise CheckpointError(f"{file} is not valid JSON: {err}") from err


def one_line(err: BaseException) -> str:
    return " ".join(str(err).split()) or type(err).__name__


TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model", "vocab.json")
"""Any one of these means the folder has a tokenizer for transformers to read."""

GENERIC_TOKENIZERS = ("TokenizersBackend", "PreTrainedTokenizerFast")
"""``tokenizer_class`` names of a plain ``tokenizer.json`` tokenizer (transformers 5
and 4 spellings), as ``save_pretrained`` writes them for one built from a
``tokenizers.Tokenizer`` (coplay's tiny tokenizer, a locally built model's)."""


def _load_tokenizer(folder: Path):
    if not any((folder / f).is_file() for f in TOKENIZER_FILES):
        raise FileNotFoundError(f"{folder / 'tokenizer.json'} is missing (the tokenizer)")
    read = {
        name: read_json(folder / name)
        for name in ("tokenizer.json", "tokenizer_config.json")
        if (folder / name).is_file()
    }
    settings = read.get("tokenizer_config.json")
    # AutoTokenizer picks its class from config.json's model_type where it knows one
    # (Qwen2Tokenizer for qwen2), which adds that family's special tokens to a
    # tokenizer saved without them, at ids past the model's embedding: load the class
    # the folder saved instead.
    generic = isinstance(settings, dict) and settings.get("tokenizer_class") in GENERIC_TOKENIZERS
    try:
        return (PreTrainedTokenizerFast if generic else AutoTokenizer).from_pretrained(folder)
    except Exception as err:  # tokenizers and transformers raise many types for a bad file
        raise CheckpointError(f"{folder} has no readable tokenizer: {one_line(err)}") from err


TEMPLATE_FILES = ("chat_template.jinja", "chat_template.json", "tokenizer_config.json")
"""Where a folder keeps its chat template (transformers 5's file, then older ones)."""

PROBE = ({"role": "system", "content": "-"}, {"role": "user", "content": "-"})
"""The shortest prompt a policy renders: a system message and an observation."""


def _check_chat_template(folder: Path, tok) -> None:
    """Render ``PROBE`` with the tokenizer's chat template, as every prompt is (the
    system message folded into the user's for a template without a system role, as
    ``coplay.policies.chat`` does): a template that cannot is a fault of its file, not
    a traceback at the first prompt."""
    if not getattr(tok, "chat_template", None):
        return
    render = partial(tok.apply_chat_template, add_generation_prompt=True, tokenize=False)
    try:
        render(list(PROBE))
    except Exception:  # jinja raises many types
        try:
            render([{"role": "user", "content": "-\n\n-"}])
        except Exception as err:
            file = next((folder / f for f in TEMPLATE_FILES if (folder / f).is_file()), folder)
            raise CheckpointError(
                f"{file}: the chat template cannot render a prompt: {one_line(err)}"
            ) from err


def load_pretrained(cls, folder: str | Path, **kwargs):
    """``cls.from_pretrained(folder)`` with every fault of the folder's files raised as
    one ``CheckpointError`` (or ``FileNotFoundError``) that names the file."""
    check_checkpoint(Path(folder))
    return _from_pretrained(cls, Path(folder), **kwargs)


def _from_pretrained(cls, folder: Path, **kwargs):
    try:
        model, info = cls.from_pretrained(
            folder, output_loading_info=True, ignore_mismatched_sizes=True, **kwargs
        )
    except Exception as err:  # transformers raises many types for a bad folder
        raise CheckpointError(f"{folder} could not be loaded: {one_line(err)}") from err
    _check_loaded(folder, info, model.config)
    state = model.state_dict()
    for file in sorted(folder.glob("*.safetensors")):
        check_stored_dtypes(file, state)
    return model


_LAYER = re.compile(r"(?:^|\.)layers\.(\d+)\.")
"""A decoder layer's index in a weight's name."""


def _check_loaded(folder: Path, info: dict, config) -> None:
    """Refuse weights that do not fit ``config.json``: transformers would fill them in
    at random (and its own report of them is a table, logged as a warning)."""
    if info["mismatched_keys"]:
        key, saved, wanted = sorted(info["mismatched_keys"])[0]
        raise CheckpointError(
            f"{folder} holds weights of another size than its config.json says: {key} is "
            f"{list(saved)} in the weights but {list(wanted)} by the config "
            f"({len(info['mismatched_keys'])} tensors differ)"
        )
    # Layers the config has no place for (a config of fewer layers than its weights)
    # would be dropped, and the model load as a smaller one. Other unexpected weights
    # (a multimodal checkpoint's vision tower, loaded as a language model) may go.
    layers = getattr(config, "num_hidden_layers", None)
    extra = sorted(
        k
        for k in info["unexpected_keys"]
        if layers is not None and (m := _LAYER.search(k)) and int(m[1]) >= layers
    )
    if extra:
        raise CheckpointError(
            f"{folder} holds weights its config.json has no place for: {listed(extra)}"
        )
    if info["missing_keys"]:
        raise CheckpointError(
            f"{folder} lacks weights its config.json needs: {listed(info['missing_keys'])}"
        )


def listed(names: Iterable[str], shown: int = 3) -> str:
    """The first ``shown`` of ``names`` in order, and how many more there are."""
    names = sorted(names)
    more = f" and {len(names) - shown} more" if len(names) > shown else ""
    return ", ".join(names[:shown]) + more


def resolve_checkpoint(path: str | Path) -> Path:
    """A checkpoint folder from a checkpoint or a run directory (its final checkpoint,
    else its latest ``iter_N``)."""
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(
            f"{path} is neither a checkpoint nor a run directory with checkpoints: it does not exist"
        )
    if (path / "config.json").is_file():
        return path
    if (path / "model.safetensors").is_file() or (path / POLICY_FILE).is_file():
        raise FileNotFoundError(f"{path / 'config.json'} is missing (the model's config)")
    ckpts = path / "checkpoints"
    if (ckpts / "final" / "config.json").is_file():
        return ckpts / "final"
    # Only the names a run gives its checkpoints: a ``.tmp`` folder is half written and
    # an ``.old`` one replaced (``coplay.report.atomic``).
    found = sorted(
        (int(m[1]), p)
        for p in ckpts.glob("iter_*")
        if (m := INTERMEDIATE.fullmatch(p.name)) and (p / "config.json").is_file()
    )
    if found:
        return found[-1][1]
    raise FileNotFoundError(f"{path} is neither a checkpoint nor a run directory with checkpoints")
