"""How much a listener's action depends on the message it heard.

At each action turn that follows another player's message (a *listener state*), the
policy answers K times with the conversation as it was, and K times with that message
replaced by one from another game (the same replacement in every earlier observation
of the conversation that shows it). The total variation distance between the two
answer distributions (invalid answers are one more outcome) is the state's
dependence on the message: 0 for a policy that ignores what it hears, up to 1 for one
whose answer the message decides.

Two finite samples of one distribution differ too (about sqrt(outcomes / K)), so the
same distance between two independent K-answer samples with the real message, the
*noise floor*, is measured beside it; what the message moves is the excess. The
intervals are percentile bootstraps over the listener states.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from coplay.types import Decision, Episode, Observation, Policy

INVALID = "<invalid>"
"""The outcome of an answer that names no legal action."""


@dataclass(frozen=True)
class ListenerState:
    """An action turn after another player's message, and the same turn with the
    message swapped for one said in another game."""

    real: Observation
    swapped: Observation
    message: str
    replacement: str


@dataclass(frozen=True)
class MessageDependence:
    """Mean total variation distances over listener states, with bootstrap intervals."""

    tv_swapped: float
    """Real message against a swapped one."""
    tv_swapped_ci: tuple[float, float]
    tv_noise: float
    """Real message against the real message again (two independent samples)."""
    tv_noise_ci: tuple[float, float]
    excess: float
    """``tv_swapped - tv_noise``: what the message itself moves."""
    excess_ci: tuple[float, float]
    states: int
    k: int


def quoted(message: str) -> str:
    """How the talk games show a message in an observation: in double quotes (they
    clean double quotes out of messages, so a quoted message is unambiguous)."""
    return f'"{message}"'


def heard_messages(episode: Episode) -> list[tuple[int, int, str]]:
    """(turn index, speaker, message) of every non-empty message of an episode, in order:
    the message as the game read it and showed it (``Turn.played_action``), which is
    what the listeners' observations quote."""
    return [
        (i, t.player, t.played_action)
        for i, t in enumerate(episode.turns)
        if t.observation.legal_actions is None and t.played_action
    ]


def listener_states(
    episodes: Sequence[Episode], *, seed: int = 0, per_episode: int | None = None
) -> list[ListenerState]:
    """The listener states of ``episodes``: each action turn whose player heard a
    message from another player earlier in the episode (the latest such message is
    swapped for a random message of another episode). A state whose observation shows
    that message more than once, or the replacement already, is left out (the swap
    would be ambiguous)."""
    rng = np.random.default_rng(seed)
    said = [heard_messages(ep) for ep in episodes]
    states = []
    for e, ep in enumerate(episodes):
        others = [m for j, ms in enumerate(said) if j != e for _, _, m in ms]
        found = []
        for i, turn in enumerate(ep.turns):
            heard = [m for j, p, m in said[e] if j < i and p != turn.player]
            if not turn.observation.legal_actions or not heard:
                continue
            message = heard[-1]
            choices = [m for m in others if m != message]
            if not choices:
                continue
            replacement = choices[int(rng.integers(len(choices)))]
            state = _swap_state(turn.observation, message, replacement)
            if state is not None:
                found.append(state)
        states += found[:per_episode] if per_episode is not None else found
    return states


def _swap_state(obs: Observation, message: str, replacement: str) -> ListenerState | None:
    real, new = quoted(message), quoted(replacement)
    if obs.text.count(real) != 1 or new in obs.text:
        return None
    return ListenerState(obs, swap(obs, message, replacement), message, replacement)


def swap(obs: Observation, message: str, replacement: str) -> Observation:
    """``obs`` with ``message`` replaced in its text and in every earlier observation of
    its history; the player's own answers stay as they were written, their prompts
    are left for ``reprompt`` to rebuild."""
    real, new = quoted(message), quoted(replacement)
    history = tuple(
        (dataclasses.replace(o, text=o.text.replace(real, new)), d) for o, d in obs.history
    )
    return dataclasses.replace(obs, text=obs.text.replace(real, new), history=history)


def reprompt(policy: Policy, obs: Observation) -> Observation:
    """``obs`` with the prompt ids of its history's decisions rebuilt from their
    (swapped) observations, oldest first, for a policy whose chat prompt extends the
    previous turn's ids (``prompt_ids``); other policies read the texts alone."""
    prompt_ids: Callable[[Observation], Sequence[int]] | None = getattr(policy, "prompt_ids", None)
    if prompt_ids is None or not obs.history:
        return obs
    rebuilt: list[tuple[Observation, Decision]] = []
    for o, d in obs.history:
        o = dataclasses.replace(o, history=tuple(rebuilt))
        rebuilt.append((o, dataclasses.replace(d, prompt_ids=tuple(prompt_ids(o)))))
    return dataclasses.replace(obs, history=tuple(rebuilt))


def answers(policy: Policy, observations: Sequence[Observation], k: int) -> list[Counter]:
    """The outcomes of ``k`` answers of ``policy`` at each observation."""
    asked = [o for o in observations for _ in range(k)]
    decisions = policy.act(asked)
    return [
        Counter(d.action or INVALID for d in decisions[i * k : (i + 1) * k])
        for i in range(len(observations))
    ]


def total_variation(a: Counter, b: Counter) -> float:
    """Total variation distance between two samples' empirical distributions.

    >>> total_variation(Counter(x=2, y=2), Counter(x=4))
    0.5
    """
    na, nb = sum(a.values()), sum(b.values())
    return 0.5 * sum(abs(a[o] / na - b[o] / nb) for o in set(a) | set(b))


def message_dependence(
    policy: Policy,
    states: Sequence[ListenerState],
    *,
    k: int = 16,
    bootstrap: int = 1000,
    seed: int = 0,
) -> MessageDependence:
    """The dependence of ``policy``'s actions on the messages of ``states`` (module doc)."""
    if not states:
        raise ValueError("message_dependence needs at least one listener state")
    if k < 1:
        raise ValueError(f"message_dependence needs k >= 1 answers per state, got {k}")
    real = [s.real for s in states]
    swapped = [reprompt(policy, s.swapped) for s in states]
    first, again, other = (answers(policy, obs, k) for obs in (real, real, swapped))
    tv_swap = np.array([total_variation(a, b) for a, b in zip(first, other, strict=True)])
    tv_noise = np.array([total_variation(a, b) for a, b in zip(first, again, strict=True)])
    rng = np.random.default_rng(seed)
    rows = rng.integers(len(states), size=(bootstrap, len(states)))

    def ci(x: np.ndarray) -> tuple[float, float]:
        if not bootstrap:
            return (float(x.mean()), float(x.mean()))
        lo, hi = np.percentile(x[rows].mean(axis=1), [2.5, 97.5])
        return (float(lo), float(hi))

    excess = tv_swap - tv_noise
    return MessageDependence(
        tv_swapped=float(tv_swap.mean()),
        tv_swapped_ci=ci(tv_swap),
        tv_noise=float(tv_noise.mean()),
        tv_noise_ci=ci(tv_noise),
        excess=float(excess.mean()),
        excess_ci=ci(excess),
        states=len(states),
        k=k,
    )
