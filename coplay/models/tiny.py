"""The embedded default model: a tiny causal LM built from a config, no download.

A few hundred thousand parameters is enough to represent a strategy for the small
games coplay solves exactly (Kuhn has 12 information states), and keeps a full
training run within minutes on a laptop CPU.
"""

from __future__ import annotations

import torch
from pydantic import BaseModel, ConfigDict, Field
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedModel


class TinyModelConfig(BaseModel):
    """Shape of the tiny Llama-style model built when no ``model.path`` is given."""

    model_config = ConfigDict(extra="forbid")

    hidden_size: int = Field(64, gt=0, description="Width of the residual stream.")
    num_layers: int = Field(2, gt=0, description="Transformer blocks.")
    num_heads: int = Field(4, gt=0, description="Attention heads (must divide hidden_size).")
    intermediate_size: int = Field(128, gt=0, description="MLP width.")
    vocab_size: int = Field(512, ge=300, description="Tokenizer vocabulary trained on game text.")
    max_positions: int = Field(512, gt=16, description="Longest prompt + response in tokens.")
    init_std: float = Field(
        0.02, gt=0.0, allow_inf_nan=False, description="Std of the initial weights."
    )


def build_tiny_model(cfg: TinyModelConfig, *, vocab_size: int, seed: int) -> PreTrainedModel:
    """A freshly initialised Llama-architecture causal LM of the given shape."""
    if cfg.hidden_size % cfg.num_heads:
        raise ValueError(
            f"model.tiny.hidden_size ({cfg.hidden_size}) must be divisible by "
            f"model.tiny.num_heads ({cfg.num_heads})"
        )
    config = LlamaConfig(
        vocab_size=vocab_size,
        hidden_size=cfg.hidden_size,
        intermediate_size=cfg.intermediate_size,
        num_hidden_layers=cfg.num_layers,
        num_attention_heads=cfg.num_heads,
        num_key_value_heads=cfg.num_heads,
        max_position_embeddings=cfg.max_positions,
        tie_word_embeddings=True,
        bos_token_id=1,
        eos_token_id=2,
        pad_token_id=0,
        initializer_range=cfg.init_std,
    )
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        model = LlamaForCausalLM(config)
    return model
