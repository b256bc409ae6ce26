"""Checking images sent with a request before any model sees them.

Images arrive as base64 (native API) or `data:` URLs (OpenAI API). Each is decoded once,
limited in bytes, and opened with Pillow only far enough to read its size, so a small file that
claims to be huge (a decompression bomb) is refused before anything decodes its pixels.
"""

from __future__ import annotations

import base64
import binascii
import io
import re
import warnings

from PIL import Image, UnidentifiedImageError

from ..errors import InputTooLarge, RequestError

__all__ = ["check_image", "data_url_payload"]

_DATA_URL = re.compile(r"data:(image/[\w.+-]+)?(;[\w=-]+)*;base64,", re.IGNORECASE)
_FORMATS = {"PNG", "JPEG", "WEBP", "GIF", "BMP", "TIFF", "MPO"}


def data_url_payload(url: str) -> str:
    """The base64 text of a `data:` URL; a 400 for remote URLs, which are not fetched."""
    m = _DATA_URL.match(url)
    if m is None:
        if url.startswith(("http://", "https://")):
            raise RequestError("image URLs are not fetched; send the image as a base64 data: URL")
        raise RequestError("an image must be a base64 data: URL (data:image/png;base64,...)")
    return url[m.end() :]


def check_image(b64: str, max_bytes: int, max_pixels: int, index: int = 0) -> str:
    """Validate one base64 image; returns the base64 text without any `data:` prefix."""
    if b64.startswith("data:"):
        b64 = data_url_payload(b64)
    if len(b64) > max_bytes * 4 // 3 + 8:
        raise InputTooLarge(f"image {index} is larger than the {max_bytes} byte limit")
    try:
        raw = base64.b64decode(b64.strip(), validate=True)
    except (binascii.Error, ValueError):
        raise RequestError(f"image {index} is not valid base64") from None
    if len(raw) > max_bytes:
        raise InputTooLarge(f"image {index} is larger than the {max_bytes} byte limit")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", Image.DecompressionBombWarning)
            with Image.open(io.BytesIO(raw)) as im:  # reads the header only
                width, height, fmt = im.width, im.height, im.format
    except Image.DecompressionBombError:
        raise InputTooLarge(f"image {index} has more pixels than the limit") from None
    except (UnidentifiedImageError, OSError, ValueError):
        raise RequestError(f"image {index} is not an image Hearth can read") from None
    if fmt not in _FORMATS:
        raise RequestError(f"image {index} is a {fmt} image; use PNG, JPEG, WebP, GIF or BMP")
    if width * height > max_pixels:
        raise InputTooLarge(
            f"image {index} is {width}x{height} pixels, more than the {max_pixels} pixel limit",
        )
    return b64.strip()
