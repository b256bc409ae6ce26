"""Building blocks for decoder-only transformers, so a plugin writes only what is its own.

From the bottom up (shapes in ggml order; `n` is the number of tokens in the batch):

* `TransformerConfig.read(meta, defaults)`: the hyperparameters every such file carries
  (heads, GQA, head sizes, RMS epsilon, RoPE options, context); `ConfigDefaults` holds the
  architecture's values for keys a file leaves out.
* `Attention`: one layer's `attn_q/k/v/output` weights (biases when the file has them);
  `qkv()` projects `[embd, n]` to per-head queries, keys and values, `forward()` adds RoPE
  and attention through the KV cache (grouped-query heads included); `NormedAttention` and
  `FusedAttention` are its Qwen3 and Phi-3 kin (module `parts.py`, re-exported here).
* `GatedMLP`: `ffn_gate/up/down` with SiLU (SwiGLU) or GELU (GeGLU); `FusedMLP` (Phi-3).
* `Block`: a pre-norm layer's weights (`attn_norm`, `Attention`, `ffn_norm`, `GatedMLP`).
* `layers(cache, batch, blocks)`: the layer loop; points the cache at each layer, and
  `Layer.output_rows` drops the rows nobody wants logits for in the last layer.
* `Transformer`: embeddings, the loop, the final norm and output matrix, validation and
  context shift; a subclass writes `layer()`, and `block_for(i)` where its layers differ
  (mllama's cross-attention layers). `pre_norm_layer` is the Llama-style pre-norm layer,
  which `StandardTransformer` runs in every layer (Llama, Qwen2, Mistral...).

Weight groups are dataclasses whose fields are GGUF names (`weight()` from
`hearth.engine.ml`); `part(Cls)` nests a group under the same prefix and `bind_parts` binds
the whole tree, e.g. `bind_parts(Block, weights, "blk.3.")`.
"""

from __future__ import annotations

import abc
import dataclasses
import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generic, Protocol, Self, TypeVar, cast

from ..engine.architecture import Architecture, Metadata, Weights
from ..engine.input import Batch
from ..engine.kvcache import Cache, Causal, ShiftFn, Wrapper
from ..engine.ml import (
    Context,
    RopeOptions,
    Tensor,
    bind,
    linear,
    rms_norm,
    weight,
)
from .parts import Attend, Attention, FusedAttention, FusedMLP, GatedMLP, NormedAttention
from .settings import read_rope, shift_rope

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

__all__ = [
    "Attend",
    "Attention",
    "Block",
    "ConfigDefaults",
    "FusedAttention",
    "FusedMLP",
    "GatedMLP",
    "Layer",
    "NormedAttention",
    "PreNormBlock",
    "StandardTransformer",
    "Transformer",
    "TransformerConfig",
    "bind_parts",
    "layers",
    "part",
    "sliding_window_cache",
    "with_multimodal",
]

T = TypeVar("T", bound="DataclassInstance")
B = TypeVar("B", bound="DataclassInstance")  # a layer's weights
E = TypeVar("E")
C = TypeVar("C", bound="TransformerConfig")


def part(cls: type[T]) -> T:
    """Declare a dataclass field holding a nested weight group, bound by `bind_parts` with
    the enclosing group's prefix (`attn: Attention = part(Attention)`)."""
    return cast(T, dataclasses.field(default=None, metadata={"part": cls}))


def bind_parts(cls: type[T], weights: Weights, prefix: str = "") -> T:
    """`hearth.engine.ml.bind` that also binds `part()` fields, recursively."""
    parts = {
        f.name: bind_parts(f.metadata["part"], weights, prefix)
        for f in dataclasses.fields(cls)
        if "part" in f.metadata
    }
    return bind(cls, weights, prefix, **parts)


@dataclass(frozen=True)
class ConfigDefaults:
    """An architecture's values for keys a file may leave out (llama.cpp's, ideally)."""

    rope_base: float  # rope.freq_base
    neox: bool  # RoPE layout: rotate halves (GPT-NeoX, Gemma, Qwen) instead of pairs (Llama)
    rms_eps: float  # attention.layer_norm_rms_epsilon
    context_length: int
    key_length: int = 0  # attention.key_length; 0: embedding_length / head_count


