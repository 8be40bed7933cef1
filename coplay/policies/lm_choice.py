"""Choice mode of ``LMPolicy``, mixed into it (``coplay.policies.lm``).

Every legal action's tokens are scored after the prompt (folded to their common
prefix) and one is drawn from the distribution renormalised over them, or the move
told (``act_forced``); the decision records its constrained log-prob, and in an
exploring view that of the mixture with uniform choices (``explore_mixture``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np
import torch

from coplay.backends import ChoiceItem
from coplay.models.devices import HostCopy
from coplay.policies.choices import ChoiceRows
from coplay.policies.prefixes import fold_common_prefix
from coplay.rollout.streams import SeatStream, exponentials
from coplay.types import Decision, Observation

__all__ = ["ChoiceMixin", "explore_mixture"]


class ChoiceMixin:
    """The choices of ``LMPolicy``: they read the policy's backend, generator,
    exploration share and item cache, which ``LMPolicy`` sets, and its prompts
    (``PromptMixin``)."""

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
        logps = _flat(self.backend.choice_logps(items)).cpu()
        _refuse_nan(logps, observations, [len(cs) for _, cs in items])
        probs = logps.exp().tolist()
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
        _refuse_nan(lp_flat, observations, sizes)
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


@dataclass(frozen=True)
class _Scores:
    """A queued choice pass: its items, and its log-probs (and exploration mixture's,
    where it explores) on their way to the host."""

    items: list[ChoiceItem]
    logps: HostCopy
    mix: HostCopy | None


def _refuse_nan(
    logps: torch.Tensor, observations: Sequence[Observation], sizes: Sequence[int]
) -> None:
    """One error line where a choice's log-probs (a flat (N,) host tensor, rows of
    ``sizes``) are NaN: sampled, NaN would pick the first action and record a NaN
    log-prob, which the learner then trains on without a word."""
    nan = torch.isnan(logps)
    if not nan.any():
        return
    row = int(np.searchsorted(np.cumsum(sizes), int(nan.nonzero()[0, 0]), side="right"))
    obs = observations[row]
    raise ValueError(
        f"the model's log-probs of the legal actions of player {obs.player} in {obs.game!r} "
        "are NaN: its weights or logits are not finite (a diverged update, or a temperature "
        "so small that logits / temperature overflow)"
    )


def _flat(logps: Sequence[torch.Tensor]) -> torch.Tensor:
    """A backend's per-item log-probs as one tensor, items in turn (a backend other than
    the bundled ones may return a plain list)."""
    return logps.flat() if isinstance(logps, ChoiceRows) else torch.cat(list(logps))


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
