"""The Hugging Face backend: a ``transformers`` causal LM run in this process.

Choices are scored with one prompt pass plus short continuations
(``choice_sequence_logps``) and renormalised over each decision's legal actions;
free text is sampled token by token from softmax(logits / temperature), optionally
cut by top-k and top-p (``sample_text``). Both run the kernels the learner's ``Scorer`` runs with
gradients, so its recomputed log-probs equal these up to float error.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import torch
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from coplay.backends.base import ChoiceItem, Generation, Sampling
from coplay.backends.memory import keep_freed_memory
from coplay.policies.choices import ChoiceRows, distinct_choice_table
from coplay.policies.sampling import check_sampling, sample_text


class HFBackend:
    """``model`` and ``tokenizer`` on the model's device; the learner trains ``model``
    in place, so its weights are always the latest, and ``load_weights`` of the
    model's own tensors only takes the new version (weights from elsewhere are copied)."""

    def __init__(
        self,
        model: PreTrainedModel,
        tokenizer: PreTrainedTokenizerBase,
        *,
        temperature: float = 1.0,
        max_new_tokens: int = 24,
        version: int = 0,
    ) -> None:
        check_sampling(temperature=temperature, top_k=0, top_p=1.0)
        keep_freed_memory()  # this process runs the model's passes: reuse their memory
        # Rollouts run in eval mode (the learner switches to training mode for its
        # update and back): no dropout, and KV caches even with activation checkpointing.
        self.model = model.eval()
        self.tokenizer = tokenizer
        self.temperature = temperature
        self.max_new_tokens = max_new_tokens
        self.version = version

    @property
    def pad_id(self) -> int:
        """Id that pads scored prompts (the tokenizer's, else 0); masked out."""
        return self.tokenizer.pad_token_id or 0

    @torch.no_grad()
    def choice_logps(self, items: Sequence[ChoiceItem]) -> ChoiceRows:
        """Constrained log-probs per item: log softmax over each item's actions; each
        distinct item scored once, and ``flat()`` reads them all in one gather."""
        table, inverse = distinct_choice_table(
            self.model, items, temperature=self.temperature, pad_id=self.pad_id
        )
        return ChoiceRows(table, inverse, items)

    @torch.no_grad()
    def generate(
        self,
        prompts: Sequence[Sequence[int]],
        *,
        generator: torch.Generator,
        sampling: Sampling | None = None,
        row_seeds: Sequence[int] | None = None,
    ) -> list[Generation]:
        """Ancestral sampling, each answer ending at EOS, a stop sequence or
        ``max_new_tokens``; ``sampling`` (the policy's: its scorer recomputes with the
        same top-k and top-p) cuts the distribution; ``row_seeds``: each answer's own
        draws (``Backend.generate``)."""
        answers = sample_text(
            self.model,
            prompts,
            max_new_tokens=self.max_new_tokens,
            temperature=self.temperature,
            eos_id=self.tokenizer.eos_token_id,
            pad_id=self.pad_id,
            generator=generator,
            row_seeds=row_seeds,
            **(sampling.kwargs() if sampling is not None else {}),
        )
        return [Generation(ids, lps) for ids, lps in answers]

    def load_weights(self, state_dict: Mapping[str, torch.Tensor], version: int) -> None:
        """Run ``state_dict``'s weights as ``version``: copied into the model (every key
        must match) unless they are the model's own tensors already; then nothing is
        copied or changed. (The learner's policy, training this model in place, does
        not call it: ``runs``.)"""
        if not _holds(self.model, state_dict):
            self.model.load_state_dict(state_dict)
        self.version = version

    def runs(self, model: torch.nn.Module) -> bool:
        """Whether ``model`` is the very module it samples from."""
        return model is self.model


def _holds(model: PreTrainedModel, state_dict: Mapping[str, torch.Tensor]) -> bool:
    """Whether ``state_dict`` is ``model``'s own: the same keys, each tensor in the same
    memory as the model's (data pointer, shape and dtype)."""
    own = model.state_dict()
    return own.keys() == state_dict.keys() and all(
        _where(t) == _where(own[k]) for k, t in state_dict.items()
    )


def _where(t: torch.Tensor) -> tuple:
    return t.data_ptr(), t.shape, t.dtype
