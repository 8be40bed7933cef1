"""Written answers of ``LMPolicy``, mixed into it (``coplay.policies.lm``).

A free-text answer to an observation without a legal list is a *message*. In text
mode it is the answer after its reasoning block, cleaned of control bytes; the game's
``parse_action`` turns it into the message it records (its own length and charset
limits). Choice mode answers message turns as it always has: the whole generated
text. With a legal list, a text-mode action is the one its format reads, or None
(invalid: the game's treatment).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from coplay.backends.base import Sampling
from coplay.envs.actions import parse_action
from coplay.policies.text import answer_text, cut_at_stop, cut_at_stop_text
from coplay.rollout.streams import SeatStream
from coplay.rollout.streams import seeds as stream_seeds
from coplay.types import Decision, Observation

__all__ = ["TextMixin"]


class TextMixin:
    """The written answers of ``LMPolicy``: they read the policy's backend, generator,
    text settings and ends of turn, which ``LMPolicy`` sets, and its prompts
    (``PromptMixin``)."""

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
