"""Positive-signalling bonus: reward choices that depend on what the chooser sees.

Eccles et al. (2019, "Biases for emergent communication in multi-agent
reinforcement learning", arXiv 1912.05676) add to a speaker's loss the mutual
information between its observation x and its message m, estimated on a batch:

    I(x; m) = H(pi_bar) - mean_i H(pi(. | x_i)),   pi_bar = mean_i pi(. | x_i)

With shared weights a tiny model first learns the bias every observation shares
(say the same symbol for every target); the messages then carry nothing, the
listener learns to ignore them, and the speaker's reward no longer depends on its
choice, so the code never forms. The bonus pushes the other way from the start:
each observation's distribution away from the batch's average.

The bonus is ``H(pi_bar) - beta * mean_i H(pi(. | x_i))``; beta = 1 (the default)
is I(x; m). Other values are for experiments, and the numbers say which way they
fail: beta < 1 also rewards a spread marginal, and from a fresh model, whose
distributions are all near uniform, it holds every observation at uniform (a
maximum of H(pi_bar) where the code has no gradient); beta > 1 rewards sharpening
more than spreading, and every observation collapses onto one symbol.

Per decision the term is ``CE(pi_i, pi_bar) - beta * H(pi_i)``: summed over the
batch and divided by its size, it has the value and, with ``pi_bar`` held fixed,
the gradient of the bonus (the terms it drops sum to zero on the simplex).
``pi_bar`` is computed for every optimizer step, under the weights of that step,
over the minibatch's decisions that offer the same actions (the same
``choice_ids``), and held fixed for the step's micro-batches, so micro-batching
leaves the step unchanged. Held fixed over several steps it would be wrong: moving
every distribution away from a stale average, all in the same direction, also
raises the surrogate, and that is a collapse onto one symbol. Decisions whose
action set no other decision of the minibatch shares get no bonus.

The listener's counterpart, positive listening (same paper), rewards answers that
change with the message: ``listening_bonus`` compares a decision's distribution with
its average over every message it could have received (the observation's
``counterfactuals``, scored under the step's weights).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Hashable, Sequence

import torch
from pydantic import BaseModel, ConfigDict, Field
from torch import Tensor


class SignallingConfig(BaseModel):
    """``loss.signalling``: the positive-signalling bonus (``signalling_bonus``)."""

    model_config = ConfigDict(frozen=True, extra="forbid", use_attribute_docstrings=True)

    coef: float = Field(gt=0.0, allow_inf_nan=False)
    """Weight of the bonus H(pi_bar) - beta * H(pi | x) over the minibatch's choices
    among the same actions. For a speaker whose messages would otherwise collapse to
    one symbol for every observation."""
    beta: float = Field(1.0, ge=0.0, allow_inf_nan=False)
    """Weight of the conditional entropy: 1 makes the bonus the mutual information
    between observation and choice (use 1; the module's docstring says how other
    values fail)."""
    seats: list[int] | None = None
    """Seats whose decisions the bonus covers (the speakers); None covers every seat. A
    listener given the bonus is pushed to answer each message deterministically before
    it has learned what messages mean."""


class ListeningConfig(BaseModel):
    """``loss.listening``: the positive-listening bonus (``listening_bonus``)."""

    model_config = ConfigDict(frozen=True, extra="forbid", use_attribute_docstrings=True)

    coef: float = Field(gt=0.0, allow_inf_nan=False)
    """Weight of the L1 distance from a decision's choice distribution to its mean over
    every message it could have received (the observation's ``counterfactuals``), so
    a listener's answer depends on the message. Covers only decisions whose
    observation lists counterfactuals."""


def group_marginals(
    logdists: Sequence[Tensor | None], keys: Sequence[Hashable]
) -> dict[Hashable, Tensor]:
    """Log of the mean distribution of each key that at least two decisions share.

    ``logdists[i]`` is decision i's log-distribution over its actions (None for
    free text); decisions with the same key offer the same actions in the same order.

    >>> import math
    >>> lp = [torch.tensor([0.0, -math.inf]), torch.tensor([-math.inf, 0.0])]
    >>> group_marginals(lp, ["ab", "ab"])["ab"].exp().tolist()
    [0.5, 0.5]
    """
    members: dict[Hashable, list[Tensor]] = defaultdict(list)
    for lp, key in zip(logdists, keys, strict=True):
        if lp is not None:
            members[key].append(lp.detach().exp())
    return {
        k: torch.stack(ps).mean(0).clamp_min(1e-12).log()
        for k, ps in members.items()
        if len(ps) > 1
    }


def signalling_bonus(logdist: Tensor, marginal_log: Tensor, beta: float = 1.0) -> Tensor:
    """CE(pi, pi_bar) - beta * H(pi) of one decision, differentiable in ``logdist`` only
    (with beta = 1 it is KL(pi || pi_bar)).

    >>> half = torch.tensor([0.5, 0.5]).log()
    >>> round(float(signalling_bonus(torch.tensor([0.0, -30.0]), half)), 4)
    0.6931
    >>> round(float(signalling_bonus(half, half, beta=0.0)), 4)
    0.6931
    """
    p = logdist.exp()
    # 0 * log 0 is 0: an action the policy never takes adds nothing. The log is
    # zeroed before the product, so its gradient is 0 there too, not 0 * -inf = NaN.
    plogp = p * logdist.masked_fill(p == 0, 0.0)
    return -(p * marginal_log.detach()).sum() + beta * plogp.sum()


def listening_bonus(logdist: Tensor, marginal_log: Tensor) -> Tensor:
    """Positive listening: ||pi - pi_bar||_1 of one decision, differentiable in
    ``logdist`` only. ``pi_bar`` is the same decision's distribution averaged over every
    message it could have received.

    L1, as Eccles et al. (2019) use it, not KL: near a fresh model's pi = pi_bar the
    gradient of KL vanishes (KL is quadratic there), and since every update moves the
    answers to all messages together, a KL bonus never grows; L1's gradient has full
    size at any distance.

    >>> round(float(listening_bonus(torch.tensor([0.0, -30.0]), torch.tensor([0.5, 0.5]).log())), 4)
    1.0
    """
    return (logdist.exp() - marginal_log.detach().exp()).abs().sum()


def mutual_information(logdists: Sequence[Tensor]) -> float:
    """H(pi_bar) - mean H(pi_i) of a set of distributions over the same actions.

    >>> import math
    >>> round(mutual_information([torch.tensor([0.0, -math.inf]), torch.tensor([-math.inf, 0.0])]), 4)
    0.6931
    """
    probs = torch.stack([lp.detach().exp() for lp in logdists])
    mean = probs.mean(0)

    def entropy(p: Tensor) -> Tensor:
        return -(p * p.clamp_min(1e-30).log()).sum(-1)

    return float(entropy(mean) - entropy(probs).mean())
