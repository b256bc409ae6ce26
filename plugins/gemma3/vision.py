"""Gemma 3's image encoder: the SigLIP vision tower and the multimodal projector.

Settings and weights come in either of two layouts, both read here:

* llama.cpp's: a separate projector file (`mmproj-*.gguf`, architecture `clip`, projector
  type `gemma3`), read through `meta.projector`: `clip.vision.image_size`, `patch_size`,
  `embedding_length`, `feed_forward_length`, `block_count`, `attention.head_count`,
  `attention.layer_norm_epsilon`, `image_mean`, `image_std`, and
  `clip.vision.projector.scale_factor` (the pooling kernel; absent means 4, Gemma 3's).
  Tensors `v.patch_embd`, `v.position_embd`, `v.blk.N.{ln1,attn_q,attn_k,attn_v,attn_out,ln2,
  ffn_up,ffn_down}`, `v.post_ln`, `mm.soft_emb_norm`, `mm.input_projection`.
* Ollama's: one file holding the text model and the encoder: `gemma3.vision.*` (the same
  keys, no mean or std: 0.5 each) and `gemma3.mm.tokens_per_image` (default 256). Tensors
  `v.patch_embedding`, `v.position_embedding`, `v.blk.N.{layer_norm1,attn_q,attn_k,attn_v,
  attn_output,layer_norm2,mlp.fc1,mlp.fc2}`, `v.post_layernorm`, `mm.mm_soft_emb_norm`,
  `mm.mm_input_projection`.

Both converters store the soft-embedding norm's weight plus one (Gemma's RMSNorm multiplies by
`1 + w`), so the graph multiplies by the stored weight, as for the text model's norms.

The graph (shapes in ggml order; S = image_size, P = patch_size, n = (S/P)^2 patches):

1. Patches, cut on the host: pixels `[3, S, S]` become `[3*P*P, n]` (row-major patch order),
   multiplied by the patch embedding seen as `[3*P*P, embd]`: the stride-P convolution.
   Plus its bias and the position embedding `[embd, n]`.
2. `block_count` encoder layers: LayerNorm (with bias), self-attention (biases, every patch
   sees every patch), residual; LayerNorm, fc1, GELU (tanh approximation, computed in F32),
   fc2, residual. Then the post LayerNorm.
3. Projector: the patch grid `[S/P, S/P, embd]` average-pooled by `kernel` x `kernel` to
   `tokens_per_image` tokens, RMS-normed (times the soft-embedding norm's weight) and
   multiplied by the input projection into the text model's embedding size: `[text_embd,
   tokens_per_image]`. The projection (F16 in llama.cpp's files) is converted to F32 first, so
   this product is as exact as transformers' (llama.cpp rounds the activations to F16 here).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from hearth.plugins import (
    Context,
    DType,
    EncoderAttention,
    EncoderConfig,
    Metadata,
    Tensor,
    Weights,
    check_shapes,
    full_attention,
    gelu_tanh,
    layer_norm,
    linear,
    rms_norm,
)

__all__ = ["VisionConfig", "VisionLayer", "VisionTower", "LLAMACPP_NAMES", "OLLAMA_NAMES"]

_DEFAULT_MEAN = (0.5, 0.5, 0.5)  # Gemma 3's processor (and Ollama's default)
_DEFAULT_STD = (0.5, 0.5, 0.5)
_DEFAULT_KERNEL = 4  # llama.cpp: absent scale_factor means Gemma 3's 64x64 patches -> 16x16
_DEFAULT_TOKENS = 256


@dataclass(frozen=True)
class VisionConfig(EncoderConfig):
    """The encoder's settings; `naming` says which file layout they came from."""

    image_mean: tuple[float, float, float]
    image_std: tuple[float, float, float]
    tokens_per_image: int
    naming: str  # "llama.cpp" (projector file) or "ollama" (one file)

    @classmethod
    def from_metadata(cls, meta: Metadata) -> VisionConfig | None:
        """From the projector's metadata when the model was loaded with a projector file,
        else from the model file's own `gemma3.vision.*` keys; None when neither has an
        encoder. Raises ValueError for a projector of another model."""
        proj = meta.projector
        if proj is not None:
            kind = proj.string("projector_type") or proj.string("vision.projector_type")
            if kind != "gemma3":
                raise ValueError(
                    f"the projector file is for '{kind or 'an unknown model'}', not Gemma 3"
                )
            if not proj.bool("has_vision_encoder", True):
                raise ValueError("the projector file has no image encoder")
            size, patch = proj.uint("vision.image_size"), proj.uint("vision.patch_size")
            kernel = proj.uint("vision.projector.scale_factor", _DEFAULT_KERNEL) or 1
            side = size // patch // kernel if patch else 0
            return cls._read(proj, side * side, "llama.cpp")
        if not meta.has("vision.block_count"):
            return None
        tokens = meta.uint("mm.tokens_per_image", meta.uint("mm_tokens_per_image", 0))
        return cls._read(meta, tokens or _DEFAULT_TOKENS, "ollama")

    @classmethod
    def _read(cls, view: Metadata, tokens_per_image: int, naming: str) -> VisionConfig:
        """The encoder's `vision.*` keys, the same in both layouts (under `clip.` in a
        projector file, under `gemma3.` in Ollama's one file)."""
        return cls(
            image_size=view.uint("vision.image_size"),
            patch_size=view.uint("vision.patch_size"),
            embedding_length=view.uint("vision.embedding_length"),
            feed_forward_length=view.uint("vision.feed_forward_length"),
            block_count=view.uint("vision.block_count"),
            head_count=view.uint("vision.attention.head_count"),
            eps=view.float("vision.attention.layer_norm_epsilon", 1e-6),
            image_mean=_three(view.floats("vision.image_mean"), _DEFAULT_MEAN, "image_mean"),
            image_std=_three(view.floats("vision.image_std"), _DEFAULT_STD, "image_std"),
            tokens_per_image=tokens_per_image,
            naming=naming,
        )

    @property
    def tokens_per_side(self) -> int:
        return math.isqrt(self.tokens_per_image)

    @property
    def kernel(self) -> int:
        """The average pooling's window (and stride), in patches."""
        return self.patches_per_side // self.tokens_per_side

    def check(self) -> None:
        """Raise ValueError with a sentence for settings the encoder cannot run."""
        self.check_sizes(self.feed_forward_length)
        side = self.tokens_per_side
        if side <= 0 or side * side != self.tokens_per_image:
            raise ValueError(f"{self.tokens_per_image} tokens per image is not a square number")
        if self.patches_per_side % side:
            raise ValueError(
                f"{self.patches_per_side}x{self.patches_per_side} patches do not pool evenly "
                f"into {side}x{side} image tokens"
            )
        if any(s == 0 for s in self.image_std):
            raise ValueError("the image standard deviation has a zero")


