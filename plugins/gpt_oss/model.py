"""gpt-oss (GGUF architecture `gpt-oss`; llama.cpp's LLM_ARCH_OPENAI_MOE), as llama.cpp's
`src/models/openai-moe.cpp` computes it:

* attention with biases on q, k, v and the output, NeoX RoPE (YaRN-scaled in the released
  models: the kit's `read_rope`), and attention sinks (`attn_sinks`, one logit per head in
  every softmax's normaliser: the kit's `Attention` passes them to `ggml_soft_max_add_sinks`,
  or `ggml_flash_attn_ext_add_sinks`);
* alternating layers: with `attention.sliding_window_pattern` absent, even layers attend to
  the last `attention.sliding_window` positions and odd ones to everything (llama.cpp's
  pattern of 2); `rope.freq_base_swa` for the sliding layers when present;
* a pre-norm layer whose second norm is `post_attention_norm` and whose feed-forward is
  routed experts (the kit's `Experts`): biased router, top-k, softmax over the k chosen
  logits (`softmax_weight`), biased experts with the clamped `swiglu_oai` activation; expert
  weights in any type ggml multiplies (the released files: MXFP4).

The chat format is OpenAI's harmony (channels `analysis`, `commentary`, `final`), parsed into
content, thinking and tool calls by the service (`hearth.server.prompting.harmony`).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import cached_property

from hearth.plugins import (
    Attention,
    Cache,
    ConfigDefaults,
    Context,
    Experts,
    Layer,
    Metadata,
    RopeOptions,
    Routing,
    Tensor,
    Transformer,
    TransformerConfig,
    Weights,
    part,
    sliding_layers,
    sliding_window_cache,
    weight,
)

__all__ = ["Block", "Config", "Model"]

DEFAULTS = ConfigDefaults(rope_base=150000.0, neox=True, rms_eps=1e-5, context_length=131072)
_PATTERN = 2  # llama.cpp: load_swa_pattern(ml, 2)

# Harmony, for files without a template: the system message with the reasoning effort
# (`reasoning_effort`, what a think level sets), tools as a `functions` namespace in a
# developer message, earlier calls on the commentary channel, results from `functions.NAME`.
CHAT_TEMPLATE = (
    "<|start|>system<|message|>Reasoning: {{ reasoning_effort or 'medium' }}\n\n"
    "# Valid channels: analysis, commentary, final. Channel must be included for every "
    "message.{{ \"\\nCalls to these tools must go to the commentary channel: 'functions'.\" "
    "if tools }}<|end|>"
    "{%- if tools -%}<|start|>developer<|message|># Tools\n\n## functions\n\n"
    "namespace functions {\n\n{% for t in tools %}{% set f = t.function or t %}"
    "// {{ f.description }}\ntype {{ f.name }} = (_: {{ f.parameters | tojson }}) => any;\n\n"
    "{% endfor %}} // namespace functions<|end|>{%- endif -%}"
    "{%- for m in messages -%}"
    "{%- if m.role == 'assistant' and m.tool_calls -%}{%- for c in m.tool_calls -%}"
    "{%- set a = c.function.arguments -%}"
    "<|start|>assistant<|channel|>commentary to=functions.{{ c.function.name }} "
    "<|constrain|>json<|message|>{{ a if a is string else a | tojson }}<|call|>"
    "{%- endfor -%}"
    "{%- elif m.role == 'assistant' -%}"
    "<|start|>assistant<|channel|>final<|message|>{{ m.content }}<|end|>"
    "{%- elif m.role == 'tool' -%}"
    "<|start|>functions.{{ m.name or m.tool_name }} to=assistant<|channel|>commentary"
    "<|message|>{{ m.content }}<|end|>"
    "{%- else -%}<|start|>{{ m.role }}<|message|>{{ m.content }}<|end|>{%- endif -%}"
    "{%- endfor -%}{%- if add_generation_prompt -%}<|start|>assistant{%- endif -%}"
)


@dataclass(frozen=True)
class Config(TransformerConfig):
    routing: Routing
    expert_feed_forward_length: int
    sliding_window: int
    sliding_layers: tuple[bool, ...]
    rope_base_local: float

    @classmethod
    def from_gguf(cls, meta: Metadata) -> Config:
        blocks = meta.uint("block_count")
        return cls.read(
            meta,
            DEFAULTS,
            routing=Routing.read(meta, gating="softmax_weight", normalize=False),
            expert_feed_forward_length=meta.uint("expert_feed_forward_length", 0),
            sliding_window=meta.uint("attention.sliding_window", 0),
            sliding_layers=sliding_layers(meta, blocks, _PATTERN),
            rope_base_local=meta.float("rope.freq_base_swa", meta.float("rope.freq_base", 0.0)),
        )

    @cached_property
    def rope_local(self) -> RopeOptions:
        return replace(self.rope, base=self.rope_base_local or self.rope.base)


@dataclass
class Block:
    attn_norm: Tensor = weight()
    attn: Attention = part(Attention)
    ffn_norm: Tensor = weight("post_attention_norm.weight")
    moe: Experts = part(Experts)


class Model(Transformer[Config, Block]):
    """The gpt-oss forward pass: the kit's pre-norm layer with sinks and routed experts."""

    default_chat_template = CHAT_TEMPLATE
    eos_tokens = ("<|return|>", "<|call|>")  # <|end|> ends a message, not the turn

    def __init__(self, config: Config, weights: Weights) -> None:
        super().__init__(config, weights, Block)

    def validate(self) -> None:
        super().validate()
        cfg = self.config
        if len(cfg.sliding_layers) != cfg.block_count:
            raise ValueError("sliding_window_pattern does not have one entry per layer")
        if any(b.attn.attn_sinks is None for b in self.blocks):
            raise ValueError("gpt-oss layers need their attention sinks (attn_sinks)")

    def make_cache(self) -> Cache:
        cfg = self.config
        return sliding_window_cache(self.shift, cfg.sliding_window, cfg.sliding_layers)

    def rope(self, layer: int) -> RopeOptions:
        return self.config.rope_local if self.config.sliding_layers[layer] else self.config.rope

    def layer(self, ctx: Context, at: Layer, block: Block, h: Tensor, cache: Cache) -> Tensor:
        return self.pre_norm_layer(ctx, at, block, h, cache)

    def feed_forward(self, ctx: Context, block: Block, x: Tensor) -> Tensor:
        return block.moe.forward(ctx, x, self.config.routing, "swiglu_oai")
