"""Gemma 3 (GGUF architecture `gemma3`): the text model, and images through its encoder.

Sliding-window layers are interleaved with global ones: with pattern P (metadata
`sliding_window_pattern`, default 6) layer i is global when (i + 1) % P == 0, else it attends
to the last `sliding_window` positions and uses the local RoPE base (`rope.freq_base_swa`,
default 10000) without the global RoPE scaling. Unlike Llama: embeddings scaled by sqrt(embd),
RMS-normed queries and keys, norms after attention and feed-forward too, GeGLU, and logits
soft-capped by tanh.

Images (`vision.py`, `image.py`): a file with the encoder inside (Ollama's), or a text file
loaded with its projector file (llama.cpp's `mmproj-*.gguf`), takes images. The prompt layout
is Gemma3Processor's: it writes `\n\n<start_of_image>`, then `tokens_per_image` (256) image
soft tokens, then `<end_of_image>\n\n` where the text has an image. In Hearth:

* `image_text` is `("\n\n<start_of_image>", "<end_of_image>\n\n")`: the runner writes it
  around each image in the prompt text and tokenizes it with the text, so the newlines
  merge with the neighbouring text exactly as the reference tokenizer merges them.
* `encode_multimodal(ctx, data)` preprocesses the bytes and builds the encoder's graph: one
  item, `[text_embd, tokens_per_image]`, `bidirectional` (an image's positions see each other
  both ways, as transformers' Gemma 3 mask has them), `data` None, one position per row
  (256), each `<image_soft_token>` (0 where the vocabulary lacks it; the embeddings replace
  it anyway); the core lays those positions out, the image in one batch.
* `post_tokenize(inputs)`: where the input before an image is not `<start_of_image>` (a
  caller that does not use `image_text`), it adds `\n\n` and `<start_of_image>` before the
  image; likewise `<end_of_image>` and `\n\n` after it unless the next input is
  `<end_of_image>` (Ollama's layout), so the model always sees the markers it was trained
  with.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from functools import cached_property
from typing import Literal

from hearth.plugins import Attention as BaseAttention
from hearth.plugins import (
    Batch,
    Cache,
    ConfigDefaults,
    Context,
    Input,
    Layer,
    Metadata,
    Multimodal,
    MultimodalNotSupportedError,
    RopeOptions,
    Tensor,
    Transformer,
    TransformerConfig,
    Weights,
    attention,
    part,
    rms_norm,
    sliding_layers,
    sliding_window_cache,
    weight,
)
from hearth.plugins import Block as BaseBlock

from .image import preprocess
from .vision import VisionConfig, VisionTower

__all__ = ["Config", "Attention", "Block", "ImageTokens", "Model"]

_DEFAULT_PATTERN = 6
_LOCAL_ROPE_BASE = 10000.0
DEFAULTS = ConfigDefaults(
    rope_base=1_000_000.0, neox=True, rms_eps=1e-6, context_length=32768, key_length=256
)


@dataclass(frozen=True)
class ImageTokens:
    """Ids of the tokens around and inside an image (-1: not in the vocabulary)."""

    start: int = -1  # <start_of_image>
    end: int = -1  # <end_of_image>
    soft: int = -1  # <image_soft_token>
    newlines: int = -1  # "\n\n"

    @classmethod
    def read(cls, meta: Metadata) -> ImageTokens:
        tokens = meta.raw("tokenizer.ggml.tokens")
        if tokens is None:
            return cls()
        index = {t: i for i, t in enumerate(tokens) if t in _IMAGE_TOKEN_TEXTS}
        return cls(*(index.get(t, -1) for t in _IMAGE_TOKEN_TEXTS))


_IMAGE_TOKEN_TEXTS = ("<start_of_image>", "<end_of_image>", "<image_soft_token>", "\n\n")


@dataclass(frozen=True)
class Config(TransformerConfig):
    rope_base_local: float
    sliding_window: int
    sliding_layers: tuple[bool, ...]
    final_softcap: float
    vision: VisionConfig | None = None  # the image encoder's settings, when the files have it
    image_tokens: ImageTokens = ImageTokens()

    @classmethod
    def from_gguf(cls, meta: Metadata) -> Config:
        blocks = meta.uint("block_count")
        embd, heads = meta.uint("embedding_length"), meta.uint("attention.head_count")
        key_length = meta.uint("attention.key_length", DEFAULTS.key_length)
        window = meta.uint("attention.sliding_window", 0)
        sliding = sliding_layers(meta, blocks, _DEFAULT_PATTERN)
        # Gemma 3 27B scales queries by 1/sqrt(embd/heads); the others by 1/sqrt(head_dim).
        big = blocks == 62 and heads > 0
        return cls.read(
            meta,
            DEFAULTS,
            attention_scale=1.0 / math.sqrt(embd / heads if big else key_length),
            rope_base_local=meta.float("rope.freq_base_swa", _LOCAL_ROPE_BASE),
            sliding_window=window,
            sliding_layers=sliding,
            final_softcap=meta.float("final_logit_softcapping", 0.0),
            vision=VisionConfig.from_metadata(meta),
            image_tokens=ImageTokens.read(meta),
        )

    @cached_property
    def rope_local(self) -> RopeOptions:
        return replace(self.rope, base=self.rope_base_local, scale=1.0)


@dataclass
class Attention(BaseAttention):
    attn_q_norm: Tensor = weight()
    attn_k_norm: Tensor = weight()


@dataclass
class Block(BaseBlock):
    attn: Attention = part(Attention)
    post_attention_norm: Tensor = weight()
    post_ffw_norm: Tensor = weight()


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


class Model(Transformer[Config, Block]):
    """Gemma 3: the text forward pass, and the image encoder when the files have one (see
    the module docstring and hearth.plugins for the contract)."""

    default_chat_template = _CHAT_TEMPLATE
    eos_tokens = ("<end_of_turn>",)
    image_text = ("\n\n<start_of_image>", "<end_of_image>\n\n")

    def __init__(self, config: Config, weights: Weights) -> None:
        super().__init__(config, weights, Block)
        self.vision = VisionTower(config.vision, weights) if config.vision is not None else None
        # Vision models compute the feed-forward's GELU in F32, as the reference does: ggml's
        # F16 GELU table (llama.cpp's) puts their logits 3e-3 from transformers'. Text-only
        # files keep llama.cpp's numbers and speed.
        self.gelu: Literal["gelu", "gelu_f32"] = "gelu" if self.vision is None else "gelu_f32"

    def validate(self) -> None:
        if len(self.config.sliding_layers) != self.config.block_count:
            raise ValueError("sliding_window_pattern does not have one entry per layer")
        super().validate()
        if self.vision is not None:
            self.vision.config.check()
            self.vision.check()
            if self.vision.output_length != self.config.embedding_length:
                raise ValueError(
                    f"the image encoder makes {self.vision.output_length}-dimensional "
                    f"embeddings, but the text model's are {self.config.embedding_length}: "
                    "the projector file is for another model size"
                )

    def encode_multimodal(self, ctx: Context, data: bytes) -> list[Multimodal]:
        """One item `[embd, tokens_per_image]`, bidirectional (see the module docstring)."""
        if self.vision is None:
            raise MultimodalNotSupportedError(
                "this model file has no image encoder (for a llama.cpp file, load it with its "
                "mmproj projector file)"
            )
        cfg, soft = self.vision.config, max(self.config.image_tokens.soft, 0)
        pixels = preprocess(data, cfg.image_size, cfg.image_mean, cfg.image_std)
        embeddings = self.vision.encode(ctx, pixels)
        return [Multimodal(tensor=embeddings, bidirectional=True, token=soft)]

    def post_tokenize(self, inputs: list[Input]) -> list[Input]:
        """The image markers a prompt lacks, added (see the module docstring)."""
        ids = self.config.image_tokens
        out: list[Input] = []
        for i, inp in enumerate(inputs):
            if not inp.multimodal:
                out.append(inp)
                continue
            prev = out[-1] if out else None
            if ids.start >= 0 and not _is_token(prev, ids.start):
                out.extend(Input(token=t) for t in (ids.newlines, ids.start) if t >= 0)
            out.append(inp)
            nxt = inputs[i + 1] if i + 1 < len(inputs) else None
            if ids.end >= 0 and not _is_token(nxt, ids.end):
                out.extend(Input(token=t) for t in (ids.end, ids.newlines) if t >= 0)
        return out

    def make_cache(self) -> Cache:
        cfg = self.config
        return sliding_window_cache(self.shift, cfg.sliding_window, cfg.sliding_layers)

    def rope(self, layer: int) -> RopeOptions:
        return self.config.rope_local if self.config.sliding_layers[layer] else self.config.rope

    def embed(self, ctx: Context, batch: Batch) -> Tensor:
        return ctx.scale(super().embed(ctx, batch), math.sqrt(self.config.embedding_length))

    def layer(self, ctx: Context, at: Layer, block: Block, h: Tensor, cache: Cache) -> Tensor:
        cfg, attn, positions = self.config, block.attn, at.batch.positions
        rope = self.rope(at.index)
        x = rms_norm(ctx, h, block.attn_norm, cfg.rms_eps)
        q, k, v = attn.qkv(ctx, x, cfg)  # [head_dim, heads, tokens], [head_dim, kv_heads, tokens]
        q = ctx.rope(rms_norm(ctx, q, attn.attn_q_norm, cfg.rms_eps), positions, rope)
        k = ctx.rope(rms_norm(ctx, k, attn.attn_k_norm, cfg.rms_eps), positions, rope)
        q = ctx.scale(q, cfg.attention_scale)  # before q·k: attention itself scales by 1
        a = attention(ctx, q, k, v, 1.0, cache)  # [head_dim*heads, tokens]
        a, h = at.output_rows(ctx, a, h)
        a = rms_norm(ctx, attn.output(ctx, a), block.post_attention_norm, cfg.rms_eps)
        h = ctx.add(a, h)
        f = block.mlp.forward(ctx, rms_norm(ctx, h, block.ffn_norm, cfg.rms_eps), self.gelu)
        return ctx.add(rms_norm(ctx, f, block.post_ffw_norm, cfg.rms_eps), h)

    def logits(self, ctx: Context, batch: Batch, h: Tensor) -> Tensor:
        logits = super().logits(ctx, batch, h)  # [vocab, outputs] (or hidden states)
        cap = self.config.final_softcap
        if batch.hidden or not cap:
            return logits
        return ctx.scale(ctx.tanh(ctx.scale(logits, 1.0 / cap)), cap)


def _is_token(inp: Input | None, token: int) -> bool:
    return inp is not None and not inp.multimodal and not inp.multimodal_hash and inp.token == token
