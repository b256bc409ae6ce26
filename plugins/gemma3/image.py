"""Gemma 3 image preprocessing: file bytes to the vision tower's pixel values, with Pillow.

The steps are those of transformers' Gemma 3 image processor (`Gemma3ImageProcessorPil`, what
`AutoProcessor` gives where torchvision is absent; pan-and-scan off, as in Gemma3Processor),
so the pixel values are bit-identical to it for the same decoded picture:

1. RGB: a picture with transparency (an alpha band, or a palette or greyscale one with a
   transparent colour) is composited onto white, anything else converted (`"L"`, `"P"`,
   `"CMYK"`, ...). Before that, and unlike transformers, the EXIF orientation is applied
   (`ImageOps.exif_transpose`), so a phone photo is upright, and an animation gives its
   first frame.
2. Resize to `size` x `size` (aspect ratio not kept) with Pillow's bilinear filter.
3. Rescale: `uint8 -> float64 * (1/255) -> float32`.
4. Normalise per channel in float32: `(x - mean) / std`.

Bytes Pillow cannot decode raise ValueError; so does a picture of more than `max_pixels`
pixels (checked from the header, before decoding: a small file can declare a huge picture).
Decoding, RGB and normalisation are the plugin kit's (`hearth.plugins.images`).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from PIL import Image

from hearth.plugins import images

__all__ = ["preprocess"]


def preprocess(
    data: bytes,
    size: int,
    mean: Sequence[float],
    std: Sequence[float],
    max_pixels: int = images.MAX_PIXELS,
) -> np.ndarray:
    """Pixel values `[3, size, size]` float32 (channels first, numpy order) of the picture in
    `data` (see the module docstring). Raises ValueError for bytes that are not a picture."""
    rgb = images.decode_rgb(data, max_pixels)
    try:
        resized = rgb.resize((size, size), resample=Image.Resampling.BILINEAR)
    except (OSError, SyntaxError, EOFError) as e:
        raise ValueError(f"the image is damaged or truncated ({e})") from None
    return images.normalize(np.asarray(resized, dtype=np.uint8), mean, std)
