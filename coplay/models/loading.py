"""Build, save and load language-model policies; checkpoints are plain HF folders.

A checkpoint folder holds what ``save_pretrained`` writes for the model and the
tokenizer, so ``AutoModelForCausalLM.from_pretrained(folder)`` loads it without
coplay, plus ``coplay_policy.json`` with how the policy decides (mode, temperature),
the game it was trained on (``game``, ``game_params``) and its prompt format, so that
``coplay eval CHECKPOINT`` needs no ``--game``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, get_args

import torch
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StrictFloat,
    StrictInt,
    StrictStr,
    ValidationError,
    field_validator,
    model_validator,
)
from safetensors import SafetensorError, safe_open
from transformers import (
    CONFIG_MAPPING,
    AutoModelForCausalLM,
    AutoTokenizer,
    PreTrainedTokenizerFast,
)

from coplay.backends import check_backend, engine_settings
from coplay.models.devices import set_host_threads
from coplay.models.tiny import TinyModelConfig, build_tiny_model
from coplay.models.tokenizer import train_tokenizer
from coplay.policies.lm import LMPolicy
from coplay.policies.text import TextConfig

POLICY_FILE = "coplay_policy.json"

INTERMEDIATE = re.compile(r"iter_([0-9]+)")
"""Names of a run's intermediate checkpoints (``checkpoints/iter_000004``)."""


class CheckpointError(ValueError):
    """A checkpoint file that cannot be loaded; the message names the file and the fault."""


Dtype = Literal["float32", "bfloat16", "float16"]
"""The weight dtypes a policy is built or loaded in."""


class ModelConfig(BaseModel):
    """Which language model plays, and how it decides."""

    model_config = ConfigDict(extra="forbid")

    path: str | None = Field(
        None, description="Local HF checkpoint folder; None builds the tiny default model."
    )
    tiny: TinyModelConfig = Field(default_factory=TinyModelConfig)
    mode: Literal["choice", "text"] = Field(
        "choice", description="'choice' scores legal actions; 'text' generates and parses."
    )
    temperature: float = Field(1.0, gt=0.0, description="Sampling temperature.")
    max_new_tokens: int = Field(24, gt=0, description="Free-text mode: longest answer.")
    dtype: Dtype = Field(
        "float32", description="Weights dtype when loading model.path (bfloat16 on GPUs)."
    )
    device: str = Field("cpu", description="torch device, e.g. 'cpu' or 'cuda'.")
    threads: int | None = Field(
        None,
        gt=0,
        description="torch's intra-op threads in the run's process; None: one with a CUDA "
        "device (unless OMP_NUM_THREADS is set), torch's default (one per core) otherwise.",
    )
    backend: str = Field(
        "hf", description="Engine that runs the model in play: a name in coplay.backends.BACKENDS."
    )
    engine: dict[str, Any] = Field(
        default_factory=dict,
        description="Settings of the backend's engine (backend vllm: kv_cache_gb, "
        "gpu_memory_utilization, max_model_len, enforce_eager); hf starts none.",
    )
    text: TextConfig = Field(
        default_factory=TextConfig,
        description="Text mode: answer format, sampling, chat context and format reward.",
    )

    @field_validator("device")
    @classmethod
    def _a_device(cls, device: str) -> str:
        if not re.fullmatch(r"cpu|mps|(cuda|xpu)(:\d+)?", device):
            raise ValueError("expected cpu, cuda, cuda:N, mps or xpu")
        return device

    @field_validator("backend")
    @classmethod
    def _known_backend(cls, name: str) -> str:
        return check_backend(name)

    @model_validator(mode="after")
    def _engine_of_backend(self) -> ModelConfig:
        try:
            engine_settings(self.backend, self.engine)
        except ValidationError as err:  # one line naming the key, not pydantic's report
            first = err.errors()[0]
            where = ".".join(map(str, first["loc"]))
            raise ValueError(f"model.engine.{where}: {first['msg']}") from None
        return self

    @model_validator(mode="after")
    def _chat_needs_text(self) -> ModelConfig:
        if self.text.context == "chat" and self.mode != "text":
            raise ValueError(
                "model.text.context=chat is a context of written answers: it needs model.mode=text"
            )
        return self


def build_policy(
    cfg: ModelConfig,
    *,
    corpus: Iterable[str],
    seed: int,
    actions: Sequence[str] = (),
    policy_id: str = "learner",
) -> LMPolicy:
    """The learner's policy: a local checkpoint, or the tiny model with a tokenizer
    trained on ``corpus`` (game text) in which each of ``actions`` is one token."""
    if cfg.path:
        model, tok = _load_hf(cfg.path, cfg.dtype)
    else:
        text = cfg.mode == "text"  # a tokenizer that can write, with a chat template
        tok = train_tokenizer(corpus, vocab_size=cfg.tiny.vocab_size, actions=actions, text=text)
        model = build_tiny_model(cfg.tiny, vocab_size=len(tok), seed=seed)
    check_device(cfg.device)
    set_host_threads(cfg.device, cfg.threads)
    model.to(cfg.device)
    return LMPolicy(
        model,
        tok,
        policy_id=policy_id,
        mode=cfg.mode,
        temperature=cfg.temperature,
        max_new_tokens=cfg.max_new_tokens,
        seed=seed,
        backend=cfg.backend,
        engine=cfg.engine,
        text=cfg.text,
    )


