"""Train a small byte-level BPE tokenizer on game text, locally, in about a second.

Byte-level BPE can encode any string (free-text answers included) while the merges
learned from game transcripts keep prompts short: card names, verbs and action
brackets become single tokens.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast

PAD, BOS, EOS = "<pad>", "<bos>", "<eos>"
SPECIAL_TOKENS = (PAD, BOS, EOS)


MAX_ACTION_TOKENS = 256
"""Games with more distinct actions than this keep multi-token actions."""


def train_tokenizer(
    corpus: Iterable[str], *, vocab_size: int, actions: Sequence[str] = ()
) -> PreTrainedTokenizerFast:
    """A byte-level BPE tokenizer whose ids 0, 1, 2 are pad, bos and eos.

    Each action string (``"[Bet]"``), preceded by a space as it follows a prompt, is
    added as one token, so scoring the legal actions in choice mode costs a single
    forward pass over the prompt. A game with more than ``MAX_ACTION_TOKENS``
    actions keeps the learned sub-word pieces instead.
    """
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
    return PreTrainedTokenizerFast(
        tokenizer_object=tok, pad_token=PAD, bos_token=BOS, eos_token=EOS
    )
