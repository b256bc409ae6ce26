"""What the image encoders of the vision plugins share (ViT-style: square patches, multi-head
attention): the config's common sizes and checks, and the check of weight shapes."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

__all__ = ["EncoderConfig", "check_shapes"]


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


def check_shapes(shapes: Mapping[str, tuple[Sequence[int], Sequence[int]]]) -> None:
    """Raise ValueError naming the first of `shapes` (what -> (the weight's shape, the shape
    the settings make it)) whose two shapes differ."""
    for what, (have, want) in shapes.items():
        if tuple(have) != tuple(want):
            raise ValueError(
                f"the image encoder's {what} is {list(have)}, but its settings make it {list(want)}"
            )