def _three(
    values: list[float], default: tuple[float, float, float], what: str
) -> tuple[float, float, float]:
    if not values:
        return default
    if len(values) != 3:
        raise ValueError(f"{what} has {len(values)} values, not one per colour channel")
    return (float(values[0]), float(values[1]), float(values[2]))


# Role -> tensor name (without ".weight" / ".bias") in each layout. "{i}" is the layer.
LLAMACPP_NAMES = {
    "patch": "v.patch_embd",
    "position": "v.position_embd",
    "post_norm": "v.post_ln",
    "soft_norm": "mm.soft_emb_norm",
    "projection": "mm.input_projection",
    "norm1": "v.blk.{i}.ln1",
    "q": "v.blk.{i}.attn_q",
    "k": "v.blk.{i}.attn_k",
    "v": "v.blk.{i}.attn_v",
    "out": "v.blk.{i}.attn_out",
    "norm2": "v.blk.{i}.ln2",
    "up": "v.blk.{i}.ffn_up",
    "down": "v.blk.{i}.ffn_down",
}
OLLAMA_NAMES = {
    "patch": "v.patch_embedding",
    "position": "v.position_embedding",
    "post_norm": "v.post_layernorm",
    "soft_norm": "mm.mm_soft_emb_norm",
    "projection": "mm.mm_input_projection",
    "norm1": "v.blk.{i}.layer_norm1",
    "q": "v.blk.{i}.attn_q",
    "k": "v.blk.{i}.attn_k",
    "v": "v.blk.{i}.attn_v",
    "out": "v.blk.{i}.attn_output",
    "norm2": "v.blk.{i}.layer_norm2",
    "up": "v.blk.{i}.mlp.fc1",
    "down": "v.blk.{i}.mlp.fc2",
}


class _Binder:
    def __init__(self, weights: Weights, names: dict[str, str]) -> None:
        self.weights, self.names = weights, names

    def w(self, role: str, i: int = 0, matmul: bool | None = None) -> Tensor:
        return self.weights.require(self.names[role].format(i=i) + ".weight", matmul=matmul)

    def b(self, role: str, i: int = 0) -> Tensor | None:
        return self.weights.get(self.names[role].format(i=i) + ".bias", matmul=False)


@dataclass
class VisionLayer:
    """One encoder layer's weights (biases may be absent)."""

    norm1: Tensor
    norm1_bias: Tensor | None
    attn: EncoderAttention
    norm2: Tensor
    norm2_bias: Tensor | None
    up: Tensor
    up_bias: Tensor | None
    down: Tensor
    down_bias: Tensor | None

    @classmethod
    def bind(cls, b: _Binder, i: int) -> VisionLayer:
        return cls(
            norm1=b.w("norm1", i),
            norm1_bias=b.b("norm1", i),
            attn=EncoderAttention.bind(lambda role: b.w(role, i), lambda role: b.b(role, i)),
            norm2=b.w("norm2", i),
            norm2_bias=b.b("norm2", i),
            up=b.w("up", i),
            up_bias=b.b("up", i),
            down=b.w("down", i),
            down_bias=b.b("down", i),
        )


