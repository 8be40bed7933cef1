"""Prompts encoded in batches: the tokenizer's own ids, at a fraction of its cost.

A game's prompts are its rules text and a few lines of state, and a game with many
positions (tic-tac-toe) meets hundreds of new ones in every rollout. Two things make
encoding them cheap without changing one id:

* A fast tokenizer's Rust side encodes a batch without the character offsets that the
  ``transformers`` wrapper computes and converts for every token, only to drop them.
* Most of what is left is the byte-level pre-tokenizer's regular expression, run over
  the same lines again and again. Where a tokenizer's structure guarantees that no
  token crosses a line break between two visible characters (``splits_at_lines``),
  each such line is encoded once and a prompt's ids are its lines' ids in turn.

Content put into a chat template (observations, other players' messages, demos) is
text, however it is spelled: ``hide_specials`` masks what spells a special token
before rendering, and ``encode_rendered`` gives the rendering's ids with only the
template's own special tokens as such.
"""

from __future__ import annotations

import json
import re
import weakref
from collections.abc import Sequence
from dataclasses import dataclass, field
from itertools import chain

from transformers import PreTrainedTokenizerBase

LINE_BREAK = re.compile(r"(?<=[!-~]\n)(?=[!-~])")
"""Where a text is cut into separately encoded pieces: after a line break that has a
visible ASCII character on each side."""

HIDDEN = re.compile("\x00coplay-special-([0-9a-f]+)\x00")
"""What ``hide_specials`` puts for a special token's spelling (its UTF-8 bytes in hex):
nothing a tokenizer reads as a token, and passed through by templates as it is."""

MAX_PIECES = 200_000
"""Lines kept per tokenizer; past it the store starts again (a long run's text games
write new lines without end, and their ids would otherwise only accumulate)."""


def splits_at_lines(backend) -> bool:
    """Whether a Rust tokenizer's ids for a text are those of its ``LINE_BREAK`` pieces,
    concatenated.

    True for a byte-level BPE with GPT-2's splitting rule (the default tokenizers,
    GPT-2's family) and nothing else on the way: no normaliser, no prefix space, no
    truncation or padding, and no added token that holds a line break or takes the
    whitespace to its left. The rule (``'s|'t|...| ?\\p{L}+| ?\\p{N}+|
    ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+``) cuts "x\\nY" into "x", "\\n", "Y" whether or
    not "Y" follows, and merges never cross its cuts. Any other structure is encoded
    whole."""
    try:
        spec = json.loads(backend.to_str())
    except (AttributeError, TypeError, ValueError):
        return False
    pre = spec.get("pre_tokenizer") or {}
    return (
        spec.get("normalizer") is None
        and spec.get("truncation") is None
        and spec.get("padding") is None
        and pre.get("type") == "ByteLevel"
        and pre.get("use_regex") is True
        and pre.get("add_prefix_space") is False
        and (spec.get("model") or {}).get("dropout") in (None, 0.0)
        and all(
            "\n" not in t.get("content", "") and not t.get("lstrip")
            for t in spec.get("added_tokens") or []
        )
    )


@dataclass
class _Encoder:
    """What ``encode_texts`` keeps per tokenizer."""

    rust_agrees: bool | None = None  # its Rust side gave its own ids (None: not asked yet)
    by_lines: bool = False
    pieces: dict[str, list[int]] = field(default_factory=dict)

    def lines(self, encode, texts: Sequence[str]) -> list[list[int]]:
        cut = [LINE_BREAK.split(t) for t in texts]
        new = list(dict.fromkeys(p for parts in cut for p in parts if p not in self.pieces))
        if len(self.pieces) + len(new) > MAX_PIECES:
            self.pieces.clear()
            new = list(dict.fromkeys(chain.from_iterable(cut)))
        if new:
            rows = encode(new, add_special_tokens=False)
            self.pieces.update(zip(new, (row.ids for row in rows), strict=True))
        store = self.pieces
        return [list(chain.from_iterable(store[p] for p in parts)) for parts in cut]


