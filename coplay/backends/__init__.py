"""Generation backends: the engines a language-model policy runs its model on.

A backend is named by a key of ``BACKENDS``; ``make_backend`` builds one over a
Hugging Face model and tokenizer. Adding an engine (say vLLM) is one class that
follows the ``Backend`` protocol and one entry here: the policy, the rollout and the
learner do not change. ``"vllm"`` (``coplay.backends.vllm``) imports the ``vllm``
package only when chosen, so coplay runs without vLLM installed.

A backend that starts an engine has settings (``model.engine`` in a config), checked
when the config loads by the record ``ENGINE_SETTINGS`` names for it and handed to its
factory as ``engine``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel

from coplay.backends.base import Backend, BackendFactory, ChoiceItem, Generation
from coplay.backends.hf import HFBackend
from coplay.backends.vllm import VLLMSettings


def _vllm(
    model: Any,
    tokenizer: Any,
    *,
    temperature: float,
    max_new_tokens: int,
    engine: VLLMSettings | None = None,
) -> Backend:
    """vLLM's offline engine (``coplay.backends.vllm``); starting it needs vLLM."""
    from coplay.backends.vllm import VLLMBackend

    return VLLMBackend(
        model, tokenizer, temperature=temperature, max_new_tokens=max_new_tokens, engine=engine
    )


BACKENDS: dict[str, BackendFactory] = {"hf": HFBackend, "vllm": _vllm}
"""Backend factories by name."""

ENGINE_SETTINGS: dict[str, type[BaseModel]] = {"vllm": VLLMSettings}
"""The settings record of each backend that starts an engine; the others take none."""


def check_backend(name: str) -> str:
    """``name`` if ``BACKENDS`` has it, else a ValueError listing the names it has."""
    if name not in BACKENDS:
        raise ValueError(f"unknown model backend {name!r}: use one of {', '.join(BACKENDS)}")
    return name


def engine_settings(name: str, values: Mapping[str, Any] | None) -> BaseModel | None:
    """The backend ``name``'s engine settings from ``values`` (its defaults where a key
    is missing), or None for a backend without an engine; a ValueError names a key or
    value it does not take."""
    record = ENGINE_SETTINGS.get(check_backend(name))
    if record is None:
        if values:
            raise ValueError(
                f"model.engine ({', '.join(map(str, values))}) sets an engine, but "
                f"model.backend={name} starts none: use one of {', '.join(ENGINE_SETTINGS)}"
            )
        return None
    return record.model_validate(dict(values or {}))


def make_backend(
    name: str,
    model: Any,
    tokenizer: Any,
    *,
    temperature: float,
    max_new_tokens: int,
    engine: Mapping[str, Any] | None = None,
) -> Backend:
    """The backend ``name`` over ``model`` and ``tokenizer``, its engine (if it starts
    one) set by ``engine``."""
    factory = BACKENDS[check_backend(name)]
    settings = engine_settings(name, engine)
    extra = {} if settings is None else {"engine": settings}
    return factory(
        model, tokenizer, temperature=temperature, max_new_tokens=max_new_tokens, **extra
    )


__all__ = [
    "BACKENDS",
    "Backend",
    "BackendFactory",
    "ChoiceItem",
    "ENGINE_SETTINGS",
    "Generation",
    "HFBackend",
    "check_backend",
    "engine_settings",
    "make_backend",
]