@dataclass(frozen=True)
class TransformerConfig:
    """Hyperparameters of a decoder-only transformer. Subclass it (a frozen dataclass) to add
    an architecture's own fields, and read it in `from_gguf` with `read()`."""

    block_count: int
    embedding_length: int
    feed_forward_length: int
    head_count: int
    head_count_kv: int
    key_length: int  # per head, queries and keys
    value_length: int  # per head
    rms_eps: float
    rope: RopeOptions
    attention_scale: float  # multiplies q·k
    context_length: int

    @classmethod
    def read(
        cls,
        meta: Metadata,
        defaults: ConfigDefaults,
        *,
        attention_scale: float | None = None,
        **extra: Any,
    ) -> Self:
        """Read the common keys (`block_count`, `embedding_length`, `feed_forward_length`,
        `attention.head_count[_kv]`, `attention.key_length`/`value_length`, the RMS epsilon,
        `rope.*`, `context_length`), `defaults` standing in for absent ones.
        `attention_scale` overrides `attention.scale` (default 1/sqrt(key_length)). `extra`
        are the subclass's own fields. Raises ValueError when the sizes are missing."""
        blocks = meta.uint("block_count")
        embd = meta.uint("embedding_length")
        heads = meta.uint("attention.head_count")
        if not blocks or not embd or not heads:
            keys = ", ".join(meta.key(k) for k in ("block_count", "embedding_length"))
            raise ValueError(f"the file lacks {keys} or {meta.key('attention.head_count')}")
        k_len = meta.uint("attention.key_length", defaults.key_length or embd // heads)
        if attention_scale is None:
            attention_scale = meta.float("attention.scale", 0.0) or 1.0 / math.sqrt(k_len)
        return cls(
            block_count=blocks,
            embedding_length=embd,
            feed_forward_length=meta.uint("feed_forward_length"),
            head_count=heads,
            head_count_kv=meta.uint("attention.head_count_kv", heads) or heads,
            key_length=k_len,
            value_length=meta.uint("attention.value_length", k_len),
            rms_eps=meta.float("attention.layer_norm_rms_epsilon", defaults.rms_eps),
            rope=read_rope(meta, base=defaults.rope_base, neox=defaults.neox, dims=k_len),
            attention_scale=attention_scale,
            context_length=meta.uint("context_length", defaults.context_length),
            **extra,
        )


@dataclass
class Block:
    """A pre-norm layer's weights: `attn_norm`, `attn`, `ffn_norm`, `mlp`. Subclass it to add
    tensors (and redeclare `attn`/`mlp` with a subclass of theirs)."""

    attn_norm: Tensor = weight()
    attn: Attention = part(Attention)
    ffn_norm: Tensor = weight()
    mlp: GatedMLP = part(GatedMLP)


class PreNormBlock(Protocol):
    """What `pre_norm_layer` reads: a `Block`, or a group of other weights with these parts
    (Phi-3's fused projections; a mixture of experts' block, whose `feed_forward` the
    architecture overrides, needs no `mlp`)."""

    @property
    def attn_norm(self) -> Tensor: ...
    @property
    def attn(self) -> Attend: ...
    @property
    def ffn_norm(self) -> Tensor: ...


class _FeedForward(Protocol):
    def forward(self, ctx: Context, x: Tensor) -> Tensor: ...


@dataclass(frozen=True)
class Layer:
    """Where the layer loop stands: layer `index` of the model, evaluating `batch`."""

    index: int
    last: bool
    batch: Batch

    def output_rows(self, ctx: Context, *tensors: Tensor) -> tuple[Tensor, ...]:
        """Each `[*, n]` tensor cut to the batch's output rows `[*, n_outputs]` in the last
        layer (unchanged elsewhere). Call it once attention has read every row, before the
        work that only the output rows need (output projection, feed-forward)."""
        if not self.last:
            return tensors
        return tuple(ctx.get_rows(t, self.batch.outputs) for t in tensors)


def with_multimodal(ctx: Context, batch: Batch, hidden: Tensor) -> Tensor:
    """`hidden` `[embd, n]` with the batch's multimodal rows (an image's positions) replaced
    by their embeddings, which the core computed in the encoder's own graph. Call it after
    any scaling of the token embeddings (image embeddings are not scaled)."""
    if batch.multimodal_embd is None or batch.multimodal_rows is None:
        return hidden
    return ctx.set_rows(hidden, batch.multimodal_embd, batch.multimodal_rows)


def layers(cache: Cache, batch: Batch, blocks: Sequence[E]) -> Iterator[tuple[Layer, E]]:
    """Loop over the blocks with the cache pointed at each one's layer (`set_layer`)."""
    last = len(blocks) - 1
    for i, block in enumerate(blocks):
        cache.set_layer(i)
        yield Layer(index=i, last=i == last, batch=batch), block


def sliding_window_cache(shift: ShiftFn, window: int, sliding: Sequence[bool]) -> Cache:
    """The KV cache of a model whose layers i with `sliding[i]` attend to the last `window`
    positions and the others to everything (Gemma 3, gpt-oss); one `Causal` when none slide."""
    if not any(sliding):
        return Causal(shift=shift)
    local = Causal(shift=shift, window=window)
    return Wrapper([local, Causal(shift=shift)], lambda i: 0 if sliding[i] else 1)


class Transformer(Architecture[C], Generic[C, B]):
    """A decoder-only transformer: `token_embd`, one `B` per layer (`blk.N.`), `output_norm`
    and `output` (tied to `token_embd` when the file has none; `output.bias` when present).

    A subclass calls `super().__init__(config, weights, BlockClass)` and writes `layer()`; it
    may override `block_for` (layers of several kinds), `embed`, `logits`, `rope` (per-layer
    RoPE options) and set `rope_factors`. `shift` re-RoPEs with `rope(layer)` and
    `rope_factors`; `validate` checks GQA heads.
    """

    def __init__(self, config: C, weights: Weights, block: type[B]) -> None:
        super().__init__(config, weights)
        self.block_class = block
        self.token_embd = weights.require("token_embd.weight", matmul=False)
        self.output_norm = weights.require("output_norm.weight")
        self.output = weights.require("output.weight", "token_embd.weight", matmul=True)
        self.output_bias = weights.get("output.bias")
        self.rope_factors: Tensor | None = None
        self.blocks = [
            bind_parts(self.block_for(i), weights, f"blk.{i}.") for i in range(config.block_count)
        ]

    def block_for(self, layer: int) -> type[B]:
        """The weights class of `layer` (`blk.N.`), bound in the constructor and handed to
        `layer()`: the constructor's `block` by default. Override it when layers differ
        (with `B` a union of the classes; `self.config` is set, the weights not yet bound)."""
        return self.block_class

    def validate(self) -> None:
        if self.config.head_count % self.config.head_count_kv:
            raise ValueError("head_count must be a multiple of head_count_kv")

    def rope(self, layer: int) -> RopeOptions:
        """The RoPE options of `layer` (the config's for every layer by default)."""
        return self.config.rope

    def shift(self, ctx: Context, layer: int, key: Tensor, delta: Tensor) -> Tensor:
        """Rotate cached keys by `delta`: the layer's RoPE without the magnitude factor the
        keys already carry (`shift_rope`)."""
        return ctx.rope(key, delta, shift_rope(self.rope(layer)), self.rope_factors)

    def embed(self, ctx: Context, batch: Batch) -> Tensor:
        """The input hidden states `[embd, n]`: token embeddings."""
        return ctx.get_rows(self.token_embd, batch.tokens)

    @abc.abstractmethod
    def layer(self, ctx: Context, at: Layer, block: B, h: Tensor, cache: Cache) -> Tensor:
        """One layer: hidden states `[embd, n]` in, `[embd, n]` out (`[embd, n_outputs]` from
        the last layer: see `Layer.output_rows`). The cache is already at this layer."""

    def pre_norm_layer(
        self, ctx: Context, at: Layer, block: PreNormBlock, h: Tensor, cache: Cache
    ) -> Tensor:
        """The pre-norm layer of Llama, Qwen2, Mistral and kin: `h += attn(rms_norm(h))`,
        then `h += feed_forward(rms_norm(h))`, RoPE from `rope(layer)` and `rope_factors`.
        `block` has `attn_norm`, `attn` (an `Attention`) and `ffn_norm`."""
        cfg, rope = self.config, self.rope(at.index)
        x = rms_norm(ctx, h, block.attn_norm, cfg.rms_eps)
        a = block.attn.forward(ctx, x, at.batch.positions, cache, cfg, rope, self.rope_factors)
        a, h = at.output_rows(ctx, a, h)
        h = ctx.add(block.attn.output(ctx, a), h)
        x = rms_norm(ctx, h, block.ffn_norm, cfg.rms_eps)
        return ctx.add(self.feed_forward(ctx, block, x), h)

    def feed_forward(self, ctx: Context, block: Any, x: Tensor) -> Tensor:
        """The feed-forward of `pre_norm_layer`, `[embd, n]` -> `[embd, n]`: the block's `mlp`
        (gated or fused) by default; a mixture of experts routes instead (`Experts.forward`)."""
        mlp: _FeedForward = block.mlp
        return mlp.forward(ctx, x)

    def logits(self, ctx: Context, batch: Batch, h: Tensor) -> Tensor:
        """The final norm, then the output matrix: `[embd, n_outputs]` -> `[vocab, n_outputs]`
        (the normed `[embd, n_outputs]` itself when `batch.hidden`)."""
        h = rms_norm(ctx, h, self.output_norm, self.config.rms_eps)
        if batch.hidden:
            return h
        return linear(ctx, h, self.output, self.output_bias)

    def forward(self, ctx: Context, batch: Batch, cache: Cache) -> Tensor:
        h = with_multimodal(ctx, batch, self.embed(ctx, batch))
        for at, block in layers(cache, batch, self.blocks):
            h = self.layer(ctx, at, block, h, cache)
        return self.logits(ctx, batch, h)


class StandardTransformer(Transformer[C, Block]):
    """`pre_norm_layer` in every layer: Llama, Qwen2, Mistral and kin. `block`: the layers'
    weights class, a `Block` subclass where the layer has more weights (Qwen3's
    `NormedAttention`)."""

    def __init__(self, config: C, weights: Weights, block: type[Block] = Block) -> None:
        super().__init__(config, weights, block)

    def layer(self, ctx: Context, at: Layer, block: Block, h: Tensor, cache: Cache) -> Tensor:
        return self.pre_norm_layer(ctx, at, block, h, cache)
