"""Gemma 3 text models (GGUF architecture `gemma3`).

Sliding-window layers are interleaved with global ones: with pattern P (metadata
`sliding_window_pattern`, default 6) layer i is global when (i + 1) % P == 0, else it attends
to the last `sliding_window` positions and uses the local RoPE base (`rope.freq_base_swa`,
default 10000) without the global RoPE scaling.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from hearth.engine.ml import Context, RopeOptions, Tensor, attention, bind, rms_norm, weight
from hearth.plugins import Batch, Cache, Causal, Wrapper

__all__ = ["Config", "Attention", "MLP", "Block", "Model"]

_DEFAULT_PATTERN = 6
_LOCAL_ROPE_BASE = 10000.0


@dataclass(frozen=True)
class Config:
    block_count: int
    embedding_length: int
    feed_forward_length: int
    head_count: int
    head_count_kv: int
    key_length: int
    value_length: int
    rms_eps: float
    rope_global: RopeOptions
    rope_local: RopeOptions
    sliding_window: int
    sliding_layers: tuple[bool, ...]
    query_scale: float
    final_softcap: float
    context_length: int

    @classmethod
    def from_gguf(cls, meta) -> Config:  # noqa: ANN001 - a hearth Metadata view
        blocks = meta.uint("block_count")
        embd = meta.uint("embedding_length")
        heads = meta.uint("attention.head_count")
        if not blocks or not embd or not heads:
            raise ValueError("the file lacks gemma3 block_count, embedding_length or head_count")
        key_length = meta.uint("attention.key_length", 256)
        window = meta.uint("attention.sliding_window", 0)
        pattern = meta.raw("attention.sliding_window_pattern")
        if window == 0:
            sliding = tuple(False for _ in range(blocks))
        elif pattern is not None and not isinstance(pattern, int | float) and len(pattern):
            sliding = tuple(bool(x) for x in pattern)
        else:
            p = int(pattern) if pattern is not None else _DEFAULT_PATTERN
            sliding = tuple(p == 0 or i % p < p - 1 for i in range(blocks))
        scaling = meta.string("rope.scaling.type", "none")
        factor = meta.float("rope.scaling.factor", 1.0) or 1.0
        rope_global = RopeOptions(
            dims=meta.uint("rope.dimension_count", key_length),
            base=meta.float("rope.freq_base", 1_000_000.0),
            scale=1.0 / factor if scaling == "linear" else 1.0,
            neox=True,
            original_context=meta.uint("rope.scaling.original_context_length", 0),
        )
        rope_local = replace(
            rope_global, base=meta.float("rope.freq_base_swa", _LOCAL_ROPE_BASE), scale=1.0
        )
        # Gemma 3 27B scales queries by 1/sqrt(embd/heads); the others by 1/sqrt(head_dim).
        query_scale = 1.0 / math.sqrt(embd / heads) if blocks == 62 else 1.0 / math.sqrt(key_length)
        return cls(
            block_count=blocks,
            embedding_length=embd,
            feed_forward_length=meta.uint("feed_forward_length"),
            head_count=heads,
            head_count_kv=meta.uint("attention.head_count_kv", heads) or heads,
            key_length=key_length,
            value_length=meta.uint("attention.value_length", key_length),
            rms_eps=meta.float("attention.layer_norm_rms_epsilon", 1e-6),
            rope_global=rope_global,
            rope_local=rope_local,
            sliding_window=window,
            sliding_layers=sliding,
            query_scale=query_scale,
            final_softcap=meta.float("final_logit_softcapping", 0.0),
            context_length=meta.uint("context_length", 32768),
        )

    def rope(self, layer: int) -> RopeOptions:
        return self.rope_local if self.sliding_layers[layer] else self.rope_global


@dataclass
class Attention:
    attn_q: Tensor = weight()
    attn_k: Tensor = weight()
    attn_v: Tensor = weight()
    attn_q_norm: Tensor = weight()
    attn_k_norm: Tensor = weight()
    attn_output: Tensor = weight()

    def forward(
        self, ctx: Context, x: Tensor, positions: Tensor, cache: Cache, cfg: Config, layer: int
    ) -> Tensor:
        n = x.dim(1)
        q = ctx.reshape(ctx.mul_mat(self.attn_q, x), cfg.key_length, cfg.head_count, n)
        k = ctx.reshape(ctx.mul_mat(self.attn_k, x), cfg.key_length, cfg.head_count_kv, n)
        v = ctx.reshape(ctx.mul_mat(self.attn_v, x), cfg.value_length, cfg.head_count_kv, n)
        # q: [head_dim, heads, tokens]; k, v: [head_dim, kv_heads, tokens]
        rope = cfg.rope(layer)
        q = ctx.rope(rms_norm(ctx, q, self.attn_q_norm, cfg.rms_eps), positions, rope)
        k = ctx.rope(rms_norm(ctx, k, self.attn_k_norm, cfg.rms_eps), positions, rope)
        q = ctx.scale(q, cfg.query_scale)
        return attention(ctx, q, k, v, 1.0, cache)  # [head_dim*heads, tokens]


@dataclass
class MLP:
    ffn_gate: Tensor = weight()
    ffn_up: Tensor = weight()
    ffn_down: Tensor = weight()

    def forward(self, ctx: Context, x: Tensor) -> Tensor:
        h = ctx.geglu(ctx.mul_mat(self.ffn_gate, x), ctx.mul_mat(self.ffn_up, x))
        return ctx.mul_mat(self.ffn_down, h)  # [embd, tokens]


@dataclass
class Block:
    attn_norm: Tensor = weight()
    post_attention_norm: Tensor = weight()
    ffn_norm: Tensor = weight()
    post_ffw_norm: Tensor = weight()
    attn: Attention | None = None
    mlp: MLP | None = None


@dataclass
class _Globals:
    token_embd: Tensor = weight(matmul=False)
    output_norm: Tensor = weight()
    output: Tensor = weight(alt="token_embd.weight", matmul=True)


_CHAT_TEMPLATE = (
    "{{ bos_token }}"
    "{%- if messages and messages[0]['role'] == 'system' -%}"
    "{%- set first_user_prefix = messages[0]['content'] + '\n\n' -%}"
    "{%- set loop_messages = messages[1:] -%}"
    "{%- else -%}"
    "{%- set first_user_prefix = '' -%}"
    "{%- set loop_messages = messages -%}"
    "{%- endif -%}"
    "{%- for message in loop_messages -%}"
    "{%- set role = 'model' if message['role'] == 'assistant' else message['role'] -%}"
    "{{ '<start_of_turn>' + role + '\n' }}"
    "{{ (first_user_prefix if loop.first else '') + message['content'] | trim }}"
    "{{ '<end_of_turn>\n' }}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{ '<start_of_turn>model\n' }}{%- endif -%}"
)


class Model:
    """The Gemma 3 text forward pass; see hearth.plugins.registry for the contract."""

    default_chat_template = _CHAT_TEMPLATE
    eos_tokens: tuple[str, ...] = ("<end_of_turn>",)

    def __init__(self, config: Config, weights) -> None:  # noqa: ANN001 - a WeightStore
        self.config = config
        g = bind(_Globals, weights)
        self.token_embd, self.output_norm, self.output = g.token_embd, g.output_norm, g.output
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
        cfg = self.config
        if len(cfg.sliding_layers) != cfg.block_count:
            raise ValueError("sliding_window_pattern does not have one entry per layer")
        if cfg.head_count % cfg.head_count_kv:
            raise ValueError("head_count must be a multiple of head_count_kv")

    def make_cache(self) -> Cache:
        cfg = self.config
        if not any(cfg.sliding_layers):
            return Causal(shift=self.shift)
        local = Causal(shift=self.shift, window=cfg.sliding_window)
        return Wrapper(
            [local, Causal(shift=self.shift)], lambda i: 0 if cfg.sliding_layers[i] else 1
        )

    def shift(self, ctx: Context, layer: int, key: Tensor, delta: Tensor) -> Tensor:
        return ctx.rope(key, delta, self.config.rope(layer))

    def forward(self, ctx: Context, batch: Batch, cache: Cache) -> Tensor:
        cfg = self.config
        h = ctx.get_rows(self.token_embd, batch.tokens)  # [embd, tokens]
        h = ctx.scale(h, math.sqrt(cfg.embedding_length))
        last = len(self.blocks) - 1
        for i, block in enumerate(self.blocks):
            cache.set_layer(i)
            x = rms_norm(ctx, h, block.attn_norm, cfg.rms_eps)
            a = block.attn.forward(ctx, x, batch.positions, cache, cfg, i)  # type: ignore[union-attr]
            if i == last:  # only the rows whose logits are wanted go on
                a = ctx.get_rows(a, batch.outputs)
                h = ctx.get_rows(h, batch.outputs)
            a = ctx.mul_mat(block.attn.attn_output, a)  # type: ignore[union-attr]
            h = ctx.add(rms_norm(ctx, a, block.post_attention_norm, cfg.rms_eps), h)
            x = rms_norm(ctx, h, block.ffn_norm, cfg.rms_eps)
            f = block.mlp.forward(ctx, x)  # type: ignore[union-attr]
            h = ctx.add(rms_norm(ctx, f, block.post_ffw_norm, cfg.rms_eps), h)
        h = rms_norm(ctx, h, self.output_norm, cfg.rms_eps)
        if batch.hidden:
            return h  # [embd, outputs]
        logits = ctx.mul_mat(self.output, h)  # [vocab, outputs]
        if cfg.final_softcap:
            logits = ctx.tanh(ctx.scale(logits, 1.0 / cfg.final_softcap))
            logits = ctx.scale(logits, cfg.final_softcap)
        return logits
