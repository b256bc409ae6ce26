"""Llama 3.2 Vision's image encoder: the tiled ViT (local and gated global layers) and the
multimodal projector, as a graph on `hearth.engine.ml`.

Settings (`mllama.vision.*`, as Ollama's converter writes them): `image_size`, `patch_size`,
`max_num_tiles`, `embedding_length`, `feed_forward_length`, `block_count`,
`global.block_count`, `attention.head_count`, `attention.layer_norm_epsilon`,
`intermediate_layers_indices`. Two file layouts carry them and the tensors, both read here:

* Ollama's one file (its current converter): the text model and the encoder together, keys
  under the model's own `mllama.` prefix. Layers `v.blk.N.` (local) and `v.global.blk.N.`:
  `attn_norm`, `attn_q`, `attn_k`, `attn_v`, `attn_output`, `ffn_norm`, `ffn_up` (fc1),
  `ffn_down` (fc2), and in the global layers `attn_gate` and `ffn_gate`.
* Ollama's registry layout for `llama3.2-vision` (made for its former llama.cpp-based
  runner, `llama/mllama.cpp`): a text file plus a projector file whose architecture is also
  `mllama`, read through `meta.projector` with the same `mllama.vision.*` keys. Layer names
  differ: `ln1`, `ln2`, `attn_out`, and the first feed-forward matrix is called `ffn_down`
  and the second `ffn_up` (that runner multiplies by `ffn_down` first).

Both hold the rest under the same names: `v.patch_embd.weight` (the stride-P convolution),
`v.class_embd`, `v.position_embd.weight` and `.gate`, `v.tile_position_embd.weight` and
`.gate`, `v.pre_tile_position_embd.weight`/`.gate`, `v.post_tile_position_embd.weight`/`.gate`,
`v.pre_ln`, `v.post_ln`, and the projector `mm.0.weight`/`.bias`. The gates are stored as
the converter repacks them: `tanh(gate)` for the tile, pre-, post-tile, attention and
feed-forward gates, `1 - tanh(gate)` for `v.position_embd.gate`; so the graph multiplies by
them as stored. Ollama's converter also permutes the rows of the vision `attn_q`/`attn_k`
(its Llama RoPE repack, applied by suffix); the permutation is the same for queries and keys
within each head, the encoder has no RoPE, so the dot products and the result are unchanged
and the graph uses the matrices as stored (as Ollama's own engine does).

The graph (ggml order; T = max_num_tiles, every tile computed, as transformers and Meta do;
n = (S/P)^2 + 1 positions with the class token, n' = n padded to a multiple of 8):

1. Patches cut on the host, times the patch embedding: `[embd, (S/P)^2, T]`; plus the
   pre-tile embedding of the aspect ratio (`[embd, 1, T]`, gated); the class embedding put
   first in each tile; plus the gated position embedding and the gated tile position
   embedding of the aspect ratio; LayerNorm (`pre_ln`); zero rows padding each tile to n'.
2. The rows reordered, the image's real rows first (`_row_order`); the local layers over
   all `T * n'` rows at once (pre-norm, attention, GELU MLP), with transformers' mask as
   attention in two parts: a row that is padding (a padding position, or a tile past the
   image's) does not see other padding rows; a real row sees every row. Each selected
   layer's INPUT is kept (Meta's reference, Ollama, vLLM and transformers <= 4.53 collect
   the intermediate features that way; transformers >= 4.54 takes each layer's output,
   which is not what the released weights were trained with).
3. LayerNorm (`post_ln`), plus the gated post-tile embedding (each row its tile's), then
   the global layers (the same, with tanh-gated attention and MLP outputs and the same
   masking).
4. Per row the final state then the kept states interleaved feature by feature (feature f
   of kept layer l at `embd + f * L + l`, as `torch.stack(..., dim=-1)` lays them out):
   `[embd * (L + 1)]`; the image's real rows (the first num_tiles * n, tile by tile); the
   projector `mm.0` maps them to the text model's size: `[text_embd, num_tiles * n]`.
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
    layer_norm,
    linear,
)

from .image import TiledImage, supported_aspect_ratios

__all__ = ["OLLAMA_NAMES", "PROJECTOR_NAMES", "VisionConfig", "VisionEncoder", "VisionLayer"]

_DEFAULT_EPS = 1e-5
_DEFAULT_TILES = 4
_PAD_TO = 8  # positions per tile are padded to a multiple of this


@dataclass(frozen=True)
class VisionConfig(EncoderConfig):
    """The encoder's settings; `naming` says which file layout they came from."""

    max_num_tiles: int
    global_block_count: int
    intermediate_layers: tuple[int, ...]
    naming: str  # "ollama" (one file) or "projector" (Ollama's registry projector file)

    @classmethod
    def from_gguf(cls, meta: Metadata) -> VisionConfig | None:
        """From the projector file's metadata when one was loaded, else from the model
        file's `mllama.vision.*` keys; None when neither has an encoder. Raises ValueError
        for a projector of another model."""
        src, naming = meta, "ollama"
        if meta.projector is not None:
            src, naming = meta.projector, "projector"
            if src.architecture != "mllama":
                raise ValueError(
                    f"the projector file is for '{src.architecture or 'an unknown model'}', "
                    "not Llama 3.2 Vision (mllama)"
                )
        elif not meta.has("vision.block_count"):
            return None
        return cls(
            image_size=src.uint("vision.image_size"),
            patch_size=src.uint("vision.patch_size"),
            max_num_tiles=src.uint("vision.max_num_tiles", _DEFAULT_TILES),
            embedding_length=src.uint("vision.embedding_length"),
            feed_forward_length=src.uint("vision.feed_forward_length"),
            block_count=src.uint("vision.block_count"),
            global_block_count=src.uint("vision.global.block_count"),
            head_count=src.uint("vision.attention.head_count"),
            eps=src.float("vision.attention.layer_norm_epsilon", _DEFAULT_EPS),
            intermediate_layers=tuple(src.ints("vision.intermediate_layers_indices")),
            naming=naming,
        )

    @property
    def num_patches(self) -> int:
        """Positions per tile: the patches and the class token (1601 for 560 / 14)."""
        return self.patches_per_side**2 + 1

    @property
    def padded_patches(self) -> int:
        """`num_patches` rounded up to a multiple of 8 (1608)."""
        return -(-self.num_patches // _PAD_TO) * _PAD_TO

    @property
    def num_aspect_ratios(self) -> int:
        """Rows of the aspect-ratio embedding tables (id 0 is padding)."""
        return len(supported_aspect_ratios(self.max_num_tiles)) + 1

    @property
    def features(self) -> int:
        """The projector's input size: the final state and each kept layer's."""
        return self.embedding_length * (len(self.intermediate_layers) + 1)

    def check(self) -> None:
        """Raise ValueError with a sentence for settings the encoder cannot run."""
        self.check_sizes(self.max_num_tiles, self.global_block_count)
        bad = [i for i in self.intermediate_layers if not 0 <= i < self.block_count]
        if bad or not self.intermediate_layers:
            raise ValueError(
                f"the image encoder's intermediate layers {list(self.intermediate_layers)} "
                f"are not among its {self.block_count} layers"
            )


# Role -> tensor name within a layer (".weight"/".bias" added) in each layout.
OLLAMA_NAMES = {
    "attn_norm": "attn_norm",
    "q": "attn_q",
    "k": "attn_k",
    "v": "attn_v",
    "out": "attn_output",
    "ffn_norm": "ffn_norm",
    "fc1": "ffn_up",
    "fc2": "ffn_down",
}
PROJECTOR_NAMES = {
    "attn_norm": "ln1",
    "q": "attn_q",
    "k": "attn_k",
    "v": "attn_v",
    "out": "attn_out",
    "ffn_norm": "ln2",
    "fc1": "ffn_down",  # llama/mllama.cpp: ff_i (applied first) is "ffn_down"
    "fc2": "ffn_up",
}


@dataclass
class VisionLayer:
    """One encoder layer's weights (biases may be absent; gates only in global layers)."""

    attn_norm: Tensor
    attn_norm_bias: Tensor | None
    attn: EncoderAttention
    ffn_norm: Tensor
    ffn_norm_bias: Tensor | None
    fc1: Tensor
    fc1_bias: Tensor | None
    fc2: Tensor
    fc2_bias: Tensor | None
    attn_gate: Tensor | None
    ffn_gate: Tensor | None

    @classmethod
    def bind(cls, weights: Weights, prefix: str, names: dict[str, str], gated: bool) -> VisionLayer:
        def w(role: str) -> Tensor:
            return weights.require(f"{prefix}{names[role]}.weight")

        def b(role: str) -> Tensor | None:
            return weights.get(f"{prefix}{names[role]}.bias", matmul=False)

        def gate(name: str) -> Tensor | None:
            return weights.require(prefix + name, matmul=False) if gated else None

        return cls(
            attn_norm=w("attn_norm"),
            attn_norm_bias=b("attn_norm"),
            attn=EncoderAttention.bind(w, b),
            ffn_norm=w("ffn_norm"),
            ffn_norm_bias=b("ffn_norm"),
            fc1=w("fc1"),
            fc1_bias=b("fc1"),
            fc2=w("fc2"),
            fc2_bias=b("fc2"),
            attn_gate=gate("attn_gate"),
            ffn_gate=gate("ffn_gate"),
        )


class VisionEncoder:
    """The encoder's weights (bound in the constructor) and its graph (`forward`)."""

    def __init__(self, config: VisionConfig, weights: Weights) -> None:
        self.config = config
        if weights.has("v.blk.0.ln1.weight"):
            names, self.naming = PROJECTOR_NAMES, "projector"
        elif weights.has("v.blk.0.attn_norm.weight"):
            names, self.naming = OLLAMA_NAMES, "ollama"
        else:  # a missing tensor: name it as the layout the settings came from has it
            self.naming = config.naming
            names = PROJECTOR_NAMES if config.naming == "projector" else OLLAMA_NAMES

        def w(name: str) -> Tensor:  # not laid out for products: added, looked up, reshaped
            return weights.require(name, matmul=False)

        self.patch = w("v.patch_embd.weight")  # [P, P, 3, embd]
        self.class_embd = w("v.class_embd")  # [embd]
        self.position = w("v.position_embd.weight")  # [embd, n]
        self.position_gate = w("v.position_embd.gate")  # 1 - tanh(gate)
        self.tile_position = w("v.tile_position_embd.weight")  # [T * n * embd, ratios]
        self.tile_position_gate = w("v.tile_position_embd.gate")  # tanh(gate)
        self.pre_tile = w("v.pre_tile_position_embd.weight")  # [T * embd, ratios]
        self.pre_tile_gate = w("v.pre_tile_position_embd.gate")
        self.post_tile = w("v.post_tile_position_embd.weight")
        self.post_tile_gate = w("v.post_tile_position_embd.gate")
        self.pre_ln = w("v.pre_ln.weight")
        self.pre_ln_bias = weights.get("v.pre_ln.bias", matmul=False)
        self.post_ln = w("v.post_ln.weight")
        self.post_ln_bias = weights.get("v.post_ln.bias", matmul=False)
        self.layers = [
            VisionLayer.bind(weights, f"v.blk.{i}.", names, gated=False)
            for i in range(config.block_count)
        ]
        self.global_layers = [
            VisionLayer.bind(weights, f"v.global.blk.{i}.", names, gated=True)
            for i in range(config.global_block_count)
        ]
        self.projector = weights.require("mm.0.weight")  # [features, text_embd]
        self.projector_bias = weights.get("mm.0.bias", matmul=False)

    @property
    def output_length(self) -> int:
        """The text model's embedding size the projector maps into."""
        return self.projector.dim(1)

    def check(self) -> None:
        """Raise ValueError when the weights' shapes disagree with the settings."""
        cfg = self.config
        cfg.check()
        p, embd, n, tiles = cfg.patch_size, cfg.embedding_length, cfg.num_patches, cfg.max_num_tiles
        ratios = cfg.num_aspect_ratios
        shapes = {
            "patch embedding": (self.patch.shape, (p, p, 3, embd)),
            "class embedding": (self.class_embd.shape, (embd,)),
            "position embedding": (self.position.shape, (embd, n)),
            "tile position embedding": (self.tile_position.shape, (tiles * n * embd, ratios)),
            "pre-tile embedding": (self.pre_tile.shape, (tiles * embd, ratios)),
            "post-tile embedding": (self.post_tile.shape, (tiles * embd, ratios)),
            "projector": (self.projector.shape[:1], (cfg.features,)),
        }
        ffn = cfg.feed_forward_length
        for i, layer in enumerate([*self.layers, *self.global_layers]):
            shapes[f"layer {i}'s first feed-forward matrix"] = (layer.fc1.shape, (embd, ffn))
        check_shapes(shapes)

    # -- the graph ----------------------------------------------------------------------

    def forward(self, ctx: Context, image: TiledImage) -> Tensor:
        """Build the graph of the image's cross-attention states `[text_embd, num_tiles *
        num_patches]` (its real tiles only, tile by tile; see the module docstring)."""
        cfg = self.config
        tiles, embd = cfg.max_num_tiles, cfg.embedding_length
        n, padded = cfg.num_patches, cfg.padded_patches
        want = (tiles, 3, cfg.image_size, cfg.image_size)
        if image.pixels.shape != want or not 1 <= image.num_tiles <= tiles:
            raise ValueError(
                f"the image's tiles are {list(image.pixels.shape)}, but the encoder takes "
                f"{list(want)}"
            )
        if not 1 <= image.aspect_ratio_id < cfg.num_aspect_ratios:
            raise ValueError(f"aspect ratio id {image.aspect_ratio_id} is out of range")
        ratio = ctx.from_numpy(np.array([image.aspect_ratio_id], dtype=np.int32))
        h = self._embed(ctx, image.pixels, ratio)  # [embd, n, T]
        h = layer_norm(ctx, h, self.pre_ln, self.pre_ln_bias, cfg.eps)
        if padded > n:
            zeros = np.zeros((tiles, padded - n, embd), dtype=np.float32)
            h = ctx.concat(h, ctx.from_numpy(zeros), 1)  # [embd, n', T]
        order, tile_of_row = self._row_order(image.num_tiles)
        h = ctx.reshape(h, embd, padded * tiles)
        h = ctx.get_rows(h, ctx.from_numpy(order))  # the image's real rows first
        real_rows = image.num_tiles * n
        kept: dict[int, Tensor] = {}
        for i, layer in enumerate(self.layers):
            if i in cfg.intermediate_layers:
                kept[i] = h  # the layer's input (Meta's semantics)
            h = self._layer(ctx, layer, h, real_rows)
        h = layer_norm(ctx, h, self.post_ln, self.post_ln_bias, cfg.eps)
        post = self._tile_embedding(ctx, self.post_tile, self.post_tile_gate, ratio)
        post = ctx.get_rows(ctx.reshape(post, embd, tiles), ctx.from_numpy(tile_of_row))
        h = ctx.add(h, post)  # each row its tile's post-tile embedding
        for layer in self.global_layers:
            h = self._layer(ctx, layer, h, real_rows)
        real = [self._real_rows(ctx, s, real_rows) for s in (h, *kept.values())]
        by_layer = dict(zip(kept, real[1:], strict=True))
        states = self._features(ctx, real[0], [by_layer[i] for i in cfg.intermediate_layers])
        return linear(ctx, states, self.projector, self.projector_bias)  # [text_embd, rows]

    def _embed(self, ctx: Context, pixels: np.ndarray, ratio: Tensor) -> Tensor:
        cfg = self.config
        p, side, embd, tiles = (
            cfg.patch_size,
            cfg.patches_per_side,
            cfg.embedding_length,
            cfg.max_num_tiles,
        )
        # [T, 3, S, S] -> [T, row, column, channel, y, x] -> one row of 3*P*P values per patch
        patches = pixels.reshape(tiles, 3, side, p, side, p).transpose(0, 2, 4, 1, 3, 5)
        patches = np.ascontiguousarray(patches.reshape(tiles, side * side, 3 * p * p))
        x = ctx.from_numpy(patches.astype(np.float32, copy=False))  # [3PP, patches, T]
        h = ctx.mul_mat(ctx.reshape(self.patch, 3 * p * p, embd), x)  # [embd, patches, T]
        h = ctx.add(h, self._tile_embedding(ctx, self.pre_tile, self.pre_tile_gate, ratio))
        cls = ctx.add(
            ctx.from_numpy(np.zeros((tiles, 1, embd), np.float32)), _f32(ctx, self.class_embd)
        )
        h = ctx.concat(cls, h, 1)  # [embd, n, T], the class token first
        position = ctx.mul(_f32(ctx, self.position), _f32(ctx, self.position_gate))
        h = ctx.add(h, position)
        tile_position = ctx.reshape(
            ctx.get_rows(self.tile_position, ratio), embd, cfg.num_patches, tiles
        )
        return ctx.add(h, ctx.mul(tile_position, _f32(ctx, self.tile_position_gate)))

    def _tile_embedding(self, ctx: Context, table: Tensor, gate: Tensor, ratio: Tensor) -> Tensor:
        """The aspect ratio's row of a per-tile embedding, gated: `[embd, 1, T]`."""
        cfg = self.config
        e = ctx.reshape(ctx.get_rows(table, ratio), cfg.embedding_length, 1, cfg.max_num_tiles)
        return ctx.mul(e, _f32(ctx, gate))

    def _row_order(self, num_tiles: int) -> tuple[np.ndarray, np.ndarray]:
        """The rows' order in the layers (I32 indices into the `[n', T]` grid: the image's
        real rows, tile by tile, then every padding row) and each row's tile there.

        transformers' `_prepare_aspect_ratio_attention_mask` masks a key for a query where
        both are padding (a padding position, or any position of a tile past the image's);
        a real row sees every row. With the real rows first, that is attention without a
        mask in two parts: the real rows' queries over every key, the padding rows' over the
        real rows' keys (the masked scores' exponentials are exactly zero). Every other step
        is row by row, so the order changes nothing else, and the output's rows are the
        first ones."""
        cfg = self.config
        n, padded, tiles = cfg.num_patches, cfg.padded_patches, cfg.max_num_tiles
        real = np.zeros((tiles, padded), dtype=bool)
        real[:num_tiles, :n] = True
        flat = real.reshape(-1)
        order = np.concatenate([np.flatnonzero(flat), np.flatnonzero(~flat)]).astype(np.int32)
        return order, (order // padded).astype(np.int32)

    def _layer(self, ctx: Context, layer: VisionLayer, h: Tensor, real_rows: int) -> Tensor:
        cfg = self.config
        rows, hd, heads = h.dim(1), cfg.head_dim, cfg.head_count
        x = layer_norm(ctx, h, layer.attn_norm, layer.attn_norm_bias, cfg.eps)
        q, k, v = layer.attn.qkv(ctx, x, hd, heads)  # [hd, heads, rows]
        scale = 1.0 / math.sqrt(hd)
        if real_rows == rows:
            a = full_attention(ctx, q, k, v, scale)
        else:  # see _row_order: padding rows' queries see the real rows only

            def part(t: Tensor, start: int, count: int) -> Tensor:
                return ctx.view(t, (hd, heads, count), t.strides[1:3], start * t.strides[2])

            real = full_attention(ctx, part(q, 0, real_rows), k, v, scale)
            pad = rows - real_rows
            keys, values = part(k, 0, real_rows), part(v, 0, real_rows)
            a = ctx.concat(
                real, full_attention(ctx, part(q, real_rows, pad), keys, values, scale), 1
            )
        a = layer.attn.output(ctx, a)
        if layer.attn_gate is not None:
            a = ctx.mul(a, _f32(ctx, layer.attn_gate))
        h = ctx.add(a, h)
        x = layer_norm(ctx, h, layer.ffn_norm, layer.ffn_norm_bias, cfg.eps)
        f = ctx.gelu_erf(linear(ctx, x, layer.fc1, layer.fc1_bias))
        f = linear(ctx, f, layer.fc2, layer.fc2_bias)
        if layer.ffn_gate is not None:
            f = ctx.mul(f, _f32(ctx, layer.ffn_gate))
        return ctx.add(f, h)

    def _features(self, ctx: Context, final: Tensor, kept: list[Tensor]) -> Tensor:
        """`[embd * (L + 1), rows]`: the final state, then the kept states interleaved
        feature by feature (`torch.stack(kept, -1)` flattened)."""
        embd, rows = self.config.embedding_length, final.dim(1)
        stacked: Tensor | None = None
        for s in kept:
            one = ctx.reshape(s, 1, embd, rows)
            stacked = one if stacked is None else ctx.concat(stacked, one, 0)
        assert stacked is not None
        return ctx.concat(final, ctx.reshape(stacked, embd * len(kept), rows), 0)

    def _real_rows(self, ctx: Context, states: Tensor, real_rows: int) -> Tensor:
        """The first `real_rows` rows of `[width, rows]` (the image's, see _row_order)."""
        view = ctx.view(states, (states.dim(0), real_rows), states.strides[1:2])
        return ctx.cont(view)


def _f32(ctx: Context, t: Tensor) -> Tensor:
    return t if t.dtype == DType.F32 else ctx.cast(t, DType.F32)
