"""Prompt and action ids of ``LMPolicy``, mixed into it (``coplay.policies.lm``).

Choice mode's prompt is the observation rendered with the tokenizer's chat template
when it has one (the plain text and ``ACTION_CUE`` otherwise), each distinct one
tokenised once and kept, and so are each action's ids; text mode's prompts come from
its ``Prompter`` (``coplay.policies.chat``).
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence

from coplay.policies.encoding import encode_rendered, encode_texts, hide_specials
from coplay.types import Observation

__all__ = ["ACTION_CUE", "PromptMixin"]

ACTION_CUE = "Action:"
"""Appended to a plain prompt; the action follows after one space."""


class PromptMixin:
    """The prompts of ``LMPolicy``: they read the policy's mode, tokenizer, prompter
    and prompt caches, which ``LMPolicy`` sets."""

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


def _prompt_key(obs: Observation) -> Hashable:
    """What a choice prompt is built from: the text, or with a chat template the
    observation's messages where it has them (its text alone otherwise)."""
    return obs.text if not obs.messages else (obs.text, obs.messages)
