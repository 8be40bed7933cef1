"""Train a small byte-level BPE tokenizer on game text, locally, in about a second.

Byte-level BPE can encode any string (free-text answers included) while the merges
learned from game transcripts keep prompts short: card names, verbs and action
brackets become single tokens.

A tokenizer for the free-text path (``text=True``) can also *write*: its corpus adds
ordinary English reasoning, the reasoning tags and ``\\boxed{`` are single tokens, and
it carries a chat template (role markers as special tokens, each assistant message
closed by the end-of-sequence token), so chat context works on the tiny model as it
does on real checkpoints.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast

PAD, BOS, EOS = "<pad>", "<bos>", "<eos>"
SPECIAL_TOKENS = (PAD, BOS, EOS)
ROLE_TOKENS = ("<|system|>", "<|user|>", "<|assistant|>")
FORMAT_TOKENS = ("<think>", "</think>", "\\boxed{")
"""Written by the model, so not special: decoding keeps them for the answer parser."""

CHAT_TEMPLATE = (
    "{% for m in messages %}{{ '<|' + m['role'] + '|>' + '\n' + m['content'] }}"
    "{% if m['role'] == 'assistant' %}{{ '<eos>' }}{% endif %}{{ '\n' }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|assistant|>' + '\n' }}{% endif %}"
)
"""The tiny tokenizer's chat template: an assistant message ends with EOS, which is
where a sampled answer stops."""

WORDS = (
    "I have a strong card, so I bet. My card is weak, so I pass and keep my chips. "
    "The other player bet, which suggests a strong hand; I think calling is best here. "
    "Let me think about what my opponent holds before I act. If I fold I lose the ante, "
    "if I call I may win the pot. I take the center because it blocks the most lines. "
    "You take the books and I take the hats: that is a fair deal, I accept. "
    "I will walk away if the offer is worse than nothing. Because the value is high, "
    "I raise. The public card pairs my card, so I am likely to win. It is my turn now. "
    "I send the message that names the target, and the receiver picks it. "
)
"""Ordinary reasoning text, so that the merges hold words a model can write."""


MAX_ACTION_TOKENS = 256
"""Games with more distinct actions than this keep multi-token actions."""


def train_tokenizer(
    corpus: Iterable[str], *, vocab_size: int, actions: Sequence[str] = (), text: bool = False
) -> PreTrainedTokenizerFast:
    """A byte-level BPE tokenizer whose ids 0, 1, 2 are pad, bos and eos.

    Each action string (``"[Bet]"``), preceded by a space as it follows a prompt, is
    added as one token, so scoring the legal actions in choice mode costs a single
    forward pass over the prompt. A game with more than ``MAX_ACTION_TOKENS``
    actions keeps the learned sub-word pieces instead. ``text`` makes the tokenizer
    of the free-text path (see the module docstring); without it the tokenizer is the
    one choice mode has always had.
    """
    if text:
        corpus = [*corpus, *[WORDS] * 40]
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(corpus, trainer=trainer)
    if 0 < len(actions) <= MAX_ACTION_TOKENS:
        tok.add_tokens([AddedToken(" " + a, normalized=False) for a in sorted(set(actions))])
    if text:
        tok.add_tokens([AddedToken(t, normalized=False) for t in FORMAT_TOKENS])
        tok.add_special_tokens([AddedToken(t, normalized=False) for t in ROLE_TOKENS])
    out = PreTrainedTokenizerFast(tokenizer_object=tok, pad_token=PAD, bos_token=BOS, eos_token=EOS)
    if text:
        out.chat_template = CHAT_TEMPLATE
    return out
