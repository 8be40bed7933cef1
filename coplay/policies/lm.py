"""Language-model policy over a generation backend, in two decision modes.

* ``choice``: every legal action's tokens are scored after the prompt and the action
  is sampled from the distribution renormalised over the legal actions
  (constrained decoding). The recorded log-probability is that of the constrained
  distribution, one unit per decision, and the learner recomputes exactly it.
  An observation without a legal list (``legal_actions is None``: a message turn in
  a game with talk) is answered by free text instead, so one episode, and one
  batch, can mix constrained choices and messages.
* ``text``: the model writes an answer in its answer format (``model.text``,
  ``coplay.policies.answer``: a reasoning block, then the action), prompted with the
  observation or its whole conversation (``coplay.policies.chat``). The recorded
  log-probs are per generated token under the sampling distribution.

A free-text answer to an observation without a legal list is a *message*. In text
mode it is the answer after its reasoning block, cleaned of control bytes; the game's
``parse_action`` turns it into the message it records (its own length and charset
limits). Choice mode answers message turns as it always has: the whole generated
text. With a legal list, a text-mode action is the one its format reads, or None
(invalid: the game's treatment).

The policy renders prompts and samples; the backend (``coplay.backends``, Hugging
Face ``transformers`` by default) runs the weights, and after every update the
learner hands it the trained weights as the next version (``publish``). The learner's
``Scorer`` (``policy.scorer``, ``coplay.policies.scorer``) recomputes the recorded
log-probs with the backend's kernels, so they equal the sampled ones up to float
error; a decision is scored by its own kind (choice when it records ``choice_ids``),
so batches may mix both. Exploration is a view (``sampling``), not a setting of the
policy.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Literal

import numpy as np
import torch
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from coplay.backends import Backend, ChoiceItem, HFBackend, make_backend
from coplay.backends.base import Sampling
from coplay.envs.actions import parse_action
from coplay.models.devices import HostCopy
from coplay.policies.chat import Prompter, turn_ends
from coplay.policies.choices import ChoiceRows
from coplay.policies.encoding import encode_rendered, encode_texts, hide_specials
from coplay.policies.prefixes import fold_common_prefix
from coplay.policies.scorer import Scored, Scorer
from coplay.policies.text import TextConfig, answer_text, cut_at_stop, cut_at_stop_text
from coplay.rollout.streams import SeatStream, exponentials
from coplay.rollout.streams import seeds as stream_seeds
from coplay.types import Decision, Observation

__all__ = ["ACTION_CUE", "LMPolicy", "Mode", "Scored", "explore_mixture"]

Mode = Literal["choice", "text"]
ACTION_CUE = "Action:"
"""Appended to a plain prompt; the action follows after one space."""


class LMPolicy:
    """The policy of a language model run by a backend (``coplay.backends``).

    The policy renders prompts, draws samples from its own generator and builds
    decisions; the backend scores and writes with the weights, which the learner
    trains in place (``model``) and hands to the backend after each update
    (``publish``).
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

    # ----------------------------------------------------------------- prompts
    def observation_key(self, obs: Observation) -> tuple:
        """What this policy's answer depends on: observations with equal keys get the
        same distribution, so exact evaluators ask once per key."""
        return (obs.text, obs.messages, obs.legal_actions)

    def prompt_ids(self, obs: Observation) -> tuple[int, ...]:
        """Token ids of the prompt for ``obs`` (chat template when the tokenizer has one);
        in text mode, with the answer format's instruction and, in chat context, the
        conversation so far."""
        if self.mode == "text":
            return self.prompter.prompt(obs)
        key = _prompt_key(obs)
        if key not in self._prompt_cache:
            self._prompt_cache[key] = tuple(self._encode_prompt(obs))
        return self._prompt_cache[key]

    def _encode_prompt(self, obs: Observation) -> list[int]:
        text, head = self._prompt_text(obs)
        return head + encode_rendered(self.tokenizer, text)

    def _prompt_text(self, obs: Observation) -> tuple[str, list[int]]:
        """The text a prompt is encoded from, and the ids put before it (BOS)."""
        texts, head = self._prompt_texts([obs])
        return texts[0], head

    def _prompt_texts(self, observations: Sequence[Observation]) -> tuple[list[str], list[int]]:
        """The texts prompts are encoded from, and the ids put before each (BOS): the
        tokenizer's settings read once for the batch."""
        tok = self.tokenizer
        if getattr(tok, "chat_template", None):
            # Render to text, then encode: the template already holds any special tokens.
            # A game's text that spells one (a player's message) stays text.
            texts = [
                tok.apply_chat_template(
                    [{"role": r, "content": hide_specials(tok, c)} for r, c in (o.messages or ())]
                    or [{"role": "user", "content": hide_specials(tok, o.text)}],
                    add_generation_prompt=True,
                    tokenize=False,
                )
                for o in observations
            ]
            return texts, []
        bos = [tok.bos_token_id] if tok.bos_token_id is not None else []
        cue = "\n" + ACTION_CUE
        return [hide_specials(tok, o.text.rstrip("\n")) + cue for o in observations], bos

    def _encode_new_prompts(self, observations: Sequence[Observation]) -> None:
        """Tokenise the prompts not cached yet in one call (``encode_texts``): a game with
        many positions (tic-tac-toe) meets new ones all run."""
        new = {_prompt_key(o): o for o in observations}
        todo = {k: o for k, o in new.items() if k not in self._prompt_cache}
        if len(todo) < 2:
            return
        texts, head = self._prompt_texts(list(todo.values()))
        for key, ids in zip(todo, encode_texts(self.tokenizer, texts), strict=True):
            self._prompt_cache[key] = tuple(head + list(ids))

    def action_ids(self, action: str) -> tuple[int, ...]:
        """Token ids of an action string as the continuation of a prompt."""
        if action not in self._action_cache:
            ids = self.tokenizer(" " + action, add_special_tokens=False)["input_ids"]
            self._action_cache[action] = tuple(ids)
        return self._action_cache[action]

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

    @torch.no_grad()
    def action_probs(self, observations: Sequence[Observation]) -> list[dict[str, float]]:
        """Exact constrained distribution over legal actions (choice mode semantics).

        A text-mode policy refuses: what it plays is what it writes, which this
        distribution is not; its distribution is estimated by sampling answers."""
        if self.mode == "text":
            raise ValueError(
                "exact evaluation reads the choice distribution over the legal actions, "
                "which is not what a model.mode=text policy plays; evaluate it by sampling"
            )
        items = [self._choice_item(o) for o in observations]
        probs = _flat(self.backend.choice_logps(items)).exp().tolist()
        out, at = [], 0
        for obs in observations:
            legal = obs.legal_actions or ()
            out.append(dict(zip(legal, probs[at : at + len(legal)], strict=True)))
            at += len(legal)
        return out

    def _choice_item(self, obs: Observation) -> ChoiceItem:
        key = (obs.text, obs.messages, obs.legal_actions)
        item = self._item_cache.get(key)
        if item is None:
            item = self._item_cache[key] = self._build_choice_item(obs)
        return item

    def _build_choice_item(self, obs: Observation) -> ChoiceItem:
        if not obs.legal_actions:
            raise ValueError(
                f"a choice needs at least one legal action, but the observation of player "
                f"{obs.player} in {obs.game!r} lists {obs.legal_actions!r}"
            )
        prompt, actions = self.prompt_ids(obs), tuple(self.action_ids(a) for a in obs.legal_actions)
        self._check_positions(obs, len(prompt) + max(map(len, actions)), "its longest action")
        return fold_common_prefix(prompt, actions)

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

    @torch.no_grad()
    def act_forced(
        self, observations: Sequence[Observation], indices: Sequence[int]
    ) -> list[Decision]:
        """Decisions that play legal action ``indices[i] % len(legal)`` of each
        observation, each scored as if the policy had sampled it (no behaviour
        log-probs): Monte Carlo exploring starts train such a move as the policy's own."""
        if len(observations) != len(indices):
            raise ValueError(f"got {len(observations)} observations but {len(indices)} indices")
        if self.mode != "choice":
            raise ValueError(
                "a forced move picks a listed legal action: it needs model.mode=choice"
            )
        for o in observations:
            if not o.legal_actions:
                raise ValueError(
                    f"a forced move picks a listed legal action, but player {o.player} in "
                    f"{o.game!r} has none listed here (a free-text turn)"
                )
        return self._act_choice(observations, forced=indices)

    def _act_choice(
        self,
        observations: Sequence[Observation],
        forced: Sequence[int] | None = None,
        rngs: Sequence[SeatStream] | None = None,
    ) -> list[Decision]:
        if not observations:
            return []
        scores = self._choice_scores(observations, forced is None)
        return self._choices(observations, scores, forced=forced, rngs=rngs)

    def _choice_scores(self, observations: Sequence[Observation], free: bool = True) -> _Scores:
        """The pass over ``observations``' choices, queued; its log-probs copied to the
        host behind it (and the exploration mixture's, for a ``free`` choice)."""
        self._encode_new_prompts(observations)
        items = [self._choice_item(o) for o in observations]
        logps = self.backend.choice_logps(items)
        explore = self._explore if free else 0.0  # a told move is not explored
        # Row by row where exploration mixes: the op's float rounding depends on length.
        mix = torch.cat([explore_mixture(lp, explore) for lp in logps]) if explore else None
        return _Scores(items, HostCopy(_flat(logps)), None if mix is None else HostCopy(mix))

    def _choices(
        self,
        observations: Sequence[Observation],
        scores: _Scores,
        forced: Sequence[int] | None = None,
        rngs: Sequence[SeatStream] | None = None,
    ) -> list[Decision]:
        """The decisions of a pass (``_choice_scores``): sampled, or the ``forced`` moves."""
        items, explore = scores.items, scores.mix is not None
        sizes = [len(choices) for _, choices in items]
        lp_flat = scores.logps.get()  # (N,) every item's actions in turn
        mix_flat = scores.mix.get() if explore else lp_flat
        if forced is None and rngs is not None:
            picks = sample_rows_streamed(mix_flat.exp(), sizes, rngs)
        elif forced is None:
            picks = sample_rows(mix_flat.exp(), sizes, self.generator)
        else:
            picks = [f % k for f, k in zip(forced, sizes, strict=True)]
        starts = np.cumsum([0, *sizes[:-1]]).tolist()
        lp_at = lp_flat.tolist()
        mix_at = mix_flat.tolist() if explore else lp_at
        decisions = []
        for obs, (prompt, choices), idx, start in zip(
            observations, items, picks, starts, strict=True
        ):
            action = obs.legal_actions[idx]
            decisions.append(
                Decision.fast(
                    text=action,
                    action=action,
                    policy_id=self.policy_id,
                    policy_version=self.version,
                    prompt_ids=prompt,
                    response_ids=choices[idx],
                    logprobs=(lp_at[start + idx],),
                    choice_ids=choices,
                    choice_index=idx,
                    counterfactual_prompt_ids=self._counterfactual_prompts(obs, choices),
                    behavior_logprobs=(mix_at[start + idx],) if explore else None,
                )
            )
        return decisions

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

    def _counterfactual_prompts(
        self, obs: Observation, choices: tuple[tuple[int, ...], ...]
    ) -> tuple[tuple[int, ...], ...]:
        """Prompts of ``obs.counterfactuals``, folded like the actual one (same choices)."""
        if obs.counterfactuals and obs.messages is not None:
            raise ValueError(
                f"the observation of player {obs.player} in {obs.game!r} has counterfactuals "
                "and a chat form; counterfactuals are texts, so the chat form must be None"
            )
        out = []
        for text in obs.counterfactuals:
            alt = replace(obs, text=text, counterfactuals=())
            prompt, alt_choices = self._choice_item(alt)
            if alt_choices != choices:
                raise ValueError(
                    f"a counterfactual observation of player {obs.player} in {obs.game!r} "
                    "folds its actions differently from the actual one"
                )
            out.append(prompt)
        return tuple(out)

    def _act_text(
        self,
        observations: Sequence[Observation],
        rngs: Sequence[SeatStream] | None = None,
    ) -> list[Decision]:
        if not observations:
            return []
        prompts = [self.prompt_ids(o) for o in observations]
        for obs, prompt in zip(observations, prompts, strict=True):
            answer = f"its answer (model.max_new_tokens={self.max_new_tokens})"
            self._check_positions(obs, len(prompt) + self.max_new_tokens, answer)
        # Drawn from the streams, each answer depends on its own row alone: a plan split
        # between Ray workers writes what one process writes (each stream advances once).
        row_seeds = None if rngs is None else stream_seeds(rngs)
        draws = {"generator": self.generator, "row_seeds": row_seeds}
        # Ends of turn besides the EOS the backend stops at: one-token stops.
        ends = tuple((i,) for i in self.ends if i != self.tokenizer.eos_token_id)
        if self.mode != "text":  # choice mode's message turns, as they have always been
            stops = {"sampling": Sampling(stop=ends)} if ends else {}
            responses = self.backend.generate(prompts, **draws, **stops)
            return [
                self._decision(o, p, ids, lps, None)
                for o, p, (ids, lps) in zip(observations, prompts, responses, strict=True)
            ]
        sampling = self.text.sampling(self.tokenizer)
        sampling = replace(sampling, stop=sampling.stop + ends)
        responses = self.backend.generate(prompts, sampling=sampling, **draws)
        decisions = []
        for obs, prompt, (ids, lps) in zip(observations, prompts, responses, strict=True):
            ids, lps = cut_at_stop(ids, lps, sampling.stop)
            ids, lps = cut_at_stop_text(ids, lps, self.text.stop, self._answer_text)
            decisions.append(self._decision(obs, prompt, ids, lps, self.prompter.format))
        return decisions

    def _answer_text(self, ids: Sequence[int]) -> str:
        return answer_text(self.tokenizer, ids, self.ends)

    def _decision(self, obs, prompt, ids, lps, answer_format) -> Decision:
        """The decision of a written answer; without a format (choice mode's message
        turns) the action is the whole text, or the last bracketed legal action."""
        text = self._answer_text(ids)
        if answer_format is None:
            action = text if obs.legal_actions is None else parse_action(text, obs.legal_actions)
            well_formed = None
        else:
            parsed = answer_format.parse(text, obs.legal_actions)
            action, well_formed = parsed.action, parsed.well_formed
        return Decision(
            text=text,
            action=action,
            policy_id=self.policy_id,
            policy_version=self.version,
            prompt_ids=prompt,
            response_ids=tuple(ids),
            logprobs=tuple(lps),
            well_formed=well_formed,
        )


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


