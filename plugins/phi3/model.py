"""Phi-3 / Phi-3.5 / Phi-4 mini (GGUF architecture `phi3`), as llama.cpp's `phi3.cpp` runs
them: Llama's pre-norm layer over fused projections (`attn_qkv`, and `ffn_up` holding the gate
and up halves: the kit's `FusedAttention` and `FusedMLP`), NeoX RoPE, and for long-context
files the su/longrope factors the file carries: `rope_factors_long` when the context per
sequence exceeds the original one (`rope.scaling.original_context_length`), else
`rope_factors_short`, with RoPE's `rope.scaling.attn_factor`."""

from __future__ import annotations

from dataclasses import dataclass, replace

from hearth.plugins import (
    Cache,
    ConfigDefaults,
    Context,
    FusedAttention,
    FusedMLP,
    Layer,
    Metadata,
    Tensor,
    Transformer,
    TransformerConfig,
    Weights,
    part,
    weight,
)

__all__ = ["Config", "FusedBlock", "Model"]

DEFAULTS = ConfigDefaults(rope_base=10000.0, neox=True, rms_eps=1e-5, context_length=4096)


@dataclass(frozen=True)
class Config(TransformerConfig):
    original_context: int  # beyond it per sequence, the long RoPE factors

    @classmethod
    def from_gguf(cls, meta: Metadata) -> Config:
        cfg = cls.read(meta, DEFAULTS, original_context=0)
        attn_factor = meta.float("rope.scaling.attn_factor", 1.0)
        original = cfg.rope.original_context or cfg.context_length
        rope = replace(cfg.rope, attn_factor=attn_factor)
        return replace(cfg, rope=rope, original_context=original)


@dataclass
class FusedBlock:
    attn_norm: Tensor = weight()
    attn: FusedAttention = part(FusedAttention)
    ffn_norm: Tensor = weight()
    mlp: FusedMLP = part(FusedMLP)


class Model(Transformer[Config, FusedBlock]):
    eos_tokens = ("<|end|>", "<|endoftext|>")

    def __init__(self, config: Config, weights: Weights) -> None:
        super().__init__(config, weights, FusedBlock)
        self.factors = (
            weights.get("rope_factors_short.weight", matmul=False),
            weights.get("rope_factors_long.weight", matmul=False),
        )
        self.rope_factors = self.factors[0]

    def set_context(self, per_sequence: int) -> None:
        self.rope_factors = self.factors[per_sequence > self.config.original_context]

    def layer(self, ctx: Context, at: Layer, block: FusedBlock, h: Tensor, cache: Cache) -> Tensor:
        return self.pre_norm_layer(ctx, at, block, h, cache)
