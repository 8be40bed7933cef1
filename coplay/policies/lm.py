"""Language-model policy on Hugging Face ``transformers``, in two decision modes.

* ``choice``: every legal action's tokens are scored after the prompt and the action
  is sampled from the distribution renormalised over the legal actions
  (constrained decoding). The recorded log-probability is that of the constrained
  distribution, one unit per decision, and the learner recomputes exactly it.
  An observation without a legal list (``legal_actions is None``: a message turn in
  a game with talk) is answered by free text instead, so one episode, and one
  batch, can mix constrained choices and messages.
* ``text``: the model writes freely; a parser extracts the bracketed action. The
  recorded log-probs are per generated token under the sampling distribution.

A free-text answer to an observation without a legal list is a *message*: its
action is the generated text itself (at most ``max_new_tokens`` tokens), always
valid; the game's ``parse_action`` turns it into the message it records (its own
length and charset limits). With a legal list, the action is the last bracketed
legal action in the text, or None (invalid).

Rollout and learner share one scoring function per kind of decision, so the
log-probs the learner recomputes equal the sampled ones up to float error; a
decision is scored by its own kind (choice when it records ``choice_ids``), so
batches may mix both.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from typing import Literal

import torch
import torch.nn.functional as F
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from coplay.envs.actions import parse_action
from coplay.policies.scoring import (
    choice_sequence_logps,
    fold_common_prefix,
    sample_text,
    token_logps,
)
from coplay.types import Decision, Observation

Mode = Literal["choice", "text"]
ACTION_CUE = "Action:"
"""Appended to a plain prompt; the action follows after one space."""


@dataclass(frozen=True)
class Scored:
    """Per-unit log-probs and entropies of a batch of decisions, padded to (B, T)."""

    logp: torch.Tensor  # (B, T)
    entropy: torch.Tensor  # (B, T)
    mask: torch.Tensor  # (B, T) float, 1 for real units
    dists: tuple[torch.Tensor | None, ...] = ()
    """Per row, the log-distribution over the decision's legal actions (choices only;
    None for free text)."""


class LMPolicy:
    """A causal LM that acts in text games; the learner trains ``model`` in place."""

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
    ) -> None:
        if mode not in ("choice", "text"):
            raise ValueError(f"policy mode must be 'choice' or 'text', got {mode!r}")
        if temperature <= 0:
            raise ValueError(f"temperature must be > 0, got {temperature}")
        self.model = model
        self.tokenizer = tokenizer
        self.policy_id = policy_id
        self.version = 0
        self.mode: Mode = mode
        self.temperature = temperature
        self.max_new_tokens = max_new_tokens
        self.explore = 0.0
        """Share of uniform choices mixed into sampling; set only inside ``exploring``."""
        self.generator = torch.Generator().manual_seed(seed)
        self._prompt_cache: dict[str, tuple[int, ...]] = {}
        self._action_cache: dict[str, tuple[int, ...]] = {}

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    # ----------------------------------------------------------------- prompts
    def observation_key(self, obs: Observation) -> tuple:
        """What this policy's answer depends on: observations with equal keys get the
        same distribution, so exact evaluators ask once per key."""
        return (obs.text, obs.messages, obs.legal_actions)

    def prompt_ids(self, obs: Observation) -> tuple[int, ...]:
        """Token ids of the prompt for ``obs`` (chat template when the tokenizer has one)."""
        key = obs.text
        if key not in self._prompt_cache:
            self._prompt_cache[key] = tuple(self._encode_prompt(obs))
        return self._prompt_cache[key]

    def _encode_prompt(self, obs: Observation) -> list[int]:
        tok = self.tokenizer
        if getattr(tok, "chat_template", None):
            messages = [{"role": r, "content": c} for r, c in (obs.messages or ())] or [
                {"role": "user", "content": obs.text}
            ]
            # Render to text, then encode: the template already holds any special tokens.
            text = tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
            return list(tok(text, add_special_tokens=False)["input_ids"])
        ids = tok(obs.text.rstrip("\n") + "\n" + ACTION_CUE, add_special_tokens=False)
        bos = [tok.bos_token_id] if tok.bos_token_id is not None else []
        return bos + list(ids["input_ids"])

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
        if not observations:
            return []
        if self.mode == "text":
            return self._act_text(observations)
        listed = [o.legal_actions is not None for o in observations]
        return _merge(
            listed,
            self._act_choice([o for o, c in zip(observations, listed, strict=True) if c]),
            self._act_text([o for o, c in zip(observations, listed, strict=True) if not c]),
        )

    @torch.no_grad()
    def action_probs(self, observations: Sequence[Observation]) -> list[dict[str, float]]:
        """Exact constrained distribution over legal actions (choice mode semantics)."""
        items = [self._choice_item(o) for o in observations]
        logps = self._choice_logps(items)
        out = []
        for obs, lp in zip(observations, logps, strict=True):
            probs = lp.exp().tolist()
            out.append(dict(zip(obs.legal_actions or (), probs, strict=True)))
        return out

    def _choice_item(self, obs: Observation) -> tuple[tuple[int, ...], tuple[tuple[int, ...], ...]]:
        if not obs.legal_actions:
            raise ValueError(
                f"a choice needs at least one legal action, but the observation of player "
                f"{obs.player} in {obs.game!r} lists {obs.legal_actions!r}"
            )
        return fold_common_prefix(
            self.prompt_ids(obs), tuple(self.action_ids(a) for a in obs.legal_actions)
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
        self, observations: Sequence[Observation], forced: Sequence[int] | None = None
    ) -> list[Decision]:
        if not observations:
            return []
        items = [self._choice_item(o) for o in observations]
        logps = self._choice_logps(items)
        explore = self.explore if forced is None else 0.0  # a told move is not explored
        decisions = []
        for i, (obs, (prompt, choices), lp) in enumerate(
            zip(observations, items, logps, strict=True)
        ):
            mix = explore_mixture(lp.cpu(), explore)
            if forced is None:
                idx = int(torch.multinomial(mix.exp(), 1, generator=self.generator))
            else:
                idx = forced[i] % len(choices)
            action = obs.legal_actions[idx]
            decisions.append(
                Decision(
                    text=action,
                    action=action,
                    policy_id=self.policy_id,
                    policy_version=self.version,
                    prompt_ids=prompt,
                    response_ids=choices[idx],
                    logprobs=(float(lp[idx]),),
                    choice_ids=choices,
                    choice_index=idx,
                    counterfactual_prompt_ids=self._counterfactual_prompts(obs, choices),
                    behavior_logprobs=(float(mix[idx]),) if explore else None,
                )
            )
        return decisions

    @contextmanager
    def exploring(self, epsilon: float):
        """Within the block, choices are drawn from (1 - epsilon) * policy + epsilon *
        uniform over the legal actions, each decision recording the mixture's
        log-prob as ``behavior_logprobs``; evaluation outside it stays on-policy."""
        if not 0.0 <= epsilon < 1.0:
            raise ValueError(f"exploration epsilon must be in [0, 1), got {epsilon}")
        if epsilon and self.mode != "choice":
            raise ValueError("exploration mixes uniform choices: it needs model.mode=choice")
        saved, self.explore = self.explore, epsilon
        try:
            yield self
        finally:
            self.explore = saved

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

    def _act_text(self, observations: Sequence[Observation]) -> list[Decision]:
        if not observations:
            return []
        prompts = [self.prompt_ids(o) for o in observations]
        responses = sample_text(
            self.model,
            prompts,
            max_new_tokens=self.max_new_tokens,
            temperature=self.temperature,
            eos_id=self.tokenizer.eos_token_id,
            pad_id=self.tokenizer.pad_token_id,
            generator=self.generator,
        )
        decisions = []
        for obs, prompt, (ids, lps) in zip(observations, prompts, responses, strict=True):
            text = self.tokenizer.decode(ids, skip_special_tokens=True)
            action = text if obs.legal_actions is None else parse_action(text, obs.legal_actions)
            decisions.append(
                Decision(
                    text=text,
                    action=action,
                    policy_id=self.policy_id,
                    policy_version=self.version,
                    prompt_ids=prompt,
                    response_ids=ids,
                    logprobs=lps,
                )
            )
        return decisions

    # ----------------------------------------------------------------- scoring
    def _choice_logps(self, items) -> list[torch.Tensor]:
        """Constrained log-probs per item: log softmax over each item's actions."""
        return _rows(self._choice_table(items), items)

    def _choice_table(self, items) -> torch.Tensor:
        """(B, K) constrained log-probs, row i over item i's actions, -inf past its last.

        One padded log-softmax instead of one per item: the per-item ops (and their
        backward nodes) cost more than the model on small games."""
        seq_lp = choice_sequence_logps(
            self.model, items, temperature=self.temperature, pad_id=self.tokenizer.pad_token_id or 0
        )  # (N,) over all items' actions, flattened
        sizes = torch.tensor([len(cs) for _, cs in items])
        rows = torch.repeat_interleave(torch.arange(len(items)), sizes)
        cols = torch.arange(len(rows)) - torch.repeat_interleave(sizes.cumsum(0) - sizes, sizes)
        table = seq_lp.new_full((len(items), int(sizes.max())), -math.inf)
        table = table.index_put((rows.to(table.device), cols.to(table.device)), seq_lp)
        return F.log_softmax(table, dim=1)

    def score(self, decisions: Sequence[Decision]) -> Scored:
        """Differentiable per-unit log-probs and entropies of recorded decisions.

        Each decision is scored as it was sampled: a constrained choice (it records
        ``choice_ids``) as one unit, free text as one unit per generated token. Rows
        keep the order of ``decisions``; units are left-aligned, padded to (B, T).
        """
        listed = [bool(d.choice_ids) for d in decisions]
        choice = self._score_choice([d for d, c in zip(decisions, listed, strict=True) if c])
        text = self._score_text([d for d, c in zip(decisions, listed, strict=True) if not c])
        parts = [p for p in (choice, text) if p is not None]
        if not parts:
            raise ValueError("score needs at least one decision")
        width = max(p.logp.shape[1] for p in parts)
        # Rows of both kinds stacked [choices; texts], then put back in batch order.
        order = [i for i, c in enumerate(listed) if c] + [i for i, c in enumerate(listed) if not c]
        back = torch.argsort(torch.tensor(order, device=parts[0].logp.device))
        logp, ent, mask = (
            torch.cat([F.pad(getattr(p, f), (0, width - p.logp.shape[1])) for p in parts])[back]
            for f in ("logp", "entropy", "mask")
        )
        stacked = [d for p in parts for d in (p.dists or (None,) * len(p.logp))]
        return Scored(
            logp=logp, entropy=ent, mask=mask, dists=tuple(stacked[i] for i in back.tolist())
        )

    def _score_choice(self, decisions: Sequence[Decision]) -> Scored | None:
        if not decisions:
            return None
        items = [(d.prompt_ids, d.choice_ids) for d in decisions]
        table = self._choice_table(items)  # (B, K)
        rows = torch.arange(len(decisions), device=table.device)
        index = torch.tensor([d.choice_index for d in decisions], device=table.device)
        chosen = table[rows, index]
        # Padding is -inf; zeroed before the product so 0 * -inf never makes a NaN.
        ent = -(table.exp() * table.masked_fill(table.isinf(), 0.0)).sum(1)
        ones = torch.ones(len(decisions), 1, device=chosen.device)
        dists = tuple(_rows(table, items))
        return Scored(logp=chosen[:, None], entropy=ent[:, None], mask=ones, dists=dists)

    def _score_text(self, decisions: Sequence[Decision]) -> Scored | None:
        if not decisions:
            return None
        pairs = [(d.prompt_ids, d.response_ids) for d in decisions]
        logp, ent, mask = token_logps(self.model, pairs, temperature=self.temperature)
        return Scored(logp=logp, entropy=ent, mask=mask)


def _rows(table: torch.Tensor, items) -> list[torch.Tensor]:
    """Each item's row of a padded choice table, cut to its own actions."""
    return [table[i, : len(cs)] for i, (_, cs) in enumerate(items)]


def explore_mixture(logp: torch.Tensor, epsilon: float) -> torch.Tensor:
    """Log-probs of (1 - epsilon) * exp(logp) + epsilon / k over k choices: every legal
    action keeps at least epsilon / k, where a collapsed policy would never try it."""
    if not epsilon:
        return logp
    k = logp.shape[-1]
    return torch.logaddexp(
        logp + math.log1p(-epsilon), torch.full_like(logp, math.log(epsilon / k))
    )


def _merge(
    listed: Sequence[bool], choices: list[Decision], texts: list[Decision]
) -> list[Decision]:
    """Interleave the two kinds of decisions back into observation order."""
    it_choice, it_text = iter(choices), iter(texts)
    return [next(it_choice) if c else next(it_text) for c in listed]