DEVICE_COUNTS = {
    "cpu": lambda: 1,
    "cuda": torch.cuda.device_count,
    "mps": lambda: int(torch.backends.mps.is_available()),
    "xpu": lambda: torch.xpu.device_count() if hasattr(torch, "xpu") else 0,
}
"""How many devices of each kind ``model.device`` accepts this torch sees here."""


def check_device(device: str) -> None:
    """Refuse a device this machine's torch cannot run on, in one line, before a model
    is moved there (torch's own errors are tracebacks or asserts)."""
    kind, _, index = device.partition(":")
    count = DEVICE_COUNTS[kind]()
    if int(index or 0) >= count:
        seen = f"no {kind} device" if count == 0 else f"{count} {kind} device(s)"
        raise ValueError(f"model.device is {device}, but torch sees {seen} here")


def _load_hf(path: str | Path, dtype: str | torch.dtype):
    path = Path(path)
    check_checkpoint(path)
    tok = _load_tokenizer(path)
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
    top = max(len(tok) - 1, *(i for i in tok.all_special_ids if i is not None))
    if top >= rows:
        raise CheckpointError(
            f"{folder}: the tokenizer has token ids up to {top} but the model's embedding has "
            f"{rows} rows (ids 0-{rows - 1}); save the tokenizer the model was built with"
        )


def check_checkpoint(folder: Path) -> None:
    """Raise naming the first file of a HF checkpoint folder that cannot be loaded
    (``config.json``, the safetensors weights), before transformers reads them: its
    own errors for a bad file are tracebacks that seldom say which file it was."""
    config_file = folder / "config.json"
    if not config_file.is_file():
        raise FileNotFoundError(
            f"no Hugging Face checkpoint at {folder} (config.json missing){_run_hint(folder)}"
        )
    config = _read_json(config_file)
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
        _check_safetensors(file)


def _run_hint(folder: Path) -> str:
    """For a run directory given where a checkpoint is expected (``model.path``): the
    checkpoint to give instead, as ``coplay eval`` would resolve the run."""
    if not (folder / "checkpoints").is_dir():
        return ""
    try:
        return f"; {folder} is a run directory: give its checkpoint, {resolve_checkpoint(folder)}"
    except FileNotFoundError:  # a roster run's are one per role
        return f"; {folder} is a run directory: give a checkpoint under {folder / 'checkpoints'}"


def _check_safetensors(file: Path) -> None:
    """Read the header of ``file``, which also checks that the file holds all its data."""
    try:
        with safe_open(str(file), framework="pt"):
            pass
    except (SafetensorError, OSError) as err:
        raise CheckpointError(
            f"{file} is not a valid safetensors file (truncated or corrupt): {err}"
        ) from err


def _read_json(file: Path):
    try:
        return json.loads(file.read_bytes().decode("utf-8"))
    except ValueError as err:  # JSONDecodeError and UnicodeDecodeError
        raise CheckpointError(f"{file} is not valid JSON: {err}") from err


def _one_line(err: BaseException) -> str:
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
        name: _read_json(folder / name)
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
        raise CheckpointError(f"{folder} has no readable tokenizer: {_one_line(err)}") from err


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
        raise CheckpointError(f"{folder} could not be loaded: {_one_line(err)}") from err
    _check_loaded(folder, info, model.config)
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
            f"{folder} holds weights its config.json has no place for: {', '.join(extra[:3])}"
            + (f" and {len(extra) - 3} more" if len(extra) > 3 else "")
        )
    if info["missing_keys"]:
        missing = sorted(info["missing_keys"])
        raise CheckpointError(
            f"{folder} lacks weights its config.json needs: {', '.join(missing[:3])}"
            + (f" and {len(missing) - 3} more" if len(missing) > 3 else "")
        )


@dataclass(frozen=True)
class PlayedGame:
    """The game a checkpoint was trained on, as the run config names it."""

    name: str
    params: Mapping[str, object] = field(default_factory=dict)


PromptFormat = Literal["chat_template", "plain"]
"""How observations become prompts (``LMPolicy._encode_prompt``): the tokenizer's chat
template, or the observation text followed by ``Action:``."""


def prompt_format(tokenizer) -> PromptFormat:
    """The prompt format a policy with ``tokenizer`` uses."""
    return "chat_template" if getattr(tokenizer, "chat_template", None) else "plain"


