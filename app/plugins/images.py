"""Picture decoding and pixel normalisation shared by the image plugins (Pillow and numpy).

* `decode(data)`: the first frame of the picture in the bytes, upright (EXIF orientation
  applied, which transformers' processors do not do), loaded. A picture of more than
  `max_pixels` pixels is refused from its header, before decoding (a small file can declare a
  huge picture). Bytes Pillow cannot read raise ValueError with a sentence.
* `to_rgb(img)`: RGB as transformers' `convert_to_rgb` makes it: a picture with transparency
  (an alpha band, or a palette or greyscale one with a transparent colour) composited onto
  white, anything else converted (`"L"`, `"P"`, `"CMYK"`, ...).
* `normalize(pixels, mean, std)`: uint8 `[H, W, 3]` -> float32 `[3, H, W]` as transformers'
  numpy image processors compute it: `float64 * (1/255) -> float32`, then `(x - mean) / std`
  per channel in float32.
"""

from __future__ import annotations

import io
import warnings
from collections.abc import Sequence

import numpy as np
from PIL import Image, ImageOps, UnidentifiedImageError

__all__ = ["MAX_PIXELS", "decode", "decode_rgb", "normalize", "to_rgb"]

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


def decode_rgb(data: bytes, max_pixels: int = MAX_PIXELS) -> Image.Image:
    """`to_rgb(decode(data))`; a picture that fails while converting raises ValueError too."""
    img = decode(data, max_pixels)
    try:
        return to_rgb(img)
    except (OSError, SyntaxError, EOFError) as e:
        raise ValueError(f"the image is damaged or truncated ({e})") from None


def normalize(pixels: np.ndarray, mean: Sequence[float], std: Sequence[float]) -> np.ndarray:
    """uint8 `[H, W, 3]` -> float32 `[3, H, W]`, rescaled by 1/255 and normalised per channel
    (see the module docstring)."""
    chw = np.asarray(pixels, dtype=np.uint8).transpose(2, 0, 1)
    scaled = (chw.astype(np.float64) * _RESCALE).astype(np.float32)
    m = np.asarray(mean, dtype=np.float32).reshape(3, 1, 1)
    s = np.asarray(std, dtype=np.float32).reshape(3, 1, 1)
    return np.ascontiguousarray((scaled - m) / s, dtype=np.float32)
