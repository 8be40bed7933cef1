"""Language-model policy over a generation backend, in two decision modes.

* ``choice`` (``coplay.policies.lm_choice``): every legal action's tokens are scored
  after the prompt and the action is sampled from the distribution renormalised over
  the legal actions (constrained decoding). The recorded log-probability is that of
  the constrained distribution, one unit per decision, and the learner recomputes
  exactly it. An observation without a legal list (``legal_actions is None``: a
  message turn in a game with talk) is answered by free text instead, so one episode,
  and one batch, can mix constrained choices and messages.
* ``text`` (``coplay.policies.lm_text``): the model writes an answer in its answer
  format (``model.text``, ``coplay.policies.answer``: a reasoning block, then the
  action), prompted with the observation or its whole conversation
  (``coplay.policies.chat``). The recorded log-probs are per generated token under
  the sampling distribution.

The policy renders prompts (``coplay.policies.lm_prompts``) and samples; the backend
(``coplay.backends``, Hugging Face ``transformers`` by default) runs the weights, and
after every update the learner hands it the trained weights as the next version
(``publish``). The learner's ``Scorer`` (``policy.scorer``, ``coplay.policies.scorer``)
recomputes the recorded log-probs with the backend's kernels, so they equal the
sampled ones up to float error; a decision is scored by its own kind (choice when it
records ``choice_ids``), so batches may mix both. Exploration is a view
(``sampling``), not a setting of the policy.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Hashable, Mapping, Sequence
from typing import Any, Literal

import torch
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from coplay.backends import Backend, ChoiceItem, HFBackend, make_backend
from coplay.policies.chat import Prompter, turn_ends
from coplay.policies.lm_choice import ChoiceMixin
from coplay.policies.lm_prompts import PromptMixin
from coplay.policies.lm_text import TextMixin
from coplay.policies.scorer import Scorer
from coplay.policies.text import TextConfig
from coplay.rollout.streams import SeatStream
from coplay.types import Decision, Observation

__all__ = ["LMPolicy", "Mode"]

Mode = Literal["choice", "text"]


class LMPolicy(PromptMixin, ChoiceMixin, TextMixin):
    """The policy of a language model run by a backend (``coplay.backends``).

    The policy renders prompts, draws samples from its own generator and builds
    decisions; the backend scores and writes with the weights, which the learner
    trains in place (``model``) and hands to the backend after each update
    (``publish``). Its prompts (``PromptMixin``), choices (``ChoiceMixin``) and written
    answers (``TextMixin``) are mixed in from modules of their own, and read the
    attributes set here.
    """

    def __init__(
        self,
        model: PreTrainedModel,
        tokenizer: PreTrainedTokenizerBase,
        *,
        policy_id: str = "learner",
        mode: Mode = "choice",
        temperature: float = 1.0,
        max_new_tokens: int = 24,
        seed: int = 0,
        backend: str = "hf",
        engine: Mapping[str, Any] | None = None,
        text: TextConfig | None = None,
    ) -> None:
        if mode not in ("choice", "text"):
            raise ValueError(f"policy mode must be 'choice' or 'text', got {mode!r}")
        self.backend: Backend = make_backend(
            backend,
            model,
            tokenizer,
            temperature=temperature,
            max_new_tokens=max_new_tokens,
            engine=engine,
        )
        self.backend_name = backend
        """Its key in ``BACKENDS``: copies that play (roster learners, LoRA role views)
        are built with the same engine, at the same settings (``engine``)."""
        self.engine = dict(engine or {})
        self.policy_id = policy_id
        self.mode: Mode = mode
        self.text = text or TextConfig()
        """Answer format, sampling, context and format reward of text mode."""
        self._prompter: Prompter | None = None
        self._explore = 0.0
        self.generator = torch.Generator().manual_seed(seed)
        self._prompt_cache: dict[Hashable, tuple[int, ...]] = {}
        self._action_cache: dict[str, tuple[int, ...]] = {}
        self._item_cache: dict[tuple, ChoiceItem] = {}
        """Folded prompt and actions by (text, messages, legal actions): what a choice
        scores, tokenised once per distinct observation."""
        self._positions = learned_positions(model)
        self.ends = turn_ends(tokenizer, getattr(model, "generation_config", None))
        """The ids that end a written answer: the tokenizer's EOS and every other end of
        turn the checkpoint's generation config lists (``turn_ends``)."""

    # ------------------------------------------------------- backend settings
    @property
    def model(self) -> PreTrainedModel:
        """The Hugging Face model behind the backend (trained, copied and saved in place)."""
        model = getattr(self.backend, "model", None)
        if model is None:
            raise AttributeError(f"a {type(self.backend).__name__} holds no model in this process")
        return model

    @model.setter
    def model(self, model: PreTrainedModel) -> None:
        # A copy of a policy (``copy.copy``) shares its backend; giving the copy its own
        # weights (a frozen KL reference) must not swap the original's, so the copy
        # gets a backend of its own, at the same settings and version. It is an
        # ``HFBackend`` whatever ``backend_name`` says: the weights given here live in
        # this process, and such a copy is the learner's KL reference, which only
        # scores (``scorer``, on ``model``) and whose weights the magnet moves in place;
        # an engine elsewhere would serve weights nobody samples and miss those moves.
        self.backend = HFBackend(
            model,
            self.tokenizer,
            temperature=self.temperature,
            max_new_tokens=self.max_new_tokens,
            version=self.version,
        )
        self._positions = learned_positions(model)

    @property
    def tokenizer(self) -> PreTrainedTokenizerBase:
        return self.backend.tokenizer

    @property
    def temperature(self) -> float:
        return self.backend.temperature

    @property
    def max_new_tokens(self) -> int:
        return self.backend.max_new_tokens

    @property
    def play_settings(self) -> dict[str, Any]:
        """How this policy plays (mode, sampling, text settings), as ``LMPolicy``'s
        keyword arguments: for a policy of other weights that must play alike (a LoRA
        role or its base, a roster learner), so that no setting is left out."""
        return {
            "mode": self.mode,
            "temperature": self.temperature,
            "max_new_tokens": self.max_new_tokens,
            "text": self.text,
        }

    @property
    def version(self) -> int:
        """Version of the weights (updates so far): the backend's, shared by every
        sampling view of this policy."""
        return self.backend.version

    @version.setter
    def version(self, version: int) -> None:
        self.backend.version = version

    def publish(self, version: int | None = None) -> None:
        """Hand the trained weights (``model``) to the backend as ``version`` (default:
        the next one): after every update, and on resume with the restored version.
        An in-process backend that already runs these tensors copies nothing."""
        version = self.version + 1 if version is None else version
        if self.backend.runs(self.model):  # trained in place: only the version is new
            self.backend.version = version
        else:
            self.backend.load_weights(self.model.state_dict(), version)

    @property
    def explore(self) -> float:
        """Share of uniform choices mixed into sampling: 0 but in a ``sampling`` view."""
        return self._explore

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    @property
    def wants_history(self) -> bool:
        """Whether its prompts read the player's conversation (``Observation.history``):
        text mode in chat context."""
        return self.mode == "text" and self.text.context == "chat"

    @property
    def prompter(self) -> Prompter:
        """Text mode's prompts (built on first use, from the backend's tokenizer)."""
        if self._prompter is None:
            self._prompter = Prompter(self.tokenizer, self.text, self.max_new_tokens, self.ends)
        return self._prompter

    @property
    def scorer(self) -> Scorer:
        """The learner's differentiable scoring of this policy's decisions."""
        cut = {"top_k": self.text.top_k, "top_p": self.text.top_p} if self.mode == "text" else {}
        return Scorer(self.model, self.temperature, self.tokenizer.pad_token_id or 0, **cut)

    # ------------------------------------------------------------------ acting
    @torch.no_grad()
    def act(self, observations: Sequence[Observation]) -> list[Decision]:
        """One decision per observation, in order.

        Choice mode scores the legal actions where the game lists them and writes
        free text where it does not (``legal_actions is None``); text mode always writes.
        """
        return self._act(observations, None)

    @torch.no_grad()
    def act_streamed(
        self, observations: Sequence[Observation], streams: Sequence[SeatStream]
    ) -> list[Decision]:
        """``act`` with each choice drawn from its own stream in ``streams`` (its seat's,
        ``coplay.rollout.streams``), so a game's draws do not depend on the other
        games of the batch. A written answer draws from a seed taken from its own
        stream, so it too is the same whatever else the batch holds."""
        if len(streams) != len(observations):
            raise ValueError(f"got {len(observations)} observations but {len(streams)} streams")
        return self._act(observations, streams)

    @torch.no_grad()
    def submit(
        self, observations: Sequence[Observation], streams: Sequence[SeatStream] | None = None
    ) -> Callable[[], list[Decision]]:
        """``act`` (``act_streamed`` with ``streams``) in two steps: the model's pass is
        queued now, and the decisions, drawn when the returned function is called, are
        those ``act`` would return then. On a GPU the host is free in between (the
        engine steps other games: ``play_episodes(waves=)``). Only a batch of choices
        is queued; free text is written, and drawn, when read."""
        if streams is not None and len(streams) != len(observations):
            raise ValueError(f"got {len(observations)} observations but {len(streams)} streams")
        if not observations:
            return list
        if self.mode == "text" or not all(o.legal_actions is not None for o in observations):
            return lambda: self._act(observations, streams)
        scores = self._choice_scores(observations)
        return lambda: self._choices(observations, scores, rngs=streams)

    def _act(
        self,
        observations: Sequence[Observation],
        rngs: Sequence[SeatStream] | None,
    ) -> list[Decision]:
        if not observations:
            return []
        if self.mode == "text":
            return self._act_text(observations, rngs)
        listed = [o.legal_actions is not None for o in observations]
        own = rngs or [None] * len(observations)
        return _merge(
            listed,
            self._act_choice(
                [o for o, c in zip(observations, listed, strict=True) if c],
                rngs=[r for r, c in zip(own, listed, strict=True) if c] if rngs else None,
            ),
            self._act_text(
                [o for o, c in zip(observations, listed, strict=True) if not c],
                [r for r, c in zip(own, listed, strict=True) if not c] if rngs else None,
            ),
        )

    def _check_positions(self, obs: Observation, length: int, answer: str) -> None:
        """Refuse a prompt that, with ``answer``, runs past a learned position table:
        there the model would fail with an IndexError deep in torch."""
        if self._positions is not None and length > self._positions:
            raise ValueError(
                f"the prompt of player {obs.player} in {obs.game!r} with {answer} takes "
                f"{length} tokens, but the model has {self._positions} positions "
                "(max_position_embeddings); shorten it (model.max_new_tokens, "
                "model.text.max_context_tokens) or use a model with more positions"
            )

    def sampler_state(self) -> torch.Tensor:
        """Its sampling generator's state, which a resumed run restores."""
        return self.generator.get_state()

    def load_sampler_state(self, state: torch.Tensor) -> None:
        self.generator.set_state(state)

    def sampling(self, explore: float = 0.0) -> LMPolicy:
        """A view of this policy that draws its choices from (1 - explore) * policy +
        explore * uniform over the legal actions, each decision recording the mixture's
        log-prob as ``behavior_logprobs`` (none when ``explore`` is 0).

        The view shares this policy's backend (weights and version), generator, prompt
        caches and id, so sampling from it draws what the policy itself would draw;
        the policy stays on-policy for evaluation."""
        _check_explore(explore, self.mode)
        view = copy.copy(self)
        view._explore = explore
        return view


