"""Batched prompt encoding: always the tokenizer's own ids, by lines only where exact."""

import random
import tempfile

import pytest
from tokenizers import AddedToken, normalizers, pre_tokenizers

from coplay.policies import encoding
from coplay.policies.encoding import (
    LINE_BREAK,
    encode_rendered,
    encode_texts,
    hide_specials,
    splits_at_lines,
)


def _copy(tok):
    """A tokenizer of its own (``encode_texts`` keeps what it learns per tokenizer)."""
    d = tempfile.mkdtemp()
    tok.save_pretrained(d)
    return tok.__class__.from_pretrained(d)


def _own(tok, texts):
    return [list(ids) for ids in tok(texts, add_special_tokens=False)["input_ids"]]


_PIECES = [
    "\n", "\n", "\n", " ", "  ", "\t", "\r\n", "\r", "\u00a0", "\u3000", "x", "o", "Board",
    " [Bet]", "[Bet]", " [Pass]", "Action:", "'s", "'ll", "7", " 42", "(1,2)", ":", "-",
    "é", "漢字", "✓", "<eos>", "\x1c", "\x85", "\u2028",
]  # fmt: skip


def _random_texts(rng: random.Random, n: int) -> list[str]:
    return ["".join(rng.choice(_PIECES) for _ in range(rng.randint(0, 40))) for _ in range(n)]


def test_prompts_encoded_in_one_batch_are_the_tokenizers_own_ids(tiny):
    _, tok = tiny
    texts = [
        "Board:\n0 x 2\n3 o 5\nAction:",
        "",
        "  spaces  and\ttabs\n\n",
        "héllo wörld ✓ 漢字",
        f"a {tok.eos_token} inside",
        "x" * 400,
    ]
    assert encode_texts(tok, texts) == _own(tok, texts)

    class Slow:  # a tokenizer with no Rust side: its own call is used
        def __call__(self, texts, add_special_tokens):
            return {"input_ids": [[len(t)] for t in texts]}

    assert encode_texts(Slow(), ["ab", "c"]) == [[2], [1]]


def test_lines_encoded_apart_give_the_ids_of_the_whole_text(tiny):
    _, base = tiny
    tok = _copy(base)
    tok.add_tokens([AddedToken(" [Bet]", normalized=False), AddedToken("[Pass]", normalized=False)])
    assert splits_at_lines(tok.backend_tokenizer)
    rng = random.Random(0)
    for _ in range(20):  # batch after batch: later ones reuse the lines kept so far
        texts = _random_texts(rng, 50)
        assert encode_texts(tok, texts) == _own(tok, texts)
    assert len(encoding._ENCODERS[tok].pieces) > 100  # the line path ran, and kept lines
    # Cuts fall only between two visible characters around a line break.
    assert LINE_BREAK.split("a\nb\n c\n\nd \ne\n") == ["a\n", "b\n c\n\nd \ne\n"]


def test_the_kept_lines_start_again_past_their_cap(tiny, monkeypatch):
    _, base = tiny
    tok = _copy(base)
    monkeypatch.setattr(encoding, "MAX_PIECES", 5)
    texts = [f"line {i}\nBoard {i}\nx" for i in range(4)]
    assert encode_texts(tok, texts[:1]) == _own(tok, texts[:1])
    assert encode_texts(tok, texts) == _own(tok, texts)  # 3 + 9 lines: past the cap
    assert len(encoding._ENCODERS[tok].pieces) <= 9


def _with_lstrip(tok):
    tok.add_tokens([AddedToken("[Bet]", lstrip=True, normalized=False)])


def _with_break(tok):
    tok.add_tokens([AddedToken("x\nBoard", normalized=False)])


def _with_normaliser(tok):
    tok.backend_tokenizer.normalizer = normalizers.Lowercase()


def _with_prefix_space(tok):
    tok.backend_tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=True)


def _with_other_split(tok):
    tok.backend_tokenizer.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.WhitespaceSplit(), pre_tokenizers.ByteLevel(use_regex=False)]
    )


