"""Llama 2 / 3 / 3.1 / 3.2 and Mistral-style models (GGUF architecture `llama`)."""

from __future__ import annotations

import math
from dataclasses import dataclass

from hearth.engine.ml import Context, RopeOptions, Tensor, attention, bind, rms_norm, weight
from hearth.plugins import Batch, Cache, Causal

__all__ = ["Config", "Attention", "MLP", "Block", "Model"]


@dataclass(frozen=True)
class Config:
    block_count: int
    embedding_length: int
    feed_forward_length: int
    head_count: int
    head_count_kv: int
    head_dim: int
    rms_eps: float
    rope: RopeOptions
    context_length: int
    attention_scale: float
    expert_count: int
    vocab_size: int

    @classmethod
    def from_gguf(cls, meta) -> Config:  # noqa: ANN001 - a hearth Metadata view
        heads = meta.uint("attention.head_count")
        embd = meta.uint("embedding_length")
        if not heads or not embd:
            raise ValueError("the file lacks llama.attention.head_count or llama.embedding_length")
        head_dim = meta.uint("attention.key_length", embd // heads)
        scaling = meta.string("rope.scaling.type", "none")
        factor = meta.float("rope.scaling.factor", 1.0) or 1.0
        freq_scale = 1.0 / factor if scaling == "linear" else 1.0
        scale = meta.float("attention.scale", 0.0)
        return cls(
            block_count=meta.uint("block_count"),
            embedding_length=embd,
            feed_forward_length=meta.uint("feed_forward_length"),
            head_count=heads,
            head_count_kv=meta.uint("attention.head_count_kv", heads) or heads,
            head_dim=head_dim,
            rms_eps=meta.float("attention.layer_norm_rms_epsilon", 1e-5),
            rope=RopeOptions(
                dims=meta.uint("rope.dimension_count", head_dim),
                base=meta.float("rope.freq_base", 10000.0),
                scale=freq_scale,
                neox=False,
                original_context=meta.uint("rope.scaling.original_context_length", 0),
            ),
            context_length=meta.uint("context_length", 2048),
            attention_scale=scale or 1.0 / math.sqrt(head_dim),
            expert_count=meta.uint("expert_count", 0),
            vocab_size=len(meta.strings("tokenizer.ggml.tokens")),
        )


@dataclass
class Attention:
    attn_q: Tensor = weight()
    attn_k: Tensor = weight()
    attn_v: Tensor = weight()
    attn_output: Tensor = weight()

    def forward(
        self, ctx: Context, x: Tensor, positions: Tensor, cache: Cache, cfg: Config,
        factors: Tensor | None,
    ) -> Tensor:  # fmt: skip
        n = x.dim(1)
        q = ctx.reshape(ctx.mul_mat(self.attn_q, x), cfg.head_dim, cfg.head_count, n)
        k = ctx.reshape(ctx.mul_mat(self.attn_k, x), cfg.head_dim, cfg.head_count_kv, n)
        v = ctx.reshape(ctx.mul_mat(self.attn_v, x), cfg.head_dim, cfg.head_count_kv, n)
        # q: [head_dim, heads, tokens]; k, v: [head_dim, kv_heads, tokens]
        q = ctx.rope(q, positions, cfg.rope, factors)
        k = ctx.rope(k, positions, cfg.rope, factors)
        return attention(ctx, q, k, v, cfg.attention_scale, cache)  # [head_dim*heads, tokens]


@dataclass
class MLP:
    ffn_gate: Tensor = weight()
    ffn_up: Tensor = weight()
    ffn_down: Tensor = weight()

    def forward(self, ctx: Context, x: Tensor) -> Tensor:
        h = ctx.swiglu(ctx.mul_mat(self.ffn_gate, x), ctx.mul_mat(self.ffn_up, x))
        return ctx.mul_mat(self.ffn_down, h)  # [embd, tokens]


@dataclass
class Block:
    attn_norm: Tensor = weight()
    ffn_norm: Tensor = weight()
    attn: Attention | None = None
    mlp: MLP | None = None


@dataclass
class _Globals:
    token_embd: Tensor = weight(matmul=False)
    output_norm: Tensor = weight()
    output: Tensor = weight(alt="token_embd.weight", matmul=True)
    rope_freqs: Tensor | None = weight(optional=True, matmul=False)


class Model:
    """The llama forward pass; see hearth.plugins.registry for the contract."""

    default_chat_template = None  # llama files carry their own template
    eos_tokens: tuple[str, ...] = ("<|eot_id|>", "<|eom_id|>")

    def __init__(self, config: Config, weights) -> None:  # noqa: ANN001 - a WeightStore
        self.config = config
        g = bind(_Globals, weights)
        self.token_embd, self.output_norm, self.output = g.token_embd, g.output_norm, g.output
        self.rope_freqs = g.rope_freqs
        self.blocks = [
            bind(
                Block,
                weights,
                f"blk.{i}.",
                attn=bind(Attention, weights, f"blk.{i}."),
                mlp=bind(MLP, weights, f"blk.{i}."),
            )
            for i in range(config.block_count)
        ]

    def validate(self) -> None:
        if self.config.expert_count > 0:
            raise ValueError("mixture-of-experts llama files (e.g. Mixtral) are not supported yet")
        if self.config.head_count % self.config.head_count_kv:
            raise ValueError("head_count must be a multiple of head_count_kv")

    def make_cache(self) -> Cache:
        return Causal(shift=self.shift)

    def shift(self, ctx: Context, layer: int, key: Tensor, delta: Tensor) -> Tensor:
        return ctx.rope(key, delta, self.config.rope, self.rope_freqs)

    def forward(self, ctx: Context, batch: Batch, cache: Cache) -> Tensor:
        cfg = self.config
        h = ctx.get_rows(self.token_embd, batch.tokens)  # [embd, tokens]
        last = len(self.blocks) - 1
        for i, block in enumerate(self.blocks):
            cache.set_layer(i)
            x = rms_norm(ctx, h, block.attn_norm, cfg.rms_eps)
            a = block.attn.forward(ctx, x, batch.positions, cache, cfg, self.rope_freqs)  # type: ignore[union-attr]
            if i == last:  # only the rows whose logits are wanted go on
                a = ctx.get_rows(a, batch.outputs)
                h = ctx.get_rows(h, batch.outputs)
            h = ctx.add(ctx.mul_mat(block.attn.attn_output, a), h)  # type: ignore[union-attr]
            x = rms_norm(ctx, h, block.ffn_norm, cfg.rms_eps)
            h = ctx.add(block.mlp.forward(ctx, x), h)  # type: ignore[union-attr]
        h = rms_norm(ctx, h, self.output_norm, cfg.rms_eps)
        if batch.hidden:
            return h  # [embd, outputs]
        return ctx.mul_mat(self.output, h)  # [vocab, outputs]