def learned_positions(model: PreTrainedModel) -> int | None:
    """How many positions ``model`` has where they are a learned table (GPT-2's
    ``wpe``), past which a position is an IndexError; None for rotary (or ALiBi)
    models, which run on past ``max_position_embeddings``, only worse."""
    # The config's attribute map reads GPT-2's n_positions as max_position_embeddings.
    limit = getattr(getattr(model, "config", None), "max_position_embeddings", None)
    if not isinstance(limit, int) or not hasattr(model, "get_input_embeddings"):
        return None
    tokens = model.get_input_embeddings()
    tables = (m for m in model.modules() if isinstance(m, torch.nn.Embedding) and m is not tokens)
    return limit if any(t.num_embeddings == limit for t in tables) else None


def _check_explore(epsilon: float, mode: Mode) -> None:
    if not 0.0 <= epsilon < 1.0:
        raise ValueError(f"exploration epsilon must be in [0, 1), got {epsilon}")
    if epsilon and mode != "choice":
        raise ValueError("exploration mixes uniform choices: it needs model.mode=choice")


def _merge(
    listed: Sequence[bool], choices: list[Decision], texts: list[Decision]
) -> list[Decision]:
    """Interleave the two kinds of decisions back into observation order."""
    it_choice, it_text = iter(choices), iter(texts)
    return [next(it_choice) if c else next(it_text) for c in listed]
