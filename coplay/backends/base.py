"""The generation seam: what a policy asks of the engine that runs its model.

A ``Backend`` holds the weights a policy acts with and answers the two questions a
game asks of them: how likely is each listed action (``choice_logps``), and what
would the model write (``generate``). The learner pushes new weights into it with
``load_weights``, which also stamps them with a version that every decision records.
Prompt rendering stays with the policy; the backend lends it its tokenizer.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple, Protocol

import torch

ChoiceItem = tuple[tuple[int, ...], tuple[tuple[int, ...], ...]]
"""One constrained decision: the prompt's token ids and each legal action's ids (as
``LMPolicy`` builds them, their common prefix folded into the prompt)."""


class Generation(NamedTuple):
    """Free text written after a prompt: its token ids and the log-prob of each under
    the sampling distribution (softmax of logits / temperature)."""

    ids: tuple[int, ...]
    logprobs: tuple[float, ...]


class Backend(Protocol):
    """An engine that runs one policy's weights (in this process or elsewhere)."""

    tokenizer: Any
    """The tokenizer prompts are rendered with (a ``transformers`` tokenizer)."""
    temperature: float
    """Logits are divided by it before every softmax, in scoring and in sampling."""
    max_new_tokens: int
    """Longest free-text answer ``generate`` writes."""
    version: int
    """Version of the weights it runs (updates so far); each decision records it."""

    def choice_logps(self, items: Sequence[ChoiceItem]) -> list[torch.Tensor]:
        """Per item, the log-probs of its actions renormalised over them (shape (k,)
        for k actions), without gradients."""
        ...

    def generate(
        self, prompts: Sequence[Sequence[int]], *, generator: torch.Generator
    ) -> list[Generation]:
        """One sampled answer per prompt, in order, drawing from ``generator``."""
        ...

    def load_weights(self, state_dict: Mapping[str, torch.Tensor], version: int) -> None:
        """Run ``state_dict``'s weights from now on, as version ``version``."""
        ...


class BackendFactory(Protocol):
    """Builds a backend over a Hugging Face model and tokenizer (its first weights)."""

    def __call__(
        self, model: Any, tokenizer: Any, *, temperature: float, max_new_tokens: int
    ) -> Backend: ...
