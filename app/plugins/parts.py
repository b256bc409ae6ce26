"""The weight groups of a transformer layer's two halves, and what they compute (shapes in
ggml order; `n` is the number of tokens): self-attention with separate q/k/v projections
(`Attention`, biases when the file has them), with per-head q/k norms (`NormedAttention`) or
with one fused q/k/v matrix (`FusedAttention`), all sharing RoPE, the cache and the output
projection (`Attend`); the gated feed-forward network with separate (`GatedMLP`) or fused
(`FusedMLP`) gate and up matrices. Fields are GGUF names within `blk.N.` (`weight()`).
Re-exported by `hearth.plugins.transformer` and `hearth.plugins`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Protocol

from ..engine.kvcache import Cache
from ..engine.ml import Context, RopeOptions, Tensor, attention, gelu_tanh, linear, rms_norm, weight

__all__ = ["Attend", "Attention", "FusedAttention", "FusedMLP", "GatedMLP", "NormedAttention"]


class TransformerConfig(Protocol):
    """The sizes attention reads (`hearth.plugins.TransformerConfig` has them)."""

    @property
    def head_count(self) -> int: ...
    @property
    def head_count_kv(self) -> int: ...
    @property
    def key_length(self) -> int: ...
    @property
    def value_length(self) -> int: ...
    @property
    def rms_eps(self) -> float: ...
    @property
    def attention_scale(self) -> float: ...


class Attend:
    """What every self-attention weight group does once it has per-head q, k and v: RoPE,
    attention through the KV cache, the output projection. A group subclasses it, binds
    `attn_output` (and `attn_output_bias`) and writes `qkv`."""

    attn_output: Tensor
    attn_output_bias: Tensor | None
    # gpt-oss: a logit per head in every softmax's normaliser, without a value (`Attention`
    # binds `attn_sinks.weight` when the file has it)
    attn_sinks: Tensor | None = None

    def qkv(self, ctx: Context, x: Tensor, cfg: TransformerConfig) -> tuple[Tensor, Tensor, Tensor]:
        """x `[embd, n]` -> q `[key_length, heads, n]`, k `[key_length, kv_heads, n]`,
        v `[value_length, kv_heads, n]`."""
        raise NotImplementedError

    def forward(
        self,
        ctx: Context,
        x: Tensor,
        positions: Tensor,
        cache: Cache,
        cfg: TransformerConfig,
        rope: RopeOptions,
        factors: Tensor | None = None,
    ) -> Tensor:
        """Project, RoPE q and k at `positions` (I32 `[n]`; `factors`: per-frequency
        divisors such as Llama 3.1's `rope_freqs`), store k and v in the cache's current
        layer and attend, scaled by `cfg.attention_scale` (with the sinks when the file has
        them). Returns `[value_length*heads, n]` (before the output projection: prune rows
        first, then call `output`)."""
        q, k, v = self.qkv(ctx, x, cfg)
        q = ctx.rope(q, positions, rope, factors)
        k = ctx.rope(k, positions, rope, factors)
        return attention(ctx, q, k, v, cfg.attention_scale, cache, sinks=self.attn_sinks)

    def output(self, ctx: Context, a: Tensor) -> Tensor:
        """The output projection: `[value_length*heads, n]` -> `[embd, n]`."""
        return linear(ctx, a, self.attn_output, self.attn_output_bias)


@dataclass
class Attention(Attend):
    """Self-attention weights of one layer (`blk.N.attn_*`); biases bind when present."""

    attn_q: Tensor = weight()
    attn_k: Tensor = weight()
    attn_v: Tensor = weight()
    attn_output: Tensor = weight()
    attn_q_bias: Tensor | None = weight("attn_q.bias", optional=True)
    attn_k_bias: Tensor | None = weight("attn_k.bias", optional=True)
    attn_v_bias: Tensor | None = weight("attn_v.bias", optional=True)
    attn_output_bias: Tensor | None = weight("attn_output.bias", optional=True)
    attn_sinks: Tensor | None = weight("attn_sinks.weight", optional=True, matmul=False)

    def qkv(self, ctx: Context, x: Tensor, cfg: TransformerConfig) -> tuple[Tensor, Tensor, Tensor]:
        """Three projections (biases added before the reshape)."""
        n = x.dim(1)
        q = linear(ctx, x, self.attn_q, self.attn_q_bias)
        k = linear(ctx, x, self.attn_k, self.attn_k_bias)
        v = linear(ctx, x, self.attn_v, self.attn_v_bias)
        return (
            ctx.reshape(q, cfg.key_length, cfg.head_count, n),
            ctx.reshape(k, cfg.key_length, cfg.head_count_kv, n),
            ctx.reshape(v, cfg.value_length, cfg.head_count_kv, n),
        )


@dataclass
class NormedAttention(Attention):
    """`Attention` with RMS-normed queries and keys, per head (`attn_q_norm`, `attn_k_norm`
    `[key_length]`), before RoPE: Qwen3, Qwen3-MoE."""

    attn_q_norm: Tensor = weight()
    attn_k_norm: Tensor = weight()

    def qkv(self, ctx: Context, x: Tensor, cfg: TransformerConfig) -> tuple[Tensor, Tensor, Tensor]:
        q, k, v = super().qkv(ctx, x, cfg)
        q = rms_norm(ctx, q, self.attn_q_norm, cfg.rms_eps)
        return q, rms_norm(ctx, k, self.attn_k_norm, cfg.rms_eps), v


@dataclass
class FusedAttention(Attend):
    """Self-attention with one projection for q, k and v (`blk.N.attn_qkv`: Phi-3): its rows
    are the queries, then the keys, then the values."""

    attn_qkv: Tensor = weight()
    attn_output: Tensor = weight()
    attn_qkv_bias: Tensor | None = weight("attn_qkv.bias", optional=True)
    attn_output_bias: Tensor | None = weight("attn_output.bias", optional=True)

    def qkv(self, ctx: Context, x: Tensor, cfg: TransformerConfig) -> tuple[Tensor, Tensor, Tensor]:
        """Views of the one product (v made contiguous for the cache), as llama.cpp's."""
        qkv = linear(ctx, x, self.attn_qkv, self.attn_qkv_bias)  # [q + 2 kv, n]
        n, f32 = x.dim(1), qkv.strides[0]
        q_size = cfg.key_length * cfg.head_count
        k_size = cfg.key_length * cfg.head_count_kv

        def heads(size: int, count: int, offset: int) -> Tensor:  # [size, count, n]
            return ctx.view(qkv, (size, count, n), (size * f32, qkv.strides[1]), offset * f32)

        q = heads(cfg.key_length, cfg.head_count, 0)
        k = heads(cfg.key_length, cfg.head_count_kv, q_size)
        v = heads(cfg.value_length, cfg.head_count_kv, q_size + k_size)
        return q, k, ctx.cont(v)


@dataclass
class GatedMLP:
    """The gated feed-forward network of one layer (`blk.N.ffn_gate/up/down`)."""

    ffn_gate: Tensor = weight()
    ffn_up: Tensor = weight()
    ffn_down: Tensor = weight()

    def forward(
        self,
        ctx: Context,
        x: Tensor,
        activation: Literal["silu", "gelu", "gelu_f32"] = "silu",
    ) -> Tensor:
        """down(act(gate·x) * up·x): `[embd, n]` -> `[embd, n]`; SiLU is SwiGLU (Llama,
        Qwen), GELU is GeGLU (Gemma), fused in one op either way, as llama.cpp computes them
        (ggml's GELU reads a table of F16 values, up to 2e-3 off). "gelu_f32" is the tanh
        GELU in F32 throughout (`nn.gelu_tanh`, eight ops): as close as PyTorch's."""
        gate, up = ctx.mul_mat(self.ffn_gate, x), ctx.mul_mat(self.ffn_up, x)
        if activation == "silu":
            h = ctx.swiglu(gate, up)
        elif activation == "gelu":
            h = ctx.geglu(gate, up)
        else:
            h = ctx.mul(gelu_tanh(ctx, gate), up)
        return ctx.mul_mat(self.ffn_down, h)  # [embd, n]


@dataclass
class FusedMLP:
    """A gated feed-forward network whose gate and up projections are one matrix
    (`blk.N.ffn_up` `[embd, 2 ffn]`: Phi-3): the first half of its rows is the gate."""

    ffn_up: Tensor = weight()
    ffn_down: Tensor = weight()

    def forward(self, ctx: Context, x: Tensor) -> Tensor:
        """down(silu(gate·x) * up·x): `[embd, n]` -> `[embd, n]` (SwiGLU over the halves)."""
        both = ctx.mul_mat(self.ffn_up, x)  # [2 ffn, n]
        ffn, n, f32 = both.dim(0) // 2, x.dim(1), both.strides[0]
        gate = ctx.view(both, (ffn, n), (both.strides[1],))
        up = ctx.view(both, (ffn, n), (both.strides[1],), ffn * f32)
        return ctx.mul_mat(self.ffn_down, ctx.swiglu(gate, up))
