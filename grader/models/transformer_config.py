"""The shape of a decoder-only transformer, as module scaling counts it (given code, read it).

    from grader.models.transformer_config import TransformerConfig
    gpt3 = TransformerConfig(num_layers=96, d_model=12288, num_heads=96, num_kv_heads=96,
                             d_ff=4 * 12288, vocab_size=50257)

Plain data, checked by nobody: the functions that take a config (module scaling's
transformer_flops, training_memory, ...) say which configs they refuse. `head_dim` None means
d_model // num_heads; set it where the model's heads are not d_model wide together (PaLM 540B:
48 heads of 256 on d_model 18432). `gated_mlp` means a gated MLP (SwiGLU, GeGLU): three d_model x
d_ff matrices instead of two.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class TransformerConfig:
    num_layers: int
    d_model: int
    num_heads: int
    num_kv_heads: int
    d_ff: int
    vocab_size: int
    gated_mlp: bool = False
    head_dim: int | None = None
