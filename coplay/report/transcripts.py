"""Sample games from ``transcripts.jsonl`` as conversations, one column per seat.

A turn's observation is the text its player saw, and only that player: each turn is
drawn in its own seat's column (what the seat saw, then what it answered), so one
seat's private information never shows in another's column. An answer's title (shown
on hover) holds its log-probabilities under the policy that sampled it. Also the
selection the report and ``coplay show`` share: the latest ``games`` games, or those
of one iteration.
"""

from __future__ import annotations

import html
import math
from collections.abc import Sequence
from typing import Any


def select_games(
    records: Sequence[dict[str, Any]], games: int, iteration: int | None = None
) -> list[dict[str, Any]]:
    """The last ``games`` records (of ``iteration``, when given), in logged order."""
    if iteration is not None:
        records = [r for r in records if r.get("iteration") == iteration]
    return list(records[-games:]) if games > 0 else []


def logprob_note(turn: dict[str, Any]) -> str:
    """``log p = -0.69 (p = 0.500), 1 token`` and each token's log-prob, for a hover."""
    logps = [float(x) for x in turn.get("logprobs") or ()]
    if not logps:
        return "no log-probabilities recorded (a scripted or remote player)"
    total = sum(logps)
    ids = turn.get("response_ids") or [None] * len(logps)
    tokens = "\n".join(f"token {i}: {lp:.4f}" for i, lp in zip(ids, logps, strict=False))
    return f"log p = {total:.4f} (p = {math.exp(total):.3f}), {len(logps)} tokens\n{tokens}"


def _esc(value: Any) -> str:
    return html.escape(str(value))


def transcripts_html(records: Sequence[dict[str, Any]], games: int) -> str:
    """The latest ``games`` games, grouped by iteration, the newest iteration open."""
    chosen = select_games(records, games)
    if not chosen:
        return "<p>No transcripts (train.transcripts: 0, or no evaluation yet).</p>"
    by_iteration: dict[int, list[dict[str, Any]]] = {}
    for record in chosen:
        by_iteration.setdefault(record.get("iteration", -1), []).append(record)
    parts = []
    last = max(by_iteration)
    for it in sorted(by_iteration, reverse=True):
        games_html = "".join(game_html(r) for r in by_iteration[it])
        is_open = " open" if it == last else ""
        parts.append(
            f"<details class=iteration{is_open}><summary>iteration {_esc(it)}: "
            f"{len(by_iteration[it])} games</summary>{games_html}</details>"
        )
    return "\n".join(parts)


def game_html(record: dict[str, Any]) -> str:
    """One game as a table: a column per seat, a row per step, the returns at the end."""
    seats = list(record.get("seats") or [])
    returns = list(record.get("returns") or [])
    n = max(len(seats), len(returns), 1 + max((t["player"] for t in record["turns"]), default=0))
    head = "".join(
        f"<th>seat {s} · {_esc(seats[s] if s < len(seats) else '?')}</th>" for s in range(n)
    )
    rows = []
    for step, turns in _by_step(record["turns"]):
        cells = ["<td></td>"] * n
        for t in turns:
            cells[t["player"]] = f'<td class=turn data-seat="{t["player"]}">{turn_html(t)}</td>'
        rows.append(f"<tr><th class=step>{step}</th>{''.join(cells)}</tr>")
    ret = "".join(f"<td class=ret>{_fmt(r)}</td>" for r in returns)
    notes = []
    if record.get("truncated"):
        notes.append("truncated")
    if record.get("forfeited_by") is not None:
        notes.append(f"forfeited by seat {_esc(record['forfeited_by'])}")
    if record.get("prefix"):
        notes.append("restarted from a replayed position")
    note = f" ({', '.join(notes)})" if notes else ""
    return (
        f'<div class=game data-seed="{_esc(record.get("seed"))}">'
        f"<p class=gamehead>{_esc(record.get('game'))}, seed {_esc(record.get('seed'))}{note}</p>"
        f"<table class=conversation><tr><th class=step>step</th>{head}</tr>{''.join(rows)}"
        f"<tr><th>return</th>{ret}</tr></table></div>"
    )


def _by_step(turns: Sequence[dict[str, Any]]) -> list[tuple[int, list[dict[str, Any]]]]:
    """Turns grouped by step: simultaneous moves share a row."""
    steps: dict[int, list[dict[str, Any]]] = {}
    for t in turns:
        steps.setdefault(int(t.get("step", len(steps))), []).append(t)
    return sorted(steps.items())


def turn_html(t: dict[str, Any]) -> str:
    """What the seat saw, then its answer (with log-probs on hover), rejected attempts
    and the reward credited to the turn."""
    rejected = "".join(
        f'<div class=rejected title="rejected: not a legal action">{_esc(a)}</div>'
        for a in t.get("rejected") or ()
    )
    valid = "" if t.get("valid", True) else " invalid"
    action = t.get("action")
    shown_action = (
        f" <span class=action>→ {_esc(action)}</span>"
        if action and action != (t.get("text") or "").strip()
        else ""
    )
    reward = t.get("reward")
    reward_html = f"<span class=reward>reward {_fmt(reward)}</span>" if reward else ""
    policy = f"{t.get('policy_id', '?')} v{t.get('policy_version', '?')}"
    return (
        f"<div class=saw><span class=who>saw</span><pre>{_esc(t.get('observation', ''))}</pre></div>"
        f"{rejected}"
        f'<div class="answer{valid}" title="{_esc(logprob_note(t))}">'
        f"<span class=who>{_esc(policy)} answered</span> "
        f"<span class=text>{_esc(t.get('text', ''))}</span>{shown_action}</div>{reward_html}"
    )


def _fmt(x: Any) -> str:
    return f"{x:g}" if isinstance(x, int | float) else _esc(x)
