"""Micro-batches sized by a token budget: which decisions share one forward/backward pass.

A micro-batch's memory is its activations, kept for the backward pass, and they grow
with its padded tokens, not its number of decisions: 512 Kuhn decisions of a tiny
model fit in a few megabytes, 512 of a 0.1B model do not. So a minibatch is cut into
consecutive runs of decisions whose estimated padded tokens stay within a budget;
``optim.micro_batch_tokens`` sets it, or by default it is what fits ``ACTIVATION_BYTES``
by the model's width and depth. Gradients accumulate exactly over micro-batches
(``coplay.train.learner_update``), so where the cuts fall changes no result beyond float
rounding.

Choices are counted as the scorer runs them: a choice met again in a micro-batch (the
same prompt and actions: a small game's minibatch holds a few information states many
times) is a row of the distinct items' table already, so it adds no tokens. Counting
every copy would cut a Kuhn minibatch of a 0.1B model into a dozen passes over
nearly the same dozen states. Where a minibatch still takes several passes, its
copies are brought together first (``together``), so each state is scored in one
pass instead of in every pass it recurs in.
"""

from __future__ import annotations

from collections.abc import Sequence

from coplay.policies.choices import distinct_items
from coplay.types import Decision

ACTIVATION_BYTES = 256 * 2**20
"""Activations one micro-batch may keep for its backward pass, by default."""
_PER_LAYER = (12, 5)
"""Floats kept per token and layer, per unit of hidden size and of MLP width: the
norms, projections, attention output and residuals (about 12 hidden-sized vectors),
and the gate, up, activation and product of the MLP (about 5 of its width)."""
_LOGIT_COPIES = 4
"""Vocabulary-sized float rows kept per scored position: logits, their float copy,
the log-softmax and its exponential (the entropy)."""


def token_bytes(config) -> int:
    """Estimated activation bytes per token of a model with this Hugging Face config
    (without activation checkpointing, which keeps fewer: the budget stays this
    conservative estimate, so turning checkpointing on never raises the memory)."""
    hidden, width = config.hidden_size, getattr(config, "intermediate_size", 4 * config.hidden_size)
    floats = config.num_hidden_layers * (_PER_LAYER[0] * hidden + _PER_LAYER[1] * width)
    return floats * 4  # float32 activations, the learner's dtype on the CPU


