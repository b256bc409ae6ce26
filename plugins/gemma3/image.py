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
"""

from __future__ import annotations

import io
import warnings
from collections.abc import Sequence

import numpy as np
from PIL import Image, ImageOps, UnidentifiedImageError

__all__ = ["MAX_PIXELS", "decode", "preprocess", "to_rgb"]

MAX_PIXELS = 64 * 2**20  # 8192 x 8192: larger pictures are refused before decoding
_RESCALE = 1 / 255  # transformers' default rescale_factor


def decode(data: bytes, max_pixels: int = MAX_PIXELS) -> Image.Image:
    """The first frame of the picture in `data`, upright (EXIF orientation applied), loaded.
    Raises ValueError with a sentence for bytes that are not a picture Pillow reads, or a
    picture over `max_pixels` pixels."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", Image.DecompressionBombWarning)
            img = Image.open(io.BytesIO(data))
            width, height = img.size
            if width * height > max_pixels:
                raise ValueError(
                    f"the image is {width}x{height} pixels; at most {max_pixels:,} pixels "
                    "are accepted"
                )
            img.seek(0)  # an animation: its first frame
            img.load()
            upright = ImageOps.exif_transpose(img)
    except ValueError:
        raise
    except (UnidentifiedImageError, Image.DecompressionBombError) as e:
        raise ValueError(f"the data is not an image this program can read ({e})") from None
    except (OSError, SyntaxError, EOFError, TypeError) as e:
        raise ValueError(f"the image is damaged or truncated ({e})") from None
    return upright if upright is not None else img


def to_rgb(img: Image.Image) -> Image.Image:
    """RGB as transformers' `convert_to_rgb` makes it: transparency composited onto white."""
    if "A" in img.getbands() or img.info.get("transparency") is not None:
        rgba = img.convert("RGBA")
        white = Image.new("RGBA", rgba.size, (255, 255, 255, 255))
        return Image.alpha_composite(white, rgba).convert("RGB")
    return img.convert("RGB")


def preprocess(
    data: bytes,
    size: int,
    mean: Sequence[float],
    std: Sequence[float],
    max_pixels: int = MAX_PIXELS,
) -> np.ndarray:
    """Pixel values `[3, size, size]` float32 (channels first, numpy order) of the picture in
    `data` (see the module docstring). Raises ValueError for bytes that are not a picture."""
    try:
        rgb = to_rgb(decode(data, max_pixels))
        resized = rgb.resize((size, size), resample=Image.Resampling.BILINEAR)
    except ValueError:
        raise
    except (OSError, SyntaxError, EOFError) as e:
        raise ValueError(f"the image is damaged or truncated ({e})") from None
    pixels = np.asarray(resized, dtype=np.uint8).transpose(2, 0, 1)  # [3, size, size]
    scaled = (pixels.astype(np.float64) * _RESCALE).astype(np.float32)
    m = np.asarray(mean, dtype=np.float32).reshape(3, 1, 1)
    s = np.asarray(std, dtype=np.float32).reshape(3, 1, 1)
    return np.ascontiguousarray((scaled - m) / s, dtype=np.float32)
