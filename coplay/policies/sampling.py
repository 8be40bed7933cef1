"""Free-text sampling: answers drawn token by token, with each token's log-prob.

``sample_text`` draws from ``coplay.policies.scoring.sampling_logps``, the
distribution the learner's ``token_logps`` recomputes: its prompt pass shares the
batch's common prefix (``forward_shared``), its KV cache is preallocated
(``_Decoder``), each row and step takes one inverse-CDF draw (``draw``), and rows
leave the batch as they end (``_Answers``).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from transformers import PreTrainedModel
from transformers.cache_utils import DynamicLayer

from coplay.models.devices import to_device
from coplay.policies.scoring import forward_shared, sampling_logps


def check_sampling(*, temperature: float, top_k: int, top_p: float) -> None:
    """Refuse sampling parameters that define no distribution."""
    if not temperature > 0:  # NaN as well, which every comparison fails
        raise ValueError(f"temperature must be > 0, got {temperature}")
    if top_k < 0:
        raise ValueError(f"top_k must be >= 0 (0 keeps every token), got {top_k}")
    if not 0.0 < top_p <= 1.0:
        raise ValueError(f"top_p must be in (0, 1], got {top_p}")


def draw(logp: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """One token per row of ``logp`` (B, V), by inverting its CDF at ``u`` (B,) in [0, 1).

    Exact for the distribution exp(logp) (up to float rounding of the CDF) and
    needs one uniform per row, where the exponential race behind ``multinomial``
    needs one per vocabulary entry. Zero-probability tokens are never drawn: the
    first token whose CDF exceeds ``u`` has mass, and rounding at the top end falls
    back to the last token with mass. A NaN row has none: it draws its last token,
    whose NaN log-prob ``sample_text`` refuses.
    """
    cdf = logp.exp().cumsum(-1)
    total = cdf[:, -1:].contiguous()
    idx = torch.searchsorted(cdf, u[:, None].to(cdf.dtype) * total, right=True)
    last = torch.searchsorted(cdf, total).clamp_(max=logp.shape[-1] - 1)
    return torch.minimum(idx, last).squeeze(-1)


class _SlabLayer(DynamicLayer):
    """A layer's keys and values in buffers allocated once for the whole answer.

    ``update`` writes the new step into the next free column and returns views of
    the filled part, so attention reads exactly the tokens a grown cache would hold,
    without the copy of the whole cache that concatenation makes every step.
    """

    def __init__(self, keys: torch.Tensor, values: torch.Tensor, room: int) -> None:
        super().__init__()
        b, h, n, _ = keys.shape
        self.kbuf = keys.new_empty((b, h, n + room, keys.shape[-1]))
        self.vbuf = values.new_empty((b, h, n + room, values.shape[-1]))
        self.kbuf[:, :, :n] = keys
        self.vbuf[:, :, :n] = values
        self.dtype, self.device, self.n = keys.dtype, keys.device, n
        self.is_initialized = True
        self._views()

    def _views(self) -> None:
        self.keys, self.values = self.kbuf[:, :, : self.n], self.vbuf[:, :, : self.n]

    def update(self, key_states, value_states, *args, **kwargs):
        q = key_states.shape[-2]
        self.kbuf[:, :, self.n : self.n + q] = key_states
        self.vbuf[:, :, self.n : self.n + q] = value_states
        self.n += q
        self._views()
        return self.keys, self.values

    def batch_select_indices(self, indices: torch.Tensor) -> None:
        self.kbuf, self.vbuf = self.kbuf[indices], self.vbuf[indices]
        self._views()


# Attention kernels that take a ready-made additive 4-D mask as it is.
_ADDITIVE_MASK_KERNELS = ("sdpa", "eager")


class _Decoder:
    """One-token steps of a batch after its prompt pass, with a preallocated cache.

    The prompt's cache moves into buffers with room for ``room`` more tokens, and
    the attention mask is allocated at its final width; ``select`` drops rows. With
    full attention and the sdpa or eager kernels, the mask is passed ready-made as
    an additive (B, 1, 1, K) float mask: the model then builds none per step, and
    the kernels run faster on it than on the boolean mask they would be given. Other
    layer kinds (a sliding window) and kernels keep their own cache and 2-D mask.
    """

    def __init__(
        self, model: PreTrainedModel, cache, attn: torch.Tensor, pos: torch.Tensor, room: int
    ) -> None:
        full = all(type(layer) is DynamicLayer for layer in cache.layers)
        if full:
            cache.layers = [_SlabLayer(la.keys, la.values, room) for la in cache.layers]
        self.cache, self.width = cache, attn.shape[1]
        mask = torch.cat([attn, attn.new_ones((attn.shape[0], room))], dim=-1)
        if full and model.config._attn_implementation in _ADDITIVE_MASK_KERNELS:
            dtype = cache.layers[0].keys.dtype
            mask = torch.zeros(mask.shape, dtype=dtype, device=mask.device).masked_fill_(
                mask == 0, torch.finfo(dtype).min
            )[:, None, None, :]
        self.attn = mask
        self.next_pos = pos[:, -1:] + 1

    def step(self, model: PreTrainedModel, tokens: torch.Tensor) -> torch.Tensor:
        """Feed ``tokens`` (B,), one per row; the next-token logits (B, V)."""
        self.width += 1
        out = model(
            input_ids=tokens[:, None],
            attention_mask=self.attn[..., : self.width],
            position_ids=self.next_pos,
            past_key_values=self.cache,
            use_cache=True,
            logits_to_keep=1,
        )
        self.next_pos = self.next_pos + 1
        return out.logits[:, -1]

    def select(self, keep: torch.Tensor) -> None:
        self.cache.batch_select_indices(keep)
        self.attn, self.next_pos = self.attn[keep], self.next_pos[keep]


def _stop_table(
    stop: Sequence[Sequence[int]], eos_id: int | None, device: torch.device
) -> list[torch.Tensor]:
    """EOS and the stop sequences as (S, m) id tensors, one per length m."""
    by_len: dict[int, list[tuple[int, ...]]] = {}
    for s in [*([(eos_id,)] if eos_id is not None else []), *(tuple(s) for s in stop)]:
        if not s:
            raise ValueError("a stop sequence must hold at least one token id")
        by_len.setdefault(len(s), []).append(s)
    return [to_device(torch.tensor(v, dtype=torch.long), device) for _, v in sorted(by_len.items())]


# Rows that ended stay in the batch (their steps ignored) until this share of it has:
# dropping copies every layer's cache, so it is batched rather than done row by row.
_DROP_SHARE = 8


class _Answers:
    """The answers being written: for each batch row (``rows``: the prompt it answers)
    its tokens, their log-probs and where it ended; rows that ended are moved out
    when ``drop`` takes them from the batch."""

    def __init__(self, b: int, n: int, device: torch.device) -> None:
        self.rows = torch.arange(b, device=device)
        self.tokens = torch.zeros((b, n), dtype=torch.long, device=device)
        self.logps = torch.zeros((b, n), device=device)
        self.ends = torch.full((b,), n, dtype=torch.long, device=device)
        self.live = torch.ones(b, dtype=torch.bool, device=device)
        self.alive = b
        self.done = (self.tokens.clone(), self.logps.clone(), self.ends.clone())

    def record(self, t: int, nxt: torch.Tensor, logp: torch.Tensor, stops: list) -> int:
        """Step ``t``'s tokens and their log-probs; how many rows are still writing."""
        self.tokens[:, t] = nxt
        self.logps[:, t] = logp.gather(-1, nxt[:, None]).squeeze(-1)
        ended = self.live & _ends(self.tokens, t, stops)
        self.ends = torch.where(ended, t + 1, self.ends)
        self.live &= ~ended
        self.alive = int(self.live.sum())  # the one host sync of a step
        return self.alive

    def drop(self) -> torch.Tensor | None:
        """Move ended rows out once they are ``1/_DROP_SHARE`` of the batch; the
        batch rows kept, or None when none were dropped."""
        if len(self.rows) - self.alive < max(1, len(self.rows) // _DROP_SHARE):
            return None
        self._move_out(~self.live)
        keep = self.live.nonzero().squeeze(-1)
        self.rows, self.tokens, self.logps = self.rows[keep], self.tokens[keep], self.logps[keep]
        self.ends, self.live = self.ends[keep], self.live[keep]
        return keep

    def _move_out(self, which: torch.Tensor) -> None:
        rows = self.rows[which]
        for out, mine in zip(self.done, (self.tokens, self.logps, self.ends), strict=True):
            out[rows] = mine[which]

    def result(self) -> list[tuple[tuple[int, ...], tuple[float, ...]]]:
        self._move_out(torch.ones_like(self.live))
        _, logps, ends = self.done
        written = torch.arange(logps.shape[1], device=logps.device) < ends[:, None]
        if (logps.isnan() & written).any():
            raise ValueError(
                "the model's next-token distribution is NaN: its weights or logits are not "
                "finite (a diverged update, or a temperature so small that logits / "
                "temperature overflow)"
            )
        ids, lps, lens = (x.tolist() for x in self.done)
        return [(tuple(i[:n]), tuple(lp[:n])) for i, lp, n in zip(ids, lps, lens, strict=True)]


def _ends(tokens: torch.Tensor, t: int, table: list[torch.Tensor]) -> torch.Tensor:
    """Rows whose tokens[:, : t + 1] end with a stop sequence, (B,) bool."""
    hit = torch.zeros(tokens.shape[0], dtype=torch.bool, device=tokens.device)
    for seqs in table:
        m = seqs.shape[1]
        if m <= t + 1:
            tail = tokens[:, t + 1 - m : t + 1]  # (B, m)
            hit |= (tail[:, None, :] == seqs[None]).all(-1).any(-1)
    return hit


@torch.no_grad()
def _uniforms(
    steps: int, rows: int, generator: torch.Generator, row_seeds: Sequence[int] | None
) -> torch.Tensor:
    """(steps, rows) uniforms: from ``generator`` at once, or column i from its own
    generator seeded with ``row_seeds[i]``."""
    if row_seeds is None:
        return torch.rand((steps, rows), generator=generator)
    if len(row_seeds) != rows:
        raise ValueError(f"got {rows} prompts but {len(row_seeds)} row seeds")
    own = [torch.rand(steps, generator=torch.Generator().manual_seed(s)) for s in row_seeds]
    return torch.stack(own, dim=1)


@torch.no_grad()  # sampling is never differentiated: no graph through the cache
def sample_text(
    model: PreTrainedModel,
    prompts: Sequence[Sequence[int]],
    *,
    max_new_tokens: int,
    temperature: float,
    eos_id: int | None,
    pad_id: int,
    generator: torch.Generator,
    top_p: float = 1.0,
    top_k: int = 0,
    stop: Sequence[Sequence[int]] = (),
    row_seeds: Sequence[int] | None = None,
) -> list[tuple[tuple[int, ...], tuple[float, ...]]]:
    """Ancestral sampling from ``sampling_logps`` (temperature, top-k, top-p), with the
    log-prob of every token under the distribution it was drawn from.

    An answer ends after EOS, after any of the ``stop`` id sequences (included in the
    answer), or at ``max_new_tokens``. A small explicit loop rather than
    ``generate``: it records the exact sampling log-probs and uses the padding-free
    positions of ``token_logps``, so the learner's recomputation (with the same
    parameters) matches. The prompt pass shares the batch's common prefix; the cache
    is preallocated (``_Decoder``); finished rows leave the batch (``_Answers``). One
    uniform per row and step is drawn up front from ``generator`` and indexed by
    row, so a row's draws do not depend on which other rows have finished; with
    ``row_seeds`` row i's uniforms come from its own seed instead, so they do not depend
    on which other prompts share the call either.
    """
    check_sampling(temperature=temperature, top_k=top_k, top_p=top_p)
    b = len(prompts)
    if b == 0 or max_new_tokens <= 0:
        return [((), ())] * b
    device = next(model.parameters()).device
    uniforms = to_device(_uniforms(max_new_tokens, b, generator, row_seeds), device)
    stops = _stop_table(stop, eos_id, device)
    out, attn, pos = forward_shared(model, prompts, pad_id, use_cache=True, logits_to_keep=1)
    dec = _Decoder(model, out.past_key_values, attn, pos, room=max_new_tokens - 1)
    answers, logits = _Answers(b, max_new_tokens, device), out.logits[:, -1]
    for t in range(max_new_tokens):
        logp = sampling_logps(logits, temperature=temperature, top_k=top_k, top_p=top_p)
        nxt = draw(logp, uniforms[t, answers.rows])
        if answers.record(t, nxt, logp, stops) == 0 or t + 1 == max_new_tokens:
            break
        keep = answers.drop()
        if keep is not None:
            dec.select(keep)
            nxt = nxt[keep]
        logits = dec.step(model, nxt)
    return answers.result()
