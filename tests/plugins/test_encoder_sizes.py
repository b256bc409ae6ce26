"""hearth.plugins.vision.check_encoder_sizes: the size checks of every image encoder
(gemma3's and mllama's `VisionConfig.check`)."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from hearth.plugins.vision import check_encoder_sizes


@dataclass
class Sizes:
    image_size: int = 56
    patch_size: int = 14
    embedding_length: int = 32
    head_count: int = 2
    block_count: int = 4


def test_sizes_that_fit_pass():
    check_encoder_sizes(Sizes(), 48, 1)


@pytest.mark.parametrize(
    ("sizes", "others", "sentence"),
    [
        (Sizes(image_size=0), (), "the image encoder's sizes are missing from the file"),
        (Sizes(block_count=0), (), "the image encoder's sizes are missing from the file"),
        (Sizes(), (48, 0), "the image encoder's sizes are missing from the file"),
        (Sizes(image_size=60), (), "the image size 60 is not a multiple of the patch size 14"),
        (Sizes(head_count=3), (), "the image encoder's 32 dimensions do not split into 3 heads"),
    ],
)
def test_bad_sizes_are_refused_with_a_sentence(sizes, others, sentence):
    with pytest.raises(ValueError, match=f"^{sentence}$"):
        check_encoder_sizes(sizes, *others)
