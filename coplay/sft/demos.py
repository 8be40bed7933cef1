"""Narrated demonstrations: scripted play written out as chat JSONL for ``coplay sft``.

A player (random, nash, perfect, optimal, or a checkpoint) plays every seat of a game;
at each of its decisions a short reasoning text says what it sees and why it acts,
then the answer gives the action in the game's format. Phrasings are templates chosen
by a seeded generator, so the same seed writes the same file. The "why" says only
what is true of the player: random play says it picks at random, never that it has a
plan; a player that reports its action probabilities states them (an equilibrium that
mixes says so). Actions inside the reasoning are written without brackets, so the
answer's bracketed action is the only one a parser finds.

Message turns (free text, no legal list) are narrated where the game has a scripted
talker in ``TALKERS``: the player then says something true of itself (negotiation: a
templated, varied sentence about its own values or what it would keep), played as its
message so that later observations show it, and the answer is the message after the
reasoning block. In games without a talker they are left out: scripted players have
no words of their own to narrate.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import numpy as np

from coplay.envs.gameref import GameRef
from coplay.policies.answer import ANSWER_FORMATS, check_format
from coplay.policies.scripted import _resolve
from coplay.population.opponents import build_opponent
from coplay.report.atomic import write_text
from coplay.rollout.engine import play_episodes
from coplay.types import Decision, Episode, Observation, Policy, Turn


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


@dataclass(frozen=True)
class _Table:
    """What a negotiation observation says: counts, my values, the offer to me, actions left."""

    counts: tuple[int, ...]
    values: tuple[int, ...]
    offered: tuple[int, ...] | None
    left: str

    @classmethod
    def read(cls, text: str) -> _Table:
        counts = _find(r"Items \(book hat ball\): ([\d ]+)\.", text, "0 0 0")
        values = _find(r"Your values per item: ([\d ]+) ", text, "0 0 0")
        offers = re.findall(r"Other: \[Propose [\d ]+\], you get ([\d ]+)", text)
        return cls(
            counts=tuple(map(int, counts.split())),
            values=tuple(map(int, values.split())),
            offered=tuple(map(int, offers[-1].split())) if offers else None,
            left=_find(r"\((\d+) actions? left\)", text, "?"),
        )

    def worth(self, share: Sequence[int]) -> int:
        return sum(v * n for v, n in zip(self.values, share, strict=True))


NEGOTIATION_ITEMS = ("book", "hat", "ball")


def _negotiation_sees(obs: Observation, rng: np.random.Generator) -> str:
    t = _Table.read(obs.text)
    each = ", ".join(f"{i}s {v}" for i, v in zip(NEGOTIATION_ITEMS, t.values, strict=True))
    seen = [_pick(rng, (f"My values: {each}.", f"To me {each}.", f"I value {each}."))]
    if t.offered is not None:
        gets = " ".join(map(str, t.offered))
        seen.append(
            _pick(
                rng,
                (
                    f"Their offer gives me {gets}, worth {t.worth(t.offered)}.",
                    f"Their last offer is worth {t.worth(t.offered)} to me ({gets}).",
                ),
            )
        )
    seen.append(f"{t.left} actions left.")
    return " ".join(seen)


DESCRIBERS: dict[str, Callable[[Observation, np.random.Generator], str]] = {
    "kuhn_poker": _poker_sees,
    "leduc_poker": _poker_sees,
    "negotiation": _negotiation_sees,
    "tic_tac_toe": _tictactoe_sees,
}
"""Game name -> what the player sees, in the first person; others get ``_generic_sees``."""


# ---------------------------------------------------------------- what it says
NEGOTIATION_SAYS = (
    "I value {top}s most.",
    "{Top}s are worth {v} each to me.",
    "I care most about the {top}s.",
    "I would keep the {top}s; you can have the rest.",
    "Give me the {top}s and we have a deal.",
)
NEGOTIATION_SAYS_ZERO = ("{Low}s are worth nothing to me.", "You can have all the {low}s.")
SAY_WHY = (
    "I tell them honestly what I want.",
    "I say truthfully what matters to me.",
    "Telling them my values may help us agree.",
)


def _negotiation_says(obs: Observation, rng: np.random.Generator) -> str:
    """A true sentence about the speaker's values: its most valuable item (ties broken
    at random) or an item worth nothing to it."""
    t = _Table.read(obs.text)
    best = max(t.values)
    top = NEGOTIATION_ITEMS[_pick(rng, [i for i, v in enumerate(t.values) if v == best])]
    zero = [NEGOTIATION_ITEMS[i] for i, v in enumerate(t.values) if v == 0]
    if zero and rng.random() < 0.3:
        low = _pick(rng, zero)
        return _pick(rng, NEGOTIATION_SAYS_ZERO).format(low=low, Low=low.capitalize())
    text = _pick(rng, NEGOTIATION_SAYS)
    return text.format(top=top, Top=top.capitalize(), v=best)


TALKERS: dict[str, Callable[[Observation, np.random.Generator], str]] = {
    "negotiation": _negotiation_says,
}
"""Game name -> a scripted message (true of the speaker) for its free-text message turns."""


class Talking:
    """A scripted player that also talks: message turns (no legal list) get ``says``'s
    text, every other turn is ``policy``'s."""

    def __init__(self, policy: Policy, says, seed: int = 0) -> None:
        self.policy, self.says = policy, says
        self.mode = getattr(policy, "mode", "choice")  # how its listed turns are decided
        self.policy_id, self.version = policy.policy_id, 0
        self.rng = np.random.default_rng(seed)

    def act(self, observations: Sequence[Observation]) -> list[Decision]:
        listed = [o for o in observations if o.legal_actions is not None]
        chosen = iter(self.policy.act(listed) if listed else [])
        out = []
        for o in observations:
            if o.legal_actions is not None:
                out.append(next(chosen))
            else:
                text = self.says(o, self.rng)
                out.append(Decision(text=text, action=text, policy_id=self.policy_id))
        return out

    def action_probs(self, observations: Sequence[Observation]) -> list[dict[str, float]]:
        return self.policy.action_probs(observations)


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
    # A text-mode model plays what it writes, which its choice distribution is not
    # (it refuses to give one): its moves are narrated without probabilities.
    exact = getattr(policy, "mode", "choice") != "text"
    probs_of = getattr(policy, "action_probs", None) if exact else None
    records = []
    for ep in episodes:
        for traj in ep.trajectories:
            talks = ep.game in TALKERS
            turns = [t for t in traj.turns if _narrated(t, talks)]
            listed = [t.observation for t in turns if t.observation.legal_actions]
            probs = iter(probs_of(listed) if probs_of and listed else ())
            pairs = [
                (_user(t), render(_reasoning(player, t, _next_probs(t, probs), ep, rng), _act(t)))
                for t in turns
            ]
            if context == "turn":
                records += [_record(system, [u, a]) for u, a in pairs]
            elif pairs:
                records.append(_record(system, [m for pair in pairs for m in pair]))
    return records


