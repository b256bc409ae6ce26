"""Checks shared by the image encoders of the vision plugins (ViT-style: square patches,
multi-head attention)."""

from __future__ import annotations

from typing import Protocol

__all__ = ["EncoderSizes", "check_encoder_sizes"]


class EncoderSizes(Protocol):
    """The sizes every encoder config has (0 where the file lacks the key)."""

    @property
    def image_size(self) -> int: ...
    @property
    def patch_size(self) -> int: ...
    @property
    def embedding_length(self) -> int: ...
    @property
    def head_count(self) -> int: ...
    @property
    def block_count(self) -> int: ...


def check_encoder_sizes(config: EncoderSizes, *others: int) -> None:
    """Raise ValueError with a sentence when one of `config`'s sizes or `others` (further sizes
    that must be positive) is missing, the image does not split into whole patches, or the
    embedding does not split into the heads."""
    image, patch, dims, heads = (
        config.image_size,
        config.patch_size,
        config.embedding_length,
        config.head_count,
    )
    if min(image, patch, dims, heads, config.block_count, *others) <= 0:
        raise ValueError("the image encoder's sizes are missing from the file")
    if image % patch:
        raise ValueError(f"the image size {image} is not a multiple of the patch size {patch}")
    if dims % heads:
        raise ValueError(f"the image encoder's {dims} dimensions do not split into {heads} heads")
