"""Honest evaluation of free-text policies: their action distributions, estimated.

A text policy's distribution at an information state is what its written answers
parse to, which no scoring of the legal actions reveals. ``SampledPolicy`` asks the
policy K times per observation through the public ``Policy.act`` and counts the parsed
actions; an answer that names no legal action gets the game's invalid treatment
(``coplay.rollout.invalid``), as in play:

* ``retries`` r: the player is asked again, so an action is played with probability
  p_a (1 - q^(r+1)) / (1 - q), q the invalid share, and the turn fails with q^(r+1);
* then ``penalty``: a uniformly random legal move is played in its place (the penalty
  reward itself is a training signal, not part of the game's value, and is left out);
* or ``forfeit``: the game ends with the offender at the minimum return; the estimate
  leaves that mass out of the row (``coplay.eval.forfeits`` reads the deficit).

Answer j at a state is drawn from the counter-based stream of (seed, state, j)
(``coplay.rollout.streams``) where the policy draws from streams, never from the
policy's own generator, and the states are asked in fixed chunks of the list (one
batch each, ``per_call``). So a ``Sampler`` may spread the chunks over Ray workers
(``RaySource.tally`` in ``coplay.distributed``) and the estimate stays the one this
process samples (``sample_tallies``), whatever the number of workers.

The estimate then goes through the very exact evaluators choice policies use
(exploitability, exact match outcomes, costly positions), and a bootstrap over the K
answers of every state (resampled with replacement, each replicate evaluated again)
gives a percentile confidence interval. Choice-mode policies stay exact: their
distribution is one batched forward, with nothing to spread.

The observations carry no ``history``: a chat-context policy, whose answers in play
also read its earlier reasoning, is estimated as a policy of the information state
alone (the state holds its earlier moves, not its words).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from coplay.eval.exact import (
    QUERY_BATCH,
    ExploitabilityResult,
    solvable_game,
    tabular_exploitability,
    to_table,
)
from coplay.eval.exact_match import ExactOutcome, Oracle, exact_outcomes, outcomes
from coplay.eval.forfeits import forfeit_exploitability, has_forfeits
from coplay.rollout.invalid import InvalidActionConfig
from coplay.rollout.streams import SeatStream
from coplay.types import Observation, Policy, Streamed, TabularQueryable


def treat(counts: Sequence[int], invalid: int, legal: Sequence[str], cfg: InvalidActionConfig):
    """The distribution over ``legal`` that ``counts`` valid and ``invalid`` invalid
    answers give under the treatment ``cfg``; a forfeit's share is left out.

    >>> treat([3, 1], 0, ["[Pass]", "[Bet]"], InvalidActionConfig())
    {'[Pass]': 0.75, '[Bet]': 0.25}
    >>> treat([1, 1], 2, ["[Pass]", "[Bet]"], InvalidActionConfig(retries=1, on_fail="penalty"))
    {'[Pass]': 0.5, '[Bet]': 0.5}
    >>> treat([2, 0], 2, ["[Pass]", "[Bet]"], InvalidActionConfig())
    {'[Pass]': 0.5, '[Bet]': 0.0}
    """
    k = sum(counts) + invalid
    q = invalid / k
    fail = q ** (cfg.retries + 1)
    scale = (1.0 - fail) / (1.0 - q) if q < 1.0 else 0.0
    out = {a: c / k * scale for a, c in zip(legal, counts, strict=True)}
    if cfg.on_fail == "penalty" and fail > 0:
        out = {a: p + fail / len(legal) for a, p in out.items()}
    return out


@dataclass(frozen=True)
class Tally:
    """The K answers at one observation: how many named each legal action, and the
    invalid ones."""

    legal: tuple[str, ...]
    counts: tuple[int, ...]
    invalid: int

    @property
    def k(self) -> int:
        return sum(self.counts) + self.invalid

    def resample(self, rng: np.random.Generator) -> Tally:
        """A bootstrap replicate: K answers drawn with replacement from these."""
        draw = rng.multinomial(self.k, np.asarray([*self.counts, self.invalid]) / self.k)
        return Tally(self.legal, tuple(int(c) for c in draw[:-1]), int(draw[-1]))


class Sampler(Protocol):
    """Where the K answers of each observation are asked: in this process
    (``sample_tallies``) or on Ray workers (``coplay.distributed``: ``RaySource.tally``).
    Either returns what ``sample_tallies`` returns."""

    def __call__(
        self, policy: Policy, observations: Sequence[Observation], *, k: int, seed: int
    ) -> list[Tally]: ...


class SampledPolicy:
    """A policy's action distribution estimated from ``k`` answers per observation.

    It is ``TabularQueryable``: ``action_probs`` returns the estimate (the invalid
    treatment applied; a forfeit's share missing from the row). The answers are asked
    once per ``observation_key`` (the policy's own when it has one) and kept, so every
    evaluator and every bootstrap replicate reads the same sample. ``seed`` keys the
    answers' streams; ``sampler`` says where they are asked.
    """

    def __init__(
        self,
        policy: Policy,
        *,
        k: int,
        invalid: InvalidActionConfig | None = None,
        seed: int = 0,
        sampler: Sampler | None = None,
    ):
        if k < 1:
            raise ValueError(f"sampled evaluation needs k >= 1 answers per state, got {k}")
        self.policy, self.k, self.seed = policy, k, seed
        self.invalid = invalid or InvalidActionConfig()
        self.sampler: Sampler = sampler or sample_tallies
        self.policy_id = f"sampled:{policy.policy_id}"
        self.key: Callable[[Observation], Hashable] = _key_of(policy)
        self.tallies: dict[Hashable, Tally] = {}

    def observation_key(self, obs: Observation) -> Hashable:
        return self.key(obs)

    def tally(self, observations: Sequence[Observation]) -> list[Tally]:
        """The answers at each observation, sampling those not asked yet."""
        todo = {self.key(o): o for o in observations if self.key(o) not in self.tallies}
        if todo:
            asked = self.sampler(self.policy, list(todo.values()), k=self.k, seed=self.seed)
            self.tallies.update(zip(todo, asked, strict=True))
        return [self.tallies[self.key(o)] for o in observations]

    def action_probs(self, observations: Sequence[Observation]) -> list[dict[str, float]]:
        return [treat(t.counts, t.invalid, t.legal, self.invalid) for t in self.tally(observations)]

    def invalid_rate(self) -> float:
        """Share of invalid answers among all sampled so far (unweighted by reach)."""
        total = sum(t.k for t in self.tallies.values())
        return sum(t.invalid for t in self.tallies.values()) / total if total else 0.0

    def replicate(self, rng: np.random.Generator) -> SampledPolicy:
        """A bootstrap replicate: every state's answers resampled with replacement."""
        other = SampledPolicy(
            self.policy, k=self.k, invalid=self.invalid, seed=self.seed, sampler=self.sampler
        )
        other.key = self.key
        other.tallies = {key: t.resample(rng) for key, t in self.tallies.items()}
        return other


def _key_of(policy: Policy) -> Callable[[Observation], Hashable]:
    return getattr(policy, "observation_key", lambda obs: obs)


def answer_streams(key: Hashable, *, k: int, seed: int) -> list[SeatStream]:
    """The streams of the K answers at the state of observation key ``key``: answer j
    draws from stream (hash of seed and state, j). The state's hash is of its ``repr``
    (Python's own ``hash`` of a string differs from process to process).

    >>> a = answer_streams(("Card: K", None, ("[Pass]", "[Bet]")), k=2, seed=0)
    >>> b = answer_streams(("Card: K", None, ("[Pass]", "[Bet]")), k=3, seed=0)
    >>> (a[1].stream, a[1].player) == (b[1].stream, b[1].player), a[0].player
    (True, 0)
    """
    digest = hashlib.blake2b(f"{seed}|{key!r}".encode(), digest_size=8).digest()
    stream = int.from_bytes(digest, "little")
    return [SeatStream(stream, j) for j in range(k)]


def per_call(k: int) -> int:
    """States whose K answers are asked in one ``act`` call (one batch of about
    ``QUERY_BATCH`` rows): the chunks of a list of states are fixed by the list and K
    alone, so any split of the list at chunk boundaries asks the same calls."""
    return max(1, QUERY_BATCH // k)


def sample_tallies(
    policy: Policy, observations: Sequence[Observation], *, k: int, seed: int
) -> list[Tally]:
    """The K answers at each observation, asked in this process: ``per_call(k)``
    observations per ``act`` call, K copies of each, answer j of a state drawn from
    ``answer_streams``' j-th stream where the policy draws from streams (``Streamed``).
    A choice and a written answer each draw from their own row's stream, so the answers
    depend on the state alone; the chunks only set the batch size. A policy without
    streams draws from its own generator, in the order the states are asked."""
    key = _key_of(policy)
    out = []
    step = per_call(k)
    for start in range(0, len(observations), step):
        chunk = observations[start : start + step]
        asked = [o for o in chunk for _ in range(k)]
        if isinstance(policy, Streamed):
            streams = [s for o in chunk for s in answer_streams(key(o), k=k, seed=seed)]
            answers = policy.act_streamed(asked, streams)
        else:
            answers = policy.act(asked)
        for i, obs in enumerate(chunk):
            out.append(_count(obs, [d.action for d in answers[i * k : (i + 1) * k]]))
    return out


def _count(obs: Observation, actions: Sequence[str | None]) -> Tally:
    legal = tuple(obs.legal_actions or ())
    if not legal:
        raise ValueError(
            f"sampled evaluation needs listed legal actions; player {obs.player} in "
            f"{obs.game!r} has none listed here"
        )
    counts = [sum(a == x for a in actions) for x in legal]
    return Tally(legal, tuple(counts), len(actions) - sum(counts))


# ---------------------------------------------------------------- estimates
@dataclass(frozen=True)
class Estimate:
    """A value on the full sample with its bootstrap percentile interval."""

    value: float
    ci_low: float
    ci_high: float
    k: int
    """Answers sampled per information state."""
    replicates: int


def bootstrap(
    metric: Callable[[SampledPolicy], Mapping[str, float]],
    sampled: SampledPolicy,
    *,
    replicates: int = 100,
    seed: int = 0,
    level: float = 0.95,
) -> dict[str, Estimate]:
    """``metric`` on the estimate, and its interval over ``replicates`` resamples.

    ``metric`` must have asked every state it needs on ``sampled`` first (the value on
    the full sample is computed first, which asks them), so replicates resample answers
    and never ask the policy again."""
    point = dict(metric(sampled))
    rng = np.random.default_rng(seed)
    runs = [metric(sampled.replicate(rng)) for _ in range(replicates)]
    tail = (1.0 - level) / 2 * 100
    out = {}
    for name, value in point.items():
        values = np.asarray([r[name] for r in runs]) if runs else np.asarray([value])
        low, high = np.percentile(values, [tail, 100 - tail])
        out[name] = Estimate(float(value), float(low), float(high), sampled.k, replicates)
    return out


def exploitability_metric(game_name: str, params: Mapping[str, object] | None):
    """``metric`` for ``bootstrap``: exploitability and NashConv of the estimate in every
    seat (forfeits read as such)."""

    def metric(policy: SampledPolicy) -> dict[str, float]:
        res = forfeiting_exploitability(policy, game_name, params=params)
        return {"exploitability": res.exploitability, "nash_conv": res.nash_conv}

    return metric


def forfeiting_exploitability(
    policy: TabularQueryable, game_name: str, *, params: Mapping[str, object] | None = None
) -> ExploitabilityResult:
    """``coplay.eval.exact.exploitability`` for a policy whose rows may leave out a
    forfeit's share (a sampled text policy); OpenSpiel's where none does."""
    env, game = solvable_game(game_name, params)
    tab = to_table(policy, game_name, params=params)
    if has_forfeits(tab):
        return forfeit_exploitability(game, tab, env.spec)
    return tabular_exploitability(game, tab)


def outcomes_metric(
    opponent: Policy, game_name: str, params: Mapping[str, object] | None
) -> Callable[[SampledPolicy], dict[str, float]]:
    """``metric`` for ``bootstrap``: the exact win / loss / mean return per seat of the
    estimate against ``opponent`` (``coplay.eval.exact_match``)."""

    def metric(policy: SampledPolicy) -> dict[str, float]:
        return _outcome_rows(exact_outcomes(policy, opponent, game_name, params=params))

    return metric


def outcomes_against_metric(
    policy: TabularQueryable, game_name: str, params: Mapping[str, object] | None
) -> Callable[[SampledPolicy], dict[str, float]]:
    """``metric`` for ``bootstrap`` over an opponent's estimate: the exact win / loss /
    mean return per seat of ``policy`` against the estimate in every other seat (the
    rows of ``outcomes_metric``, seen from the fixed side). ``policy``'s answers are
    asked once and kept across the replicates, which resample the opponent's alone."""
    env, game = solvable_game(game_name, params)
    mine = Oracle(policy, env)

    def metric(opponent: SampledPolicy) -> dict[str, float]:
        return _outcome_rows(outcomes(game, mine, Oracle(opponent, env)))

    return metric


def _outcome_rows(found: Sequence[ExactOutcome]) -> dict[str, float]:
    m = {}
    for o in found:
        m[f"exact_win_seat{o.seat}"] = o.win
        m[f"exact_loss_seat{o.seat}"] = o.loss
        m[f"exact_return_seat{o.seat}"] = o.mean_return
    return m


def as_metrics(prefix: str, estimates: Mapping[str, Estimate]) -> dict[str, float]:
    """Flat metrics: ``{prefix}{name}_sampled`` and its ``_ci_low``, ``_ci_high``, ``_k``.

    >>> m = as_metrics("eval/", {"exploitability": Estimate(0.3, 0.2, 0.4, 16, 50)})
    >>> m["eval/exploitability_sampled_ci_high"], m["eval/exploitability_sampled_k"]
    (0.4, 16.0)
    """
    out = {}
    for name, e in estimates.items():
        key = f"{prefix}{name}_sampled"
        out |= {key: e.value, f"{key}_ci_low": e.ci_low, f"{key}_ci_high": e.ci_high}
        out[f"{key}_k"] = float(e.k)
    return out


def sampled_exploitability(
    policy: Policy,
    game_name: str,
    *,
    params: Mapping[str, object] | None = None,
    k: int = 32,
    invalid: InvalidActionConfig | None = None,
    replicates: int = 100,
    seed: int = 0,
    sampler: Sampler | None = None,
) -> tuple[dict[str, Estimate], float]:
    """Exploitability and NashConv of ``policy``'s sampled distribution, with intervals,
    and the share of invalid answers among the samples. ``seed`` keys the answers and
    the bootstrap; ``sampler`` says where the answers are asked (default: here)."""
    sampled = SampledPolicy(policy, k=k, invalid=invalid, seed=seed, sampler=sampler)
    res = bootstrap(
        exploitability_metric(game_name, params), sampled, replicates=replicates, seed=seed
    )
    return res, sampled.invalid_rate()
