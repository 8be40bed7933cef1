"""Generation backends: the engines a language-model policy runs its model on.

A backend is named by a key of ``BACKENDS``; ``make_backend`` builds one over a
Hugging Face model and tokenizer. Adding an engine (say vLLM) is one class that
follows the ``Backend`` protocol and one entry here: the policy, the rollout and the
learner do not change. ``"vllm"`` (``coplay.backends.vllm``) is imported only when
chosen, so coplay runs without vLLM installed.
"""

from __future__ import annotations

from typing import Any

from coplay.backends.base import Backend, BackendFactory, ChoiceItem, Generation
from coplay.backends.hf import HFBackend


def _vllm(model: Any, tokenizer: Any, *, temperature: float, max_new_tokens: int) -> Backend:
    """vLLM's offline engine (``coplay.backends.vllm``); its import needs vLLM."""
    from coplay.backends.vllm import VLLMBackend

    return VLLMBackend(model, tokenizer, temperature=temperature, max_new_tokens=max_new_tokens)


BACKENDS: dict[str, BackendFactory] = {"hf": HFBackend, "vllm": _vllm}
"""Backend factories by name."""


def check_backend(name: str) -> str:
    """``name`` if ``BACKENDS`` has it, else a ValueError listing the names it has."""
    if name not in BACKENDS:
        raise ValueError(f"unknown model backend {name!r}: use one of {', '.join(BACKENDS)}")
    return name


def make_backend(
    name: str, model: Any, tokenizer: Any, *, temperature: float, max_new_tokens: int
) -> Backend:
    """The backend ``name`` over ``model`` and ``tokenizer``."""
    return BACKENDS[check_backend(name)](
        model, tokenizer, temperature=temperature, max_new_tokens=max_new_tokens
    )


__all__ = [
    "BACKENDS",
    "Backend",
    "BackendFactory",
    "ChoiceItem",
    "Generation",
    "HFBackend",
    "check_backend",
    "make_backend",
]