_ENCODERS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def encode_texts(tokenizer: PreTrainedTokenizerBase, texts: Sequence[str]) -> list[list[int]]:
    """Token ids of each text, no special tokens added: the ids ``tokenizer(texts)``
    gives, through the tokenizer's Rust side (by lines where ``splits_at_lines``).

    A wrapper that changes the text on its way (a tokenizer's own Python-side rules)
    is found out on its first batch, whose first text is encoded both ways, and keeps
    its own call; so does a tokenizer without a Rust side. A rendering with contents
    that spelled special tokens (``hide_specials``) gets ``encode_rendered``'s ids."""
    texts = list(texts)
    if not texts:  # a tokenizer's own call refuses an empty batch
        return []
    hidden = {i for i, t in enumerate(texts) if HIDDEN.search(t)}
    if hidden:  # rare: encoded alone, the rest as a batch
        rest = iter(encode_texts(tokenizer, [t for i, t in enumerate(texts) if i not in hidden]))
        return [
            encode_rendered(tokenizer, t) if i in hidden else next(rest)
            for i, t in enumerate(texts)
        ]
    backend = getattr(tokenizer, "backend_tokenizer", None)
    encode = getattr(backend, "encode_batch_fast", None)
    state = _ENCODERS.get(tokenizer)
    if state is None and encode is not None:
        state = _ENCODERS[tokenizer] = _Encoder(by_lines=splits_at_lines(backend))
    if encode is None or state.rust_agrees is False:
        return tokenizer(texts, add_special_tokens=False)["input_ids"]
    if state.by_lines:
        rows = state.lines(encode, texts)
    else:
        rows = [row.ids for row in encode(texts, add_special_tokens=False)]
    if state.rust_agrees is None:
        own = tokenizer(texts[:1], add_special_tokens=False)["input_ids"][0]
        state.rust_agrees = list(own) == rows[0]
        if not state.rust_agrees:
            return tokenizer(texts, add_special_tokens=False)["input_ids"]
    return rows


def _spellings(tokenizer) -> re.Pattern | None:
    """A pattern for the texts ``tokenizer`` reads as its special tokens (None: it has
    none), the longest first where one spelling holds another, as the tokenizer
    matches them."""
    added = getattr(tokenizer, "added_tokens_decoder", None) or {}
    spelled = {t.content for t in added.values() if t.special}
    spelled |= set(getattr(tokenizer, "all_special_tokens", ()))
    if not spelled:
        return None
    return re.compile("|".join(re.escape(s) for s in sorted(spelled, key=len, reverse=True)))


def hide_specials(tokenizer, content: str) -> str:
    """``content`` to render into a chat template, each spelling of a special token in it
    masked (``HIDDEN``), so that ``encode_rendered`` reads it as text: a player who
    writes ``<eos>`` to another ends nothing. Ordinary text comes back unchanged.

    >>> from types import SimpleNamespace as NS
    >>> hide_specials(NS(all_special_tokens=["<eos>"]), "ok<eos>")
    'ok\\x00coplay-special-3c656f733e\\x00'
    """
    pattern = _spellings(tokenizer)
    if pattern is None:
        return content
    return pattern.sub(lambda m: f"\x00coplay-special-{m.group().encode().hex()}\x00", content)


def _unhidden(text: str) -> str:
    return HIDDEN.sub(lambda m: bytes.fromhex(m.group(1)).decode(), text)


def encode_rendered(tokenizer, text: str) -> list[int]:
    """Ids of a chat template's rendering whose contents went through ``hide_specials``:
    the template's own special tokens as such, the contents as text. No special tokens
    are added.

    A rendering with nothing hidden is encoded in one call: the tokenizer's own ids.
    Else it is cut at the template's special tokens and each piece is encoded with
    spellings of special tokens as text; the tokenizer cuts there itself before it
    encodes, so the pieces keep the ids they have in one call, but for a tokenizer
    whose special tokens strip the whitespace beside them or whose prefix space goes
    to the text's first piece alone."""
    if HIDDEN.search(text) is None:
        return list(tokenizer(text, add_special_tokens=False)["input_ids"])
    pattern = _spellings(tokenizer)
    parts = pattern.split(text)  # the text between the template's special tokens
    specials = pattern.findall(text)
    rows = tokenizer(
        [_unhidden(p) for p in parts], add_special_tokens=False, split_special_tokens=True
    )["input_ids"]
    ids = list(rows[0])
    for special, row in zip(specials, rows[1:], strict=True):
        ids += [tokenizer.convert_tokens_to_ids(special), *row]
    return ids
