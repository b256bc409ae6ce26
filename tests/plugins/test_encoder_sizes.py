"""hearth.plugins.EncoderConfig and check_shapes: the checks of every image encoder
(gemma3's and mllama's `VisionConfig.check` and encoder `check`)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from hearth.plugins import EncoderConfig, check_shapes

SIZES = EncoderConfig(
    image_size=56,
    patch_size=14,
    embedding_length=32,
    feed_forward_length=0,
    block_count=4,
    head_count=2,
    eps=1e-6,
)


def test_sizes_that_fit_pass():
    SIZES.check_sizes(48, 1)
    assert (SIZES.patches_per_side, SIZES.head_dim) == (4, 16)


@pytest.mark.parametrize(
    ("changes", "others", "sentence"),
    [
        ({"image_size": 0}, (), "the image encoder's sizes are missing from the file"),
        ({"block_count": 0}, (), "the image encoder's sizes are missing from the file"),
        ({}, (48, 0), "the image encoder's sizes are missing from the file"),
        ({"image_size": 60}, (), "the image size 60 is not a multiple of the patch size 14"),
        ({"head_count": 3}, (), "the image encoder's 32 dimensions do not split into 3 heads"),
    ],
)
def test_bad_sizes_are_refused_with_a_sentence(changes, others, sentence):
    with pytest.raises(ValueError, match=f"^{sentence}$"):
        replace(SIZES, **changes).check_sizes(*others)


def test_a_weight_of_another_shape_is_named():
    check_shapes({"patch embedding": ([14, 14, 3, 32], (14, 14, 3, 32))})
    with pytest.raises(ValueError, match=r"^the image encoder's projector is \[8\], but its "):
        check_shapes({"patch embedding": ((1,), [1]), "projector": ((8,), (16,))})
