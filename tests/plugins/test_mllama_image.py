"""Llama 3.2 Vision preprocessing (hearth_mllama.image) against transformers'
MllamaImageProcessorPil (what AutoProcessor gives without torchvision), with Llama 3.2
Vision's processor settings at a small tile size: pixel values, aspect ratio ids and tile
counts identical."""

from __future__ import annotations

import io

import numpy as np
import pytest
from PIL import Image, ImageOps

from hearth.plugins.testing import sample_images
from hearth_mllama.image import CLIP_MEAN, CLIP_STD, preprocess, supported_aspect_ratios

SIZE, TILES = 56, 4


def _png(width: int, height: int, seed: int) -> bytes:
    rng = np.random.default_rng(seed)
    buf = io.BytesIO()
    Image.fromarray(rng.integers(0, 256, (height, width, 3), dtype=np.uint8)).save(buf, "PNG")
    return buf.getvalue()


IMAGES = sample_images()  # normal, tall, tiny, jpeg, rgba, palette, grey, animated, exif
IMAGES |= {
    "wide": _png(300, 40, 1),  # 1 x 4 tiles
    "tall4": _png(50, 400, 2),  # 4 x 1
    "square": _png(100, 100, 3),  # 2 x 2
    "large": _png(1000, 700, 4),  # downscaled
    "exact": _png(56, 112, 5),  # 2 x 1, no resize
    "thin": _png(1, 300, 6),  # a side of one pixel
}


@pytest.fixture(scope="module")
def processor():
    from transformers.models.mllama.image_processing_pil_mllama import MllamaImageProcessorPil

    return MllamaImageProcessorPil(
        size={"height": SIZE, "width": SIZE},
        max_image_tiles=TILES,
        image_mean=list(CLIP_MEAN),
        image_std=list(CLIP_STD),
    )


@pytest.mark.parametrize("name", list(IMAGES))
def test_tiles_equal_transformers(processor, name):
    data = IMAGES[name]
    picture = Image.open(io.BytesIO(data))
    if name == "exif":  # transformers ignores the orientation; give it the upright picture
        picture = ImageOps.exif_transpose(picture)
    want = processor(images=[[picture]], return_tensors="np")
    ours = preprocess(data, image_size=SIZE, max_num_tiles=TILES)
    assert ours.aspect_ratio_id == int(want["aspect_ratio_ids"][0, 0])
    assert ours.num_tiles == int(want["num_tiles"][0][0])
    assert int(want["aspect_ratio_mask"][0, 0].sum()) == ours.num_tiles
    pixels = np.asarray(want["pixel_values"][0, 0])
    assert ours.pixels.shape == pixels.shape == (TILES, 3, SIZE, SIZE)
    assert ours.pixels.dtype == np.float32
    np.testing.assert_array_equal(ours.pixels, pixels)


def test_the_images_cover_several_arrangements():
    ids = {
        preprocess(d, image_size=SIZE, max_num_tiles=TILES).aspect_ratio_id for d in IMAGES.values()
    }
    assert len(ids) >= 5


def test_aspect_ratios_as_transformers_lists_them():
    from transformers.models.mllama.image_processing_pil_mllama import (
        get_all_supported_aspect_ratios,
    )

    for tiles in (1, 4, 6):
        assert list(supported_aspect_ratios(tiles)) == [
            tuple(r) for r in get_all_supported_aspect_ratios(tiles)
        ]


def test_bytes_that_are_no_image_raise_value_error():
    with pytest.raises(ValueError, match="not an image"):
        preprocess(b"GIF89a but not really", image_size=SIZE, max_num_tiles=TILES)
    with pytest.raises(ValueError, match="positive"):
        preprocess(IMAGES["tiny"], image_size=0, max_num_tiles=TILES)
