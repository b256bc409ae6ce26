"""What the image encoders of the vision plugins share (ViT-style: square patches, multi-head
attention): the config's common sizes and checks, a layer's self-attention weights and
projections, and the check of weight shapes."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from ..engine.ml import Context, Tensor, linear

__all__ = ["EncoderAttention", "EncoderConfig", "check_shapes"]


@dataclass(frozen=True)
class EncoderConfig:
    """The sizes every encoder config has (0 where the file lacks the key). Subclass it (a
    frozen dataclass) with the encoder's own fields."""

    image_size: int
    patch_size: int
    embedding_length: int
    feed_forward_length: int
    block_count: int
    head_count: int
    eps: float  # the layer norms' epsilon

    @property
    def patches_per_side(self) -> int:
        return self.image_size // self.patch_size

    @property
    def head_dim(self) -> int:
        return self.embedding_length // self.head_count

    def check_sizes(self, *others: int) -> None:
        """Raise ValueError with a sentence when one of the sizes (but the feed-forward
        length) or `others` (further sizes that must be positive) is missing, the image does
        not split into whole patches, or the embedding does not split into the heads."""
        image, patch, dims, heads = (
            self.image_size,
            self.patch_size,
            self.embedding_length,
            self.head_count,
        )
        if min(image, patch, dims, heads, self.block_count, *others) <= 0:
            raise ValueError("the image encoder's sizes are missing from the file")
        if image % patch:
            raise ValueError(f"the image size {image} is not a multiple of the patch size {patch}")
        if dims % heads:
            raise ValueError(
                f"the image encoder's {dims} dimensions do not split into {heads} heads"
            )


@dataclass
class EncoderAttention:
    """An encoder layer's self-attention weights (biases may be absent) and its projections
    (the attention itself is the plugin's: masks and scale differ)."""

    q: Tensor
    q_bias: Tensor | None
    k: Tensor
    k_bias: Tensor | None
    v: Tensor
    v_bias: Tensor | None
    out: Tensor
    out_bias: Tensor | None

    @classmethod
    def bind(
        cls, weight: Callable[[str], Tensor], bias: Callable[[str], Tensor | None]
    ) -> EncoderAttention:
        """Bound by role, "q", "k", "v" and "out": `weight(role)` and `bias(role)` give the
        tensors (the file's names are the plugin's)."""
        return cls(
            q=weight("q"),
            q_bias=bias("q"),
            k=weight("k"),
            k_bias=bias("k"),
            v=weight("v"),
            v_bias=bias("v"),
            out=weight("out"),
            out_bias=bias("out"),
        )

    def qkv(
        self, ctx: Context, x: Tensor, head_dim: int, heads: int
    ) -> tuple[Tensor, Tensor, Tensor]:
        """x `[embd, n]` -> q, k, v `[head_dim, heads, n]` (biases added before the reshape)."""
        n = x.dim(1)
        q = ctx.reshape(linear(ctx, x, self.q, self.q_bias), head_dim, heads, n)
        k = ctx.reshape(linear(ctx, x, self.k, self.k_bias), head_dim, heads, n)
        v = ctx.reshape(linear(ctx, x, self.v, self.v_bias), head_dim, heads, n)
        return q, k, v

    def output(self, ctx: Context, a: Tensor) -> Tensor:
        """The output projection `[embd, n]` -> `[embd, n]`."""
        return linear(ctx, a, self.out, self.out_bias)


def check_shapes(shapes: Mapping[str, tuple[Sequence[int], Sequence[int]]]) -> None:
    """Raise ValueError naming the first of `shapes` (what -> (the weight's shape, the shape
    the settings make it)) whose two shapes differ."""
    for what, (have, want) in shapes.items():
        if tuple(have) != tuple(want):
            raise ValueError(
                f"the image encoder's {what} is {list(have)}, but its settings make it {list(want)}"
            )