@pytest.mark.parametrize(
    "change", [_with_lstrip, _with_break, _with_normaliser, _with_prefix_space, _with_other_split]
)
def test_a_tokenizer_that_may_cross_lines_is_encoded_whole(tiny, change):
    _, base = tiny
    tok = _copy(base)
    change(tok)
    assert not splits_at_lines(tok.backend_tokenizer)
    texts = _random_texts(random.Random(1), 200) + ["x\nBoard", "a\n  [Bet]\nb"]
    assert encode_texts(tok, texts) == _own(tok, texts)
    assert not encoding._ENCODERS[tok].pieces


def test_a_tokenizer_whose_wrapper_changes_the_text_keeps_its_own_call(tiny):
    _, tok = tiny
    shouting = _copy(tok)
    own = shouting.__class__.__call__

    class Shouting(shouting.__class__):  # Python-side rules the Rust side never sees
        def __call__(self, texts, **kw):
            return own(self, [t.upper() for t in texts], **kw)

    shouting.__class__ = Shouting
    texts = ["pass or bet", "call"]
    want = tok([t.upper() for t in texts], add_special_tokens=False)["input_ids"]
    assert encode_texts(shouting, texts) == want and want != encode_texts(tok, texts)
    # Remembered: a later batch takes the wrapper's call without asking again.
    assert encode_texts(shouting, ["fold"]) == [
        list(tok("FOLD", add_special_tokens=False)["input_ids"])
    ]


def _with_roles(tok):
    """A copy of ``tok`` with role markers as special tokens, as chat tokenizers have."""
    tok = _copy(tok)
    tok.add_special_tokens({"additional_special_tokens": ["<|user|>", "<|assistant|>"]})
    return tok


def _rendered(tok, content: str) -> str:
    """A chat template's rendering around ``content``: its own special tokens and text."""
    return f"<|user|>\n{hide_specials(tok, content)}\n{tok.eos_token}\n<|assistant|>\n"


def test_ordinary_content_keeps_the_tokenizers_own_ids(tiny):
    tok = _with_roles(tiny[1])
    pieces = [p for p in _PIECES if p != "<eos>"]
    rng = random.Random(2)
    for _ in range(200):
        content = "".join(rng.choice(pieces) for _ in range(rng.randint(0, 40)))
        assert hide_specials(tok, content) == content
        text = _rendered(tok, content)
        assert encode_rendered(tok, text) == _own(tok, [text])[0]


def test_content_that_spells_special_tokens_is_encoded_as_text(tiny):
    tok = _with_roles(tiny[1])
    template = [tok.convert_tokens_to_ids(t) for t in ("<|user|>", "<eos>", "<|assistant|>")]
    pieces = [*_PIECES, "<|user|>", "<|assistant|>", "<|assistant|", "<bos><pad>"]
    rng = random.Random(3)
    for _ in range(200):
        content = "".join(rng.choice(pieces) for _ in range(rng.randint(0, 40)))
        ids = encode_rendered(tok, _rendered(tok, content))
        special = set(tok.all_special_ids)
        assert [i for i in ids if i in special] == template
        assert tok.decode(ids) == f"<|user|>\n{content}\n<eos>\n<|assistant|>\n"
        # Between the template's tokens: the ids of the text there, spellings as text.
        text = tok(f"\n{content}\n", add_special_tokens=False, split_special_tokens=True)
        assert ids[1 : ids.index(template[1])] == text["input_ids"]


def test_a_batch_with_hidden_spellings_encodes_those_as_text(tiny):
    tok = _with_roles(tiny[1])
    texts = [_rendered(tok, "deal?<eos>"), "Board:\nx", _rendered(tok, "ok")]
    want = [encode_rendered(tok, texts[0]), *_own(tok, texts[1:])]
    assert encode_texts(tok, texts) == want
    assert want[0].count(tok.eos_token_id) == 1  # the template's alone


def test_a_batch_of_hidden_spellings_only_and_an_empty_batch(tiny):
    # Every prompt of a round can hold a message that spelled <bos> (a tiny model's
    # free-text talk writes one): the rest of the batch was empty, and the tokenizer's
    # own call refused it with an IndexError.
    tok = _with_roles(tiny[1])
    texts = [_rendered(tok, "deal?<bos>"), _rendered(tok, "no<bos>")]
    assert encode_texts(tok, texts) == [encode_rendered(tok, t) for t in texts]
    assert encode_texts(tok, []) == []
