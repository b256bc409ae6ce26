"""Test pictures for image plugins, as file bytes of several formats and modes."""

from __future__ import annotations

import io
from typing import Any

import numpy as np

__all__ = ["sample_images"]


def sample_images(seed: int = 0) -> dict[str, bytes]:
    """Test pictures as file bytes: "normal" (160x120 PNG), "tall" (36x300 PNG), "tiny" (8x6
    PNG), "jpeg" (200x150), "rgba" (with transparency), "palette", "grey", "animated" (a
    two-frame GIF) and "exif" (a JPEG whose EXIF orientation says rotate)."""
    from PIL import Image

    rng = np.random.default_rng(seed)

    def picture(w: int, h: int) -> np.ndarray:
        y, x = np.mgrid[0:h, 0:w]
        base = np.stack([x * 255 / max(w - 1, 1), y * 255 / max(h - 1, 1), (x + y) % 256], -1)
        noisy = base + rng.normal(0, 20, (h, w, 3))
        return np.clip(noisy, 0, 255).astype(np.uint8)

    def save(img: Image.Image, fmt: str, **kw: Any) -> bytes:
        buf = io.BytesIO()
        img.save(buf, format=fmt, **kw)
        return buf.getvalue()

    rgba = np.dstack([picture(50, 40), rng.integers(0, 256, (40, 50), dtype=np.uint8)])
    frames = [Image.fromarray(picture(30, 20)), Image.fromarray(picture(30, 20)[::-1])]
    exif = Image.Exif()
    exif[0x0112] = 6  # orientation: rotate 90 degrees clockwise to display
    return {
        "normal": save(Image.fromarray(picture(160, 120)), "PNG"),
        "tall": save(Image.fromarray(picture(36, 300)), "PNG"),
        "tiny": save(Image.fromarray(picture(8, 6)), "PNG"),
        "jpeg": save(Image.fromarray(picture(200, 150)), "JPEG", quality=90),
        "rgba": save(Image.fromarray(rgba, "RGBA"), "PNG"),
        "palette": save(Image.fromarray(picture(40, 30)).convert("P"), "PNG"),
        "grey": save(Image.fromarray(picture(40, 30)).convert("L"), "PNG"),
        "animated": save(frames[0], "GIF", save_all=True, append_images=frames[1:]),
        "exif": save(Image.fromarray(picture(60, 20)), "JPEG", exif=exif),
    }
