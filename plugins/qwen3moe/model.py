"""Qwen3-MoE (GGUF architecture `qwen3moe`): Qwen3's attention (per-head RMS norms of queries
and keys before NeoX RoPE, no biases) with routed experts in every layer's feed-forward:
softmax over the router's logits, the top `expert_used_count` experts, their weights
renormalised to sum to 1 (`norm_topk_prob`; llama.cpp always renormalises for this
architecture, so the file's `expert_weights_norm` defaults to true), SwiGLU experts."""

from __future__ import annotations

from dataclasses import dataclass

from hearth.plugins import (
    Cache,
    ConfigDefaults,
    Context,
    Experts,
    Layer,
    Metadata,
    NormedAttention,
    Routing,
    Tensor,
    Transformer,
    TransformerConfig,
    Weights,
    part,
    weight,
)

__all__ = ["Block", "Config", "Model"]

DEFAULTS = ConfigDefaults(rope_base=10000.0, neox=True, rms_eps=1e-6, context_length=32768)

CHAT_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


@dataclass(frozen=True)
class Config(TransformerConfig):
    routing: Routing
    expert_feed_forward_length: int

    @classmethod
    def from_gguf(cls, meta: Metadata) -> Config:
        return cls.read(
            meta,
            DEFAULTS,
            routing=Routing.read(meta, gating="softmax", normalize=True),
            expert_feed_forward_length=meta.uint("expert_feed_forward_length", 0),
        )


@dataclass
class Block:
    attn_norm: Tensor = weight()
    attn: NormedAttention = part(NormedAttention)
    ffn_norm: Tensor = weight()
    moe: Experts = part(Experts)


class Model(Transformer[Config, Block]):
    """The qwen3moe forward pass: the kit's pre-norm layer with routed experts."""

    default_chat_template = CHAT_TEMPLATE
    eos_tokens = ("<|im_end|>", "<|endoftext|>")

    def __init__(self, config: Config, weights: Weights) -> None:
        super().__init__(config, weights, Block)

    def validate(self) -> None:
        super().validate()
        cfg = self.config
        if cfg.rope.dims != cfg.key_length or cfg.value_length != cfg.key_length:
            raise ValueError("qwen3moe needs RoPE over whole heads and equal key and value sizes")

    def layer(self, ctx: Context, at: Layer, block: Block, h: Tensor, cache: Cache) -> Tensor:
        return self.pre_norm_layer(ctx, at, block, h, cache)

    def feed_forward(self, ctx: Context, block: Block, x: Tensor) -> Tensor:
        return block.moe.forward(ctx, x, self.config.routing)
