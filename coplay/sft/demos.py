"""Narrated demonstrations: scripted play written out as chat JSONL for ``coplay sft``.

A player (random, nash, perfect, optimal, or a checkpoint) plays every seat of a game;
at each of its decisions a short reasoning text says what it sees and why it acts,
then the answer gives the action in the game's format. Phrasings are templates chosen
by a seeded generator, so the same seed writes the same file. The "why" says only
what is true of the player: random play says it picks at random, never that it has a
plan; a player that reports its action probabilities states them (an equilibrium that
mixes says so). Actions inside the reasoning are written without brackets, so the
answer's bracketed action is the only one a parser finds.

Turns without a legal list (free-text messages) are left out: scripted players have no
words of their own to narrate.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Literal

import numpy as np

from coplay.envs.gameref import GameRef
from coplay.policies.answer import ANSWER_FORMATS, check_format
from coplay.policies.scripted import _resolve
from coplay.population.opponents import build_opponent
from coplay.report.atomic import write_text
from coplay.rollout.engine import play_episodes
from coplay.types import Episode, Observation, Policy, Turn


def _plain(action: str) -> str:
    return action.removeprefix("[").removesuffix("]")


# ---------------------------------------------------------------- what it sees
CARDS = {"J": "Jack", "Q": "Queen", "K": "King", "A": "Ace", "T": "Ten"}


def _find(pattern: str, text: str, default: str = "") -> str:
    m = re.search(pattern, text)
    return m.group(1).strip() if m else default


def _poker_sees(obs: Observation, rng: np.random.Generator) -> str:
    card = _find(r"Your card: (\w+)", obs.text)
    name = CARDS.get(card, card)
    public = _find(r"Public card: (\w+)", obs.text)
    history = _find(r"History: ([^\n]*)", obs.text) or _find(r"(Round 1: [^\n]*)", obs.text)
    history = history.rstrip(".")
    holding = _pick(rng, (f"I hold the {name}.", f"My card is the {name}.", f"I have the {name}."))
    seen = [holding]
    if public and public != "not":
        seen.append(f"The public card is the {CARDS.get(public, public)}.")
    if history in ("", "none"):
        seen.append(_pick(rng, ("Nobody has acted yet.", "No bets so far.", "I act first.")))
    else:
        seen.append(_pick(rng, (f"So far: {history}.", f"The betting so far: {history}.")))
    return " ".join(seen)


def _tictactoe_sees(obs: Observation, rng: np.random.Generator) -> str:
    mark = _find(r"You play (\w)", obs.text)
    empty = len(obs.legal_actions or ())
    return _pick(
        rng,
        (
            f"I play {mark}; {empty} cells are still empty.",
            f"I am {mark} and {empty} cells are free.",
            f"Playing {mark}, with {empty} empty cells left.",
        ),
    )


def _generic_sees(obs: Observation, rng: np.random.Generator) -> str:
    lines = [ln.strip() for ln in obs.text.splitlines()[1:] if ln.strip()]
    state = " ".join(ln for ln in lines if not ln.startswith("Your legal actions"))
    state = _BRACKETED.sub(r"\1", state)  # the answer's action stays the only bracketed one
    moves = f"Legal moves: {_names(obs.legal_actions or ())}."
    lead = _pick(rng, ("I see:", "The position:", "What I know:"))
    return f"{lead} {state} {moves}" if state else moves


DESCRIBERS: dict[str, Callable[[Observation, np.random.Generator], str]] = {
    "kuhn_poker": _poker_sees,
    "leduc_poker": _poker_sees,
    "tic_tac_toe": _tictactoe_sees,
}
"""Game name -> what the player sees, in the first person; others get ``_generic_sees``."""


# ---------------------------------------------------------------- why it acts
RANDOM_WHY = (
    "I have no plan here: I pick one of the {n} legal moves uniformly at random: {a}.",
    "I choose at random among {legal}; this time {a}.",
    "Any legal move will do for me, so I draw one at random: {a}.",
    "Nothing to weigh for me: a fair random pick among {n} moves gives {a}.",
)
SURE_WHY = (
    "{who} always plays {a} here.",
    "In this spot {who} plays {a} every time.",
    "{a} is the move {who} makes here, with certainty.",
)
MIXED_WHY = (
    "{who} plays {a} with probability {p:.2f} here ({mix}); this time {a}.",
    "{who} mixes here ({mix}), and the draw is {a}.",
    "Here {who} randomises: {mix}. I play {a}.",
)
TIED_WHY = (
    "{who} finds {k} equally good moves here ({best}); I play {a}.",
    "{k} moves are equally good for {who} here ({best}), and I take {a}.",
)
EVEN_WHY = (
    "{who} rates all {n} moves alike here, so I pick {a}.",
    "To {who} every move here is as good as another ({n} of them); I play {a}.",
)
WHO = {"nash": "the equilibrium strategy", "perfect": "perfect play"}
"""How the reasoning names a solved player's strategy (others: "my strategy")."""


