"""IBM Granite 3.x dense models (GGUF architecture `granite`), as llama.cpp's `granite.cpp`
runs them: Llama's layer (interleaved RoPE, SwiGLU) with four multipliers the file carries:
token embeddings times `embedding_scale`, each layer's attention and feed-forward outputs
times `residual_scale` before they join the residual stream, q·k times `attention.scale`
(instead of 1/sqrt(head size)), and logits divided by `logit_scale`.
"""

from __future__ import annotations

from dataclasses import dataclass

from hearth.plugins import (
    Batch,
    Block,
    Cache,
    ConfigDefaults,
    Context,
    Layer,
    Metadata,
    Tensor,
    Transformer,
    TransformerConfig,
    Weights,
    rms_norm,
)

__all__ = ["Config", "Model"]

# What llama.cpp assumes for keys a granite file leaves out (real files carry them all).
DEFAULTS = ConfigDefaults(rope_base=10000.0, neox=False, rms_eps=1e-5, context_length=4096)


@dataclass(frozen=True)
class Config(TransformerConfig):
    """The common settings (`granite.block_count`, ..., `granite.attention.scale`), plus the
    multipliers; 0 (absent) means none, as in llama.cpp."""

    embedding_scale: float
    residual_scale: float
    logit_scale: float

    @classmethod
    def from_gguf(cls, meta: Metadata) -> Config:
        return cls.read(
            meta,
            DEFAULTS,
            embedding_scale=meta.float("embedding_scale", 0.0),
            residual_scale=meta.float("residual_scale", 0.0),
            logit_scale=meta.float("logit_scale", 1.0),
        )


class Model(Transformer[Config, Block]):
    """The Granite forward pass: the kit's blocks and loop, with the multipliers."""

    eos_tokens = ("<|end_of_text|>",)

    def __init__(self, config: Config, weights: Weights) -> None:
        super().__init__(config, weights, Block)

    def scaled(self, ctx: Context, x: Tensor, scale: float) -> Tensor:
        return ctx.scale(x, scale) if scale else x

    def embed(self, ctx: Context, batch: Batch) -> Tensor:
        return self.scaled(ctx, super().embed(ctx, batch), self.config.embedding_scale)

    def layer(self, ctx: Context, at: Layer, block: Block, h: Tensor, cache: Cache) -> Tensor:
        cfg = self.config
        x = rms_norm(ctx, h, block.attn_norm, cfg.rms_eps)  # [embd, n]
        a = block.attn.forward(ctx, x, at.batch.positions, cache, cfg, self.rope(at.index))
        a, h = at.output_rows(ctx, a, h)  # last layer: [*, n_outputs]
        h = ctx.add(self.scaled(ctx, block.attn.output(ctx, a), cfg.residual_scale), h)
        x = rms_norm(ctx, h, block.ffn_norm, cfg.rms_eps)
        return ctx.add(self.scaled(ctx, block.mlp.forward(ctx, x), cfg.residual_scale), h)

    def logits(self, ctx: Context, batch: Batch, h: Tensor) -> Tensor:
        out = super().logits(ctx, batch, h)  # [vocab, n_outputs]
        return out if batch.hidden else ctx.scale(out, 1.0 / self.config.logit_scale)