def save_policy(policy: LMPolicy, folder: str | Path, *, game: PlayedGame | None = None) -> Path:
    """Write the model, tokenizer, decision settings and (when given) the game it plays
    to ``folder``."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    policy.model.save_pretrained(folder)
    policy.tokenizer.save_pretrained(folder)
    meta: dict[str, Any] = {
        "mode": policy.mode,
        "temperature": policy.temperature,
        "max_new_tokens": policy.max_new_tokens,
        "policy_id": policy.policy_id,
        "version": policy.version,
        "prompt_format": prompt_format(policy.tokenizer),
        "text": policy.text.model_dump(),
    }
    if game is not None:
        meta |= {"game": game.name, "game_params": dict(game.params)}
    write_meta(folder, meta)
    return folder


def read_meta(folder: str | Path) -> dict[str, Any]:
    """The ``coplay_policy.json`` record of a checkpoint folder ({} when it has none)."""
    file = Path(folder) / POLICY_FILE
    if not file.is_file():
        return {}
    meta = _read_json(file)
    if not isinstance(meta, dict):
        raise CheckpointError(f"{file} is not a JSON object of policy settings")
    try:
        PolicyRecord.model_validate(meta)
    except ValidationError as err:
        first = err.errors()[0]
        where = ".".join(map(str, first["loc"]))
        raise CheckpointError(f"{file}: {where}: {first['msg']}") from err
    return meta


class PolicyRecord(BaseModel):
    """The fields of ``coplay_policy.json`` that loading reads, as they must be; other
    keys (the game, its parameters, roles) are read where they are used."""

    model_config = ConfigDict(extra="allow")

    policy_id: StrictStr | None = None
    mode: Literal["choice", "text"] | None = None
    temperature: StrictFloat | StrictInt | None = Field(None, gt=0)
    max_new_tokens: StrictInt | None = Field(None, gt=0)
    version: StrictInt | None = Field(None, ge=0)
    text: TextConfig | None = None


def write_meta(folder: str | Path, meta: Mapping[str, Any]) -> None:
    """Write ``meta`` as the ``coplay_policy.json`` record of ``folder``."""
    (Path(folder) / POLICY_FILE).write_text(json.dumps(dict(meta), indent=2))


def checkpoint_game(folder: str | Path) -> PlayedGame | None:
    """The game a checkpoint (or adapter) folder records, None for older checkpoints;
    a ``CheckpointError`` naming the file for a game that cannot be played as recorded
    (checked as a run config's game is: a user's own game module is not imported)."""
    from coplay.envs.probe import check_game

    meta = read_meta(folder)
    if "game" not in meta:
        return None
    game, params = meta["game"], meta.get("game_params") or {}
    file = Path(folder) / POLICY_FILE
    if not isinstance(game, str) or not isinstance(params, dict):
        raise CheckpointError(f"{file}: game must be a name and game_params a mapping")
    try:
        check_game(game, params)
    except (ValueError, TypeError) as err:
        raise CheckpointError(f"{file}: {_one_line(err)}") from err
    return PlayedGame(game, params)


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


def _saved_dtype(folder: str | Path) -> Dtype:
    """The dtype ``config.json`` says the weights were saved in (``dtype`` since
    transformers 5, ``torch_dtype`` before); float32 where it names none we load."""
    config = _read_json(Path(folder) / "config.json")
    if not isinstance(config, dict):
        return "float32"
    saved = config.get("dtype") or config.get("torch_dtype")
    return saved if saved in get_args(Dtype) else "float32"


def load_policy(
    path: str | Path,
    *,
    seed: int = 0,
    device: str | torch.device = "cpu",
    dtype: str | torch.dtype | None = None,
) -> LMPolicy:
    """Load a saved policy from a checkpoint folder or a run directory, in ``dtype``
    (None: the dtype it was saved in, so that a bf16 learner's snapshot plays as the
    learner did) on ``device``."""
    folder = resolve_checkpoint(path)
    meta = read_meta(folder)
    model, tok = _load_hf(folder, dtype or _saved_dtype(folder))
    model.to(device)
    model.eval()
    # The backend is not saved with a policy: it is how a run executes (what engine the
    # machine has), not part of the weights, and a checkpoint stays a plain folder any
    # run can load. A reloaded policy (a frozen league or PSRO opponent, an evaluated
    # checkpoint) runs on "hf" in this process: its weights never change, so nothing
    # has to be pushed to an engine.
    policy = LMPolicy(
        model,
        tok,
        policy_id=meta.get("policy_id", folder.name),
        mode=meta.get("mode", "choice"),
        temperature=meta.get("temperature", 1.0),
        max_new_tokens=meta.get("max_new_tokens", 24),
        seed=seed,
        # A checkpoint from before answer formats read text answers leniently.
        text=TextConfig.model_validate(meta.get("text", {"answer": "free"})),
    )
    policy.version = int(meta.get("version", 0))
    return policy
