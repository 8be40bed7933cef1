"""The run config's model section, and the learner's policy built from it.

``model.path`` names a local Hugging Face checkpoint to train; without one the tiny
default model is built with a tokenizer trained on the game's text, so that a run
needs no download.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from typing import Any, Literal

import torch
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from coplay.backends import check_backend, engine_settings
from coplay.models.devices import set_host_threads
from coplay.models.hf_folder import load_hf
from coplay.models.tiny import TinyModelConfig, build_tiny_model
from coplay.models.tokenizer import train_tokenizer
from coplay.policies.lm import LMPolicy
from coplay.policies.text import TextConfig

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
    temperature: float = Field(
        1.0, gt=0.0, allow_inf_nan=False, description="Sampling temperature."
    )
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
        model, tok = load_hf(cfg.path, cfg.dtype)
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
