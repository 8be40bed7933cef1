"""The generation seam: what a policy asks of the engine that runs its model.

A ``Backend`` holds the weights a policy acts with and answers the two questions a
game asks of them: how likely is each listed action (``choice_logps``), and what
would the model write (``generate``). The learner pushes new weights into it with
``load_weights``, which also stamps them with a version that every decision records.
Prompt rendering stays with the policy; the backend lends it its tokenizer.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
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


@dataclass(frozen=True)
class Sampling:
    """Sampling parameters beyond the temperature, passed to ``sample_text``."""

    top_p: float = 1.0
    top_k: int = 0
    stop: tuple[tuple[int, ...], ...] = field(default_factory=tuple)

    def kwargs(self) -> dict[str, object]:
        """Those that differ from plain ancestral sampling, as keyword arguments."""
        out: dict[str, object] = {}
        if self.top_p < 1.0:
            out["top_p"] = self.top_p
        if self.top_k:
            out["top_k"] = self.top_k
        if self.stop:
            out["stop"] = self.stop
        return out


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

    def choice_logps(self, items: Sequence[ChoiceItem]) -> Sequence[torch.Tensor]:
        """Per item, the log-probs of its actions renormalised over them (shape (k,)
        for k actions), without gradients. A ``coplay.policies.choices.ChoiceRows``
        lets the policy read them all as one flat tensor."""
        ...

    def generate(
        self,
        prompts: Sequence[Sequence[int]],
        *,
        generator: torch.Generator,
        sampling: Sampling | None = None,
        row_seeds: Sequence[int] | None = None,
    ) -> list[Generation]:
        """One sampled answer per prompt, in order, drawing from ``generator`` with
        ``sampling``'s parameters (None: plain ancestral sampling). With ``row_seeds``
        answer i draws from ``row_seeds[i]`` alone (``generator`` unused), so it does not
        depend on the other prompts of the call: how a plan is split between Ray
        workers then changes no answer."""
        ...

    def load_weights(self, state_dict: Mapping[str, torch.Tensor], version: int) -> None:
        """Run ``state_dict``'s weights from now on, as version ``version``."""
        ...

    def runs(self, model: Any) -> bool:
        """Whether it samples from ``model``'s own tensors (in this process, the very
        module the learner trains in place): a new version of them then needs no
        ``load_weights``, only the new ``version``."""
        ...


class BackendFactory(Protocol):
    """Builds a backend over a Hugging Face model and tokenizer (its first weights); a
    backend that starts an engine also takes ``engine=`` (its ``ENGINE_SETTINGS``)."""

    def __call__(
        self, model: Any, tokenizer: Any, *, temperature: float, max_new_tokens: int
    ) -> Backend: ...