class VisionTower:
    """The encoder's weights (bound in the constructor) and its graph (`encode`)."""

    def __init__(self, config: VisionConfig, weights: Weights) -> None:
        self.config = config
        if weights.has("v.patch_embd.weight"):
            names = LLAMACPP_NAMES
        elif weights.has("v.patch_embedding.weight"):
            names = OLLAMA_NAMES
        else:  # a missing tensor: name it as the layout the settings came from has it
            names = LLAMACPP_NAMES if config.naming == "llama.cpp" else OLLAMA_NAMES
        self.naming = "llama.cpp" if names is LLAMACPP_NAMES else "ollama"
        b = _Binder(weights, names)
        # Not laid out for matrix products: reshaped, added or transposed in the graph.
        self.patch = b.w("patch", matmul=False)  # [P, P, 3, embd]
        self.patch_bias = b.b("patch")
        self.position = b.w("position", matmul=False)  # [embd, n_patches]
        self.layers = [VisionLayer.bind(b, i) for i in range(config.block_count)]
        self.post_norm = b.w("post_norm")
        self.post_norm_bias = b.b("post_norm")
        self.soft_norm = b.w("soft_norm")  # 1 + w, as converted
        self.projection = b.w("projection", matmul=False)  # [text_embd, embd]

    @property
    def output_length(self) -> int:
        """The text model's embedding size the projector maps into."""
        return self.projection.dim(0)

    def check(self) -> None:
        """Raise ValueError when the weights' shapes disagree with the settings."""
        cfg = self.config
        p, embd = cfg.patch_size, cfg.embedding_length
        n = cfg.patches_per_side**2
        check_shapes(
            {
                "patch embedding": (self.patch.shape, (p, p, 3, embd)),
                "position embedding": (self.position.shape, (embd, n)),
                "input projection": (self.projection.shape[1:], (embd,)),
            }
        )

    def encode(self, ctx: Context, pixels: np.ndarray) -> Tensor:
        """Build the graph of one image's embeddings `[text_embd, tokens_per_image]` from its
        pixel values `[3, S, S]` (numpy order, as `image.preprocess` gives them)."""
        cfg = self.config
        p, side, embd = cfg.patch_size, cfg.patches_per_side, cfg.embedding_length
        n = side * side
        # [3, S, S] -> [row, column, channel, y, x] -> one row of 3*P*P values per patch
        patches = pixels.reshape(3, side, p, side, p).transpose(1, 3, 0, 2, 4).reshape(n, -1)
        x = ctx.from_numpy(np.ascontiguousarray(patches, dtype=np.float32))  # [3*P*P, n]
        h = linear(ctx, x, ctx.reshape(self.patch, 3 * p * p, embd), self.patch_bias)
        h = ctx.add(h, self._f32(ctx, self.position))  # [embd, n]
        for layer in self.layers:
            h = self._layer(ctx, layer, h)
        h = layer_norm(ctx, h, self.post_norm, self.post_norm_bias, cfg.eps)
        return self._project(ctx, h)

    def _layer(self, ctx: Context, layer: VisionLayer, h: Tensor) -> Tensor:
        cfg = self.config
        hd, heads = cfg.head_dim, cfg.head_count
        x = layer_norm(ctx, h, layer.norm1, layer.norm1_bias, cfg.eps)
        q, k, v = layer.attn.qkv(ctx, x, hd, heads)  # [hd, heads, n]
        a = full_attention(ctx, q, k, v, 1.0 / math.sqrt(hd))  # [embd, n]
        h = ctx.add(layer.attn.output(ctx, a), h)
        x = layer_norm(ctx, h, layer.norm2, layer.norm2_bias, cfg.eps)
        f = gelu_tanh(ctx, linear(ctx, x, layer.up, layer.up_bias))
        return ctx.add(linear(ctx, f, layer.down, layer.down_bias), h)

    def _project(self, ctx: Context, h: Tensor) -> Tensor:
        cfg = self.config
        side, embd, k = cfg.patches_per_side, cfg.embedding_length, cfg.kernel
        grid = ctx.reshape(ctx.cont(ctx.permute(h, 1, 0)), side, side, embd)  # [x, y, embd]
        pooled = ctx.pool_2d(grid, k, k, "avg")  # [side/k, side/k, embd]
        tokens = cfg.tokens_per_image
        pooled = ctx.cont(ctx.permute(ctx.reshape(pooled, tokens, embd), 1, 0))  # [embd, tokens]
        normed = rms_norm(ctx, pooled, self.soft_norm, cfg.eps)
        w = ctx.permute(self.projection, 1, 0)  # [embd, text_embd], a transposed view
        w = ctx.cont(w) if w.dtype == DType.F32 else ctx.cast(w, DType.F32)
        return ctx.mul_mat(w, normed)  # [text_embd, tokens]

    @staticmethod
    def _f32(ctx: Context, t: Tensor) -> Tensor:
        return t if t.dtype == DType.F32 else ctx.cast(t, DType.F32)