def why(
    player: str,
    obs: Observation,
    action: str,
    probs: Mapping[str, float] | None,
    rng: np.random.Generator,
) -> str:
    """Why ``action`` was played: only what is true of ``player`` (see the module doc)."""
    legal = obs.legal_actions or ()
    a = _plain(action)
    if player == "random":
        return _pick(rng, RANDOM_WHY).format(n=len(legal), a=a, legal=_names(legal))
    if probs is None:
        return f"My policy chooses {a}."
    who = WHO.get(player, "my strategy")
    p = probs.get(action, 0.0)
    played = [k for k, v in probs.items() if v > 1e-6]
    tied = max(probs[k] for k in played) - min(probs[k] for k in played) < 1e-6
    if p >= 0.999:
        text = _pick(rng, SURE_WHY)
    elif tied and len(played) == len(probs):
        text = _pick(rng, EVEN_WHY)
    elif tied:
        text = _pick(rng, TIED_WHY)
    else:
        text = _pick(rng, MIXED_WHY)
    mix = ", ".join(f"{_plain(k)} {probs[k]:.2f}" for k in played)
    out = text.format(who=who, a=a, p=p, n=len(legal), mix=mix, k=len(played), best=_names(played))
    return out[0].upper() + out[1:]


MAX_NAMED = 6
"""Longer lists of moves are given by their count."""
_BRACKETED = re.compile(r"\[([^\[\]]*)\]")


def _names(legal: Sequence[str]) -> str:
    names = [_plain(x) for x in legal]
    if len(names) > MAX_NAMED:
        return f"{len(names)} moves"
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]


def _pick(rng: np.random.Generator, options: Sequence[str]) -> str:
    return options[int(rng.integers(len(options)))]


# ---------------------------------------------------------------- conversations
def narrate(
    episodes: Sequence[Episode],
    player: str,
    policy: Policy,
    *,
    context: Literal["turn", "chat"] = "turn",
    answer: str = "think",
    seed: int = 0,
) -> list[dict]:
    """Chat records of the episodes' listed-action turns: one per turn (``turn``), or
    one per player and episode (``chat``: its observations and answers in order). Each
    opens with the answer format's instruction as the system message and writes its
    answers in that format, as a text-mode policy's prompts and answers look
    (``coplay.policies.chat``), so a fine-tuned model meets in play what it learned."""
    fmt = ANSWER_FORMATS[check_format(answer)]
    render, system = fmt.render, fmt.instruction
    rng = np.random.default_rng(seed)
    probs_of = getattr(policy, "action_probs", None)
    records = []
    for ep in episodes:
        for traj in ep.trajectories:
            turns = [t for t in traj.turns if t.observation.legal_actions and t.decision.valid]
            probs = probs_of([t.observation for t in turns]) if probs_of and turns else None
            pairs = [
                (_user(t), render(_reasoning(player, t, probs and probs[i], ep, rng), _act(t)))
                for i, t in enumerate(turns)
            ]
            if context == "turn":
                records += [_record(system, [u, a]) for u, a in pairs]
            elif pairs:
                records.append(_record(system, [m for pair in pairs for m in pair]))
    return records


def _reasoning(player, turn: Turn, probs, ep: Episode, rng: np.random.Generator) -> str:
    obs = turn.observation
    sees = DESCRIBERS.get(ep.game, _generic_sees)(obs, rng)
    return f"{sees} {why(player, obs, _act(turn), probs, rng)}"


def _act(turn: Turn) -> str:
    return turn.decision.action or ""


def _user(turn: Turn) -> str:
    return turn.observation.text


def _record(system: str, contents: Sequence[str]) -> dict:
    roles = ("user", "assistant")
    turns = [{"role": roles[i % 2], "content": c} for i, c in enumerate(contents)]
    return {"messages": [{"role": "system", "content": system}, *turns]}


def write_demos(
    out,
    *,
    game: str,
    player: str,
    games: int,
    seed: int = 0,
    params: Mapping[str, object] | None = None,
    context: Literal["turn", "chat"] = "turn",
    answer: str = "think",
) -> int:
    """Play ``games`` games of ``player`` in every seat and write the narrated JSONL to
    ``out``; returns the number of conversations written."""
    ref = GameRef(game, dict(params or {}))
    policy = build_opponent(player, ref.name, seed=seed, params=ref.params)
    seats = ref.make().spec.num_players
    episodes = play_episodes(ref.make, [[policy] * seats] * games, range(seed, seed + games))
    label = _resolve(player, ref.name) if player in ("nash", "perfect", "optimal") else player
    records = narrate(episodes, label, policy, context=context, answer=answer, seed=seed)
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    write_text(out, "".join(json.dumps(r) + "\n" for r in records))
    return len(records)