def _narrated(turn: Turn, talks: bool) -> bool:
    """A valid turn with a legal list, or a message turn of a game with a talker."""
    if not turn.decision.valid:
        return False
    return bool(turn.observation.legal_actions) or (
        talks and turn.observation.legal_actions is None
    )


def _next_probs(turn: Turn, probs):
    return next(probs, None) if turn.observation.legal_actions else None


def _reasoning(player, turn: Turn, probs, ep: Episode, rng: np.random.Generator) -> str:
    obs = turn.observation
    sees = DESCRIBERS.get(ep.game, _generic_sees)(obs, rng)
    if obs.legal_actions is None:
        return f"{sees} {_pick(rng, SAY_WHY)}"
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
    if ref.name in TALKERS:
        policy = Talking(policy, TALKERS[ref.name], seed=seed)
    seats = ref.make().spec.num_players
    episodes = play_episodes(ref.make, [[policy] * seats] * games, range(seed, seed + games))
    label = _resolve(player, ref.name) if player in ("nash", "perfect", "optimal") else player
    records = narrate(episodes, label, policy, context=context, answer=answer, seed=seed)
    if not records:  # an empty file would train nothing, silently
        raise ValueError(
            f"no conversations to write: player {player} made no valid move in {games} "
            f"games of {ref.name} (a text-mode checkpoint must answer in the game's format)"
        )
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    write_text(out, "".join(json.dumps(r) + "\n" for r in records))
    return len(records)
