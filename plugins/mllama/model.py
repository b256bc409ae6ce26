"""Llama 3.2 Vision (GGUF architecture `mllama`): a Llama text model with cross-attention
layers that read an image's encoded states.

Files: Ollama's converter's names and keys. Settings `mllama.*` as for Llama, plus
`mllama.attention.cross_attention_layers` (the layers that are cross-attention layers) and
`mllama.vision.*` (the encoder, `vision.py`). Self-attention layers are Llama's (`blk.N.attn_*`,
RoPE with `rope_freqs.weight`); a cross-attention layer has `attn_norm`,
`cross_attn_q_proj`/`k_proj`/`v_proj`/`o_proj`, `cross_attn_q_norm`/`k_norm` (RMS norms over
each head), `cross_attn_attn_gate` and `cross_attn_mlp_gate` (raw: the graph takes their
tanh, as Ollama's engine and transformers do; the converter applies tanh only to the vision
encoder's gates), `ffn_norm` and the SwiGLU feed-forward. The token embedding has 8 rows
more than the output (`<|image|>`, id 128256 in Llama 3.2 Vision, is one of them), in
Hearth's and Ollama's conversions alike (Ollama's former llama.cpp-based loader asked for
`vocab_size + 8` rows too); any table works as long as it has the `<|image|>` row, and a model
with an image encoder whose table lacks it is refused.

Ollama's converter permutes the rows of `cross_attn_q_proj` and `cross_attn_k_proj` as it does
Llama's self-attention q/k (its RoPE repack matches the `attn_q_proj`/`attn_k_proj` suffixes),
but not the q/k norm weights: within each head, element `2b + a` of a stored query is element
`a * head_dim/2 + b` of the original. The same permutation of queries and keys leaves their
dot products unchanged, so the graph permutes the two norm weights the same way and computes
what transformers computes.

Images (Meta's reference semantics, llama-models' `CrossAttention`/`CrossAttentionTransformerBlock`,
which the released weights were trained with):

* `encode_multimodal` tiles the picture (`image.py`) and builds the encoder (`vision.py`): one
  item of `[text_embd, num_tiles * 1601]` cross-attention states, which fills ONE input
  position (`Multimodal.positions = 1`) that embeds the `<|image|>` token; the states come to
  `forward` whole (`batch.multimodal`), never as token embeddings.
* Cross-attention K/V are computed once per image, in the pass that carries it, and kept per
  sequence in the encoder cache (`hearth.plugins.Encoder`, wrapped with the causal cache of
  the self-attention layers); later passes and turns read them.
* Masks: a row at or after its sequence's image (the `<|image|>` row included) attends to the
  image's real tiles (the encoder hands over no padding tiles), and both its gated attention
  and gated feed-forward outputs count. A row before the image (BOS and text before
  `<|image|>`), or of a sequence without an image, gets no contribution from the layer at all
  (Meta multiplies both outputs by `full_text_row_masked_out_mask`), so it never depends on
  the image and may be evaluated in any batch. transformers differs here: it masks only the
  feed-forward of those rows and lets their attention output (uniform over every tile, the
  padding ones too) through. A pass in which no row is at or after an image skips the layers.
* A newer image in a sequence replaces the older one's K/V for the rows after it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from hearth.plugins import (
    Block,
    Cache,
    Causal,
    ConfigDefaults,
    Context,
    Encoder,
    GatedMLP,
    Layer,
    Metadata,
    Multimodal,
    MultimodalNotSupportedError,
    Tensor,
    Transformer,
    TransformerConfig,
    Weights,
    Wrapper,
    attention,
    part,
    rms_norm,
    weight,
)

from .image import preprocess
from .vision import VisionConfig, VisionEncoder

__all__ = ["Config", "CrossBlock", "Model"]

DEFAULTS = ConfigDefaults(rope_base=500000.0, neox=False, rms_eps=1e-5, context_length=131072)
IMAGE_TOKEN = "<|image|>"
_IMAGE_TOKEN_ID = 128256  # Llama 3.2 Vision's, for files whose vocabulary lacks the text


@dataclass(frozen=True)
class Config(TransformerConfig):
    cross_attention_layers: tuple[int, ...]
    image_token: int
    vision: VisionConfig | None = None

    @classmethod
    def from_gguf(cls, meta: Metadata) -> Config:
        layers_ = tuple(int(i) for i in meta.ints("attention.cross_attention_layers"))
        tokens = meta.raw("tokenizer.ggml.tokens")
        found = [i for i, t in enumerate(tokens if tokens is not None else ()) if t == IMAGE_TOKEN]
        image = found[0] if found else _IMAGE_TOKEN_ID
        return cls.read(
            meta,
            DEFAULTS,
            cross_attention_layers=layers_,
            image_token=image,
            vision=VisionConfig.from_gguf(meta),
        )


@dataclass
class CrossBlock:
    """A cross-attention layer's weights (`blk.N.`, Ollama's names)."""

    attn_norm: Tensor = weight()
    cross_attn_q_proj: Tensor = weight()
    cross_attn_k_proj: Tensor = weight()
    cross_attn_v_proj: Tensor = weight()
    cross_attn_o_proj: Tensor = weight()
    cross_attn_q_norm: Tensor = weight(matmul=False)
    cross_attn_k_norm: Tensor = weight(matmul=False)
    cross_attn_attn_gate: Tensor = weight("cross_attn_attn_gate", matmul=False)
    cross_attn_mlp_gate: Tensor = weight("cross_attn_mlp_gate", matmul=False)
    ffn_norm: Tensor = weight()
    mlp: GatedMLP = part(GatedMLP)


_CHAT_TEMPLATE = (
    "{{ bos_token }}"
    "{%- for message in messages -%}"
    "{{ '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n' }}"
    "{{ message['content'] | trim }}{{ '<|eot_id|>' }}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}"
    "{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}"
    "{%- endif -%}"
)


class Model(Transformer[Config, Block | CrossBlock]):
    """Llama 3.2 Vision's text model and, when the files have it, its image encoder (see the
    module docstring and hearth.plugins for the contract)."""

    default_chat_template = _CHAT_TEMPLATE
    eos_tokens = ("<|eot_id|>", "<|eom_id|>")

    def __init__(self, config: Config, weights: Weights) -> None:
        super().__init__(config, weights, Block)
        self.rope_factors = weights.get("rope_freqs.weight", matmul=False)
        self.vision = VisionEncoder(config.vision, weights) if config.vision is not None else None

    def block_for(self, layer: int) -> type[Block | CrossBlock]:
        return CrossBlock if layer in self.config.cross_attention_layers else Block

    def validate(self) -> None:
        super().validate()
        cfg = self.config
        bad = [i for i in cfg.cross_attention_layers if not 0 <= i < cfg.block_count]
        if bad:
            raise ValueError(f"cross-attention layers {bad} are not among the model's layers")
        if cfg.key_length % 2 or cfg.value_length != cfg.key_length:
            raise ValueError("mllama needs even, equal key and value head sizes")
        if self.vision is not None:
            rows = self.token_embd.dim(1)
            if not 0 <= cfg.image_token < rows:
                raise ValueError(
                    f"the token embedding has {rows} rows, none for <|image|> (id "
                    f"{cfg.image_token}); Llama 3.2 Vision's files have the text vocabulary's "
                    "8 extra rows after it"
                )
            self.vision.check()
            if self.vision.output_length != cfg.embedding_length:
                raise ValueError(
                    f"the image encoder makes {self.vision.output_length}-dimensional states, "
                    f"but the text model's are {cfg.embedding_length}"
                )

    # -- images -----------------------------------------------------------------------------
    def encode_multimodal(self, ctx: Context, data: bytes) -> list[Multimodal]:
        """One item: the image's cross-attention states, filling one input position."""
        if self.vision is None:
            raise MultimodalNotSupportedError("this model file has no image encoder")
        cfg = self.vision.config
        tiled = preprocess(data, image_size=cfg.image_size, max_num_tiles=cfg.max_num_tiles)
        states = self.vision.forward(ctx, tiled)  # [text_embd, num_tiles * num_patches]
        token = self.config.image_token
        return [Multimodal(tensor=states, data=tiled.num_tiles, positions=1, token=token)]

    def make_cache(self) -> Cache:
        causal = Causal(shift=self.shift)
        cross = frozenset(self.config.cross_attention_layers)
        return Wrapper([Encoder(), causal], lambda i: 0 if i in cross else 1)

    # -- the graph ----------------------------------------------------------------------------
    def layer(
        self, ctx: Context, at: Layer, block: Block | CrossBlock, h: Tensor, cache: Cache
    ) -> Tensor:
        if isinstance(block, Block):
            return self.pre_norm_layer(ctx, at, block, h, cache)
        encoder = _encoder(cache)
        if encoder.active:
            return self.cross_layer(ctx, at, block, h, cache, encoder)
        (h,) = at.output_rows(ctx, h)  # a pass without images skips the layer
        return h

    def cross_layer(
        self, ctx: Context, at: Layer, block: CrossBlock, h: Tensor, cache: Cache, enc: Encoder
    ) -> Tensor:
        """One cross-attention layer (see the module docstring for its masks)."""
        cfg = self.config
        d, n = cfg.key_length, h.dim(1)
        q_norm = _interleave(ctx, block.cross_attn_q_norm)
        k_norm = _interleave(ctx, block.cross_attn_k_norm)
        x = rms_norm(ctx, h, block.attn_norm, cfg.rms_eps)
        q = ctx.reshape(ctx.mul_mat(block.cross_attn_q_proj, x), d, cfg.head_count, n)
        q = rms_norm(ctx, q, q_norm, cfg.rms_eps)
        for item in enc.stored_items(at.batch):  # images arriving in this pass: K/V, once
            states = item.tensor
            assert states is not None
            rows = states.dim(1)
            k = ctx.mul_mat(block.cross_attn_k_proj, states)
            k = rms_norm(ctx, ctx.reshape(k, d, cfg.head_count_kv, rows), k_norm, cfg.rms_eps)
            v = ctx.reshape(
                ctx.mul_mat(block.cross_attn_v_proj, states), d, cfg.head_count_kv, rows
            )
            cache.put(ctx, k, v)
        a = attention(ctx, q, None, None, 1.0 / math.sqrt(d), cache)  # [d * heads, n]
        after = enc.mask(ctx)  # [1, n]: rows at or after their image
        a, h, after = at.output_rows(ctx, a, h, after)
        a = ctx.mul(ctx.mul_mat(block.cross_attn_o_proj, a), ctx.tanh(block.cross_attn_attn_gate))
        h = ctx.add(ctx.mul(a, after), h)
        f = block.mlp.forward(ctx, rms_norm(ctx, h, block.ffn_norm, cfg.rms_eps))
        f = ctx.mul(ctx.mul(f, after), ctx.tanh(block.cross_attn_mlp_gate))
        return ctx.add(f, h)


def _encoder(cache: Cache) -> Encoder:
    caches = cache.caches if isinstance(cache, Wrapper) else [cache]
    for c in caches:
        if isinstance(c, Encoder):
            return c
    raise TypeError("mllama needs its encoder cache (make_cache)")


def _interleave(ctx: Context, w: Tensor) -> Tensor:
    """A head's norm weight `[d]` in the stored (permuted) q/k layout: element 2b + a is
    element a * d/2 + b (see the module docstring)."""
    d = w.dim(0)
    return ctx.reshape(ctx.cont(ctx.permute(ctx.reshape(w, d // 2, 2), 1, 0, 2, 3)), d)