@dataclass(frozen=True)
class _Scores:
    """A queued choice pass: its items, and its log-probs (and exploration mixture's,
    where it explores) on their way to the host."""

    items: list[ChoiceItem]
    logps: HostCopy
    mix: HostCopy | None


def _flat(logps: Sequence[torch.Tensor]) -> torch.Tensor:
    """A backend's per-item log-probs as one tensor, items in turn (a backend other than
    the bundled ones may return a plain list)."""
    return logps.flat() if isinstance(logps, ChoiceRows) else torch.cat(list(logps))


def _check_explore(epsilon: float, mode: Mode) -> None:
    if not 0.0 <= epsilon < 1.0:
        raise ValueError(f"exploration epsilon must be in [0, 1), got {epsilon}")
    if epsilon and mode != "choice":
        raise ValueError("exploration mixes uniform choices: it needs model.mode=choice")


def explore_mixture(logp: torch.Tensor, epsilon: float) -> torch.Tensor:
    """Log-probs of (1 - epsilon) * exp(logp) + epsilon / k over k choices: every legal
    action keeps at least epsilon / k, where a collapsed policy would never try it."""
    if not epsilon:
        return logp
    k = logp.shape[-1]
    return torch.logaddexp(
        logp + math.log1p(-epsilon), torch.full_like(logp, math.log(epsilon / k))
    )


