"""Train a small byte-level BPE tokenizer on game text, locally, in about a second.

Byte-level BPE can encode any string (free-text answers included) while the merges
learned from game transcripts keep prompts short: card names, verbs and action
brackets become single tokens.
"""

from __future__ import annotations

from collections.abc import Iterable

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast

PAD, BOS, EOS = "<pad>", "<bos>", "<eos>"
SPECIAL_TOKENS = (PAD, BOS, EOS)


def train_tokenizer(corpus: Iterable[str], *, vocab_size: int) -> PreTrainedTokenizerFast:
    """A byte-level BPE tokenizer whose ids 0, 1, 2 are pad, bos and eos."""
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
    return PreTrainedTokenizerFast(
        tokenizer_object=tok, pad_token=PAD, bos_token=BOS, eos_token=EOS
    )