def auto_budget(config) -> int:
    """Padded tokens per micro-batch whose activations fit ``ACTIVATION_BYTES``."""
    return max(1, ACTIVATION_BYTES // token_bytes(config))


def logit_tokens(config) -> int:
    """How many tokens of activations one scored position's vocabulary rows weigh."""
    return max(1, -(-config.vocab_size * 4 * _LOGIT_COPIES // token_bytes(config)))


def cost(decision: Decision, *, cached: bool = True) -> tuple[int, int]:
    """(tokens run, positions scored) of one decision: its prompt and its answer
    (every candidate action's extra tokens, in choice mode), and the positions whose
    vocabulary-wide distributions are kept. Not ``cached`` (activation checkpointing),
    a choice among multi-token actions runs each action after the whole prompt."""
    if decision.choice_ids:
        extra = sum(map(len, decision.choice_ids)) - len(decision.choice_ids)
        if not cached and extra:
            runs = len(decision.choice_ids)
            return runs * len(decision.prompt_ids) + extra + runs, extra + runs
        return len(decision.prompt_ids) + extra, 1 + extra
    answer = len(decision.response_ids)
    return len(decision.prompt_ids) + answer, answer + 1


def micro_batches(
    decisions: Sequence[Decision],
    *,
    tokens: int,
    rows: int,
    logit_weight: int = 1,
    cached: bool = True,
) -> list[tuple[int, int]]:
    """``(start, end)`` of consecutive micro-batches of ``decisions`` (all of them, in
    order), each of at most ``rows`` decisions and, padded to its longest, at most
    ``tokens`` tokens over its distinct rows (a scored position weighs ``logit_weight``
    tokens; a choice met again in the micro-batch costs nothing); a decision larger
    than the budget goes alone.

    >>> d = [Decision("", "a", "p", prompt_ids=(1,) * n, response_ids=(2,)) for n in (3, 3, 5)]
    >>> micro_batches(d, tokens=12, rows=8)  # 2 rows x 4 tokens + 4 scored positions
    [(0, 2), (2, 3)]
    """
    costs = [cost(d, cached=cached) for d in decisions]
    if not costs:
        return []
    every = len(costs) * max(n for n, _ in costs) + sum(p for _, p in costs) * logit_weight
    if len(costs) <= rows and every <= tokens:
        # It fits even counting every copy: one pass, with no need to tell its states
        # apart (most minibatches of a small model).
        return [(0, len(costs))]
    cuts: list[tuple[int, int]] = []
    start, longest, scored, distinct = 0, 0, 0, 0
    seen: set[int] = set()  # the states of the micro-batch so far
    for i, (full, state) in enumerate(zip(costs, _states(decisions), strict=True)):
        again = state in seen
        length, positions = (0, 0) if again else full
        wider, more, runs = max(longest, length), scored + positions, distinct + (not again)
        if i > start and (i + 1 - start > rows or runs * wider + more * logit_weight > tokens):
            cuts.append((start, i))
            seen.clear()
            length, positions = full  # the first of its micro-batch
            start, wider, more, runs = i, length, positions, 1
        if state is not None:
            seen.add(state)
        longest, scored, distinct = wider, more, runs
    if start < len(decisions):
        cuts.append((start, len(decisions)))
    return cuts


def _states(decisions: Sequence[Decision]) -> list[int | None]:
    """Per decision, its choice's index among the distinct ones, told apart as the
    scorer tells them (``distinct_items``: by prompt and actions); None for free
    text, which the scorer runs answer by answer."""
    choices = [i for i, d in enumerate(decisions) if d.choice_ids]
    _, inverse = distinct_items(
        [(decisions[i].prompt_ids, decisions[i].choice_ids) for i in choices]
    )
    states: list[int | None] = [None] * len(decisions)
    for i, state in zip(choices, inverse.tolist(), strict=True):
        states[i] = state
    return states


def together(decisions: Sequence[Decision]) -> list[int]:
    """An order of ``decisions`` in which every copy of a choice comes right after its
    first one, choices in order of first appearance; free text keeps its place among
    the rest (a conversation's turns stay together, in turn order).

    >>> d = [Decision("", "a", "p", prompt_ids=(n,), response_ids=(2,), choice_ids=((2,),))
    ...      for n in (1, 3, 1, 3, 4)]
    >>> together(d)
    [0, 2, 1, 3, 4]
    """
    first: dict[int, int] = {}
    at = [i if s is None else first.setdefault(s, i) for i, s in enumerate(_states(decisions))]
    return sorted(range(len(decisions)), key=at.__getitem__)  # stable: copies in order


def learner_micro_batches(learner, decisions: Sequence[Decision]) -> list[tuple[int, int]]:
    """``micro_batches`` at a learner's settings (``Owner``: its row cap, token budget
    and the weight of a scored position; activation checkpointing: no KV cache)."""
    return micro_batches(
        decisions,
        tokens=learner.micro_batch_tokens,
        rows=learner.micro_batch_size,
        logit_weight=learner.logit_weight,
        cached=not learner.checkpointing,
    )


def learner_passes(learner, decisions: Sequence[Decision]) -> list[list[int]]:
    """The indices of ``decisions`` each no-grad pass scores: ``learner_micro_batches``,
    or, where those take several passes, the same cut of the order ``together``, so
    each state is scored in one pass only (callers put the results back by index)."""
    cuts = learner_micro_batches(learner, decisions)
    if len(cuts) < 2:
        return [list(range(start, end)) for start, end in cuts]
    order = together(decisions)
    cuts = learner_micro_batches(learner, [decisions[i] for i in order])
    return [order[start:end] for start, end in cuts]


def prompt_passes(prompts: Sequence[Sequence[int]], *, tokens: int) -> list[list[int]]:
    """Indices of ``prompts`` per pass of a model that reads whole prompts (the
    critic): each distinct prompt once, in order of first appearance with its copies
    right after it, and each pass's distinct prompts, padded to their longest, within
    ``tokens`` (a prompt longer than that goes alone).

    >>> prompt_passes([(1, 2), (3,), (1, 2), (4, 5, 6)], tokens=4)
    [[0, 2, 1], [3]]
    """
    first: dict = {}
    at = [first.setdefault(tuple(p), i) for i, p in enumerate(prompts)]
    passes: list[list[int]] = []
    rows: list[int] = []
    longest = distinct = 0
    for i in sorted(range(len(prompts)), key=at.__getitem__):  # stable: copies in order
        new = at[i] == i
        wider = max(longest, len(prompts[i])) if new else longest
        if rows and new and (distinct + 1) * wider > tokens:
            passes.append(rows)
            rows, distinct, wider = [], 0, len(prompts[i])
        rows.append(i)
        longest, distinct = wider, distinct + new
    if rows:
        passes.append(rows)
    return passes