def sample_rows(probs: torch.Tensor, sizes: Sequence[int], generator: torch.Generator) -> list[int]:
    """One index per row of a flat (N,) tensor of rows of ``sizes``, drawn with those
    (unnormalised) probabilities: the draws of ``torch.multinomial(row, 1)`` row by
    row, in one call. Multinomial draws one exponential per entry and takes the
    argmax of p / q (the Gumbel trick); the generator's exponentials come in order,
    so the rows drawn together consume them exactly as the rows drawn apart.
    """
    q = torch.empty_like(probs).exponential_(1, generator=generator)
    return _argmax_rows(probs / q, sizes)


def sample_rows_streamed(
    probs: torch.Tensor, sizes: Sequence[int], streams: Sequence[SeatStream]
) -> list[int]:
    """``sample_rows`` with row ``i``'s exponentials drawn from ``streams[i]`` (the
    Gumbel trick again), all rows in one vectorised draw."""
    q = torch.from_numpy(exponentials(streams, sizes)).to(probs.dtype)
    return _argmax_rows(probs / q, sizes)


def _argmax_rows(ratios: torch.Tensor, sizes: Sequence[int]) -> list[int]:
    """Per row of a flat (N,) tensor of rows of ``sizes``, the index of its largest
    entry (entries are >= 0)."""
    sizes_t = torch.tensor(sizes)
    rows = torch.repeat_interleave(torch.arange(len(sizes)), sizes_t)
    cols = torch.arange(len(ratios)) - torch.repeat_interleave(sizes_t.cumsum(0) - sizes_t, sizes_t)
    table = ratios.new_full((len(sizes), max(sizes)), -1.0)  # below any ratio p / q >= 0
    table[rows, cols] = ratios
    return table.argmax(1).tolist()


def _merge(
    listed: Sequence[bool], choices: list[Decision], texts: list[Decision]
) -> list[Decision]:
    """Interleave the two kinds of decisions back into observation order."""
    it_choice, it_text = iter(choices), iter(texts)
    return [next(it_choice) if c else next(it_text) for c in listed]


def _prompt_key(obs: Observation) -> Hashable:
    """What a choice prompt is built from: the text, or with a chat template the
    observation's messages where it has them (its text alone otherwise)."""
    return obs.text if not obs.messages else (obs.text, obs.messages)
