"""Llama 3.2 Vision image preprocessing: file bytes to tiles of pixel values, with Pillow.

The steps are those of transformers' `MllamaImageProcessorPil` (what `AutoProcessor` gives
where torchvision is absent), so the pixels, the aspect ratio id and the tile count are the
same as its for the same decoded picture:

1. Decode and convert to RGB (`hearth.plugins.images`: EXIF orientation applied, first frame
   of an animation, transparency composited onto white).
2. The canvas: among the tile arrangements `(rows, columns)` with `rows * columns <=
   max_num_tiles` (`supported_aspect_ratios`), the one whose scale `min(canvas_h / h,
   canvas_w / w)` is the smallest that is >= 1 (no downscaling), else the largest below 1; of
   equal scales the smallest canvas area.
3. Resize with Pillow's bilinear filter, keeping the aspect ratio: the target is the picture's
   size clipped to [tile, canvas] per side, and the side with the smaller scale decides (the
   other `floor(side * scale)`, at least 1).
4. Pad with black at the bottom and right to the canvas, rescale by 1/255 and normalise with
   CLIP's mean and std (so the padding is `-mean/std`, not zero), and cut into tiles, row by
   row. Unused tiles up to `max_num_tiles` are zero.

`aspect_ratio_id` is the 1-based index of `(rows, columns)` in `supported_aspect_ratios`, as
transformers numbers it. (Ollama's Go processor numbers `(columns, rows)` in the same list: it
agrees for square arrangements only.)
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cache

import numpy as np
from PIL import Image

from hearth.plugins import images

__all__ = [
    "CLIP_MEAN",
    "CLIP_STD",
    "TiledImage",
    "canvas_size",
    "fit_to_canvas",
    "preprocess",
    "supported_aspect_ratios",
]

CLIP_MEAN = (0.48145466, 0.4578275, 0.40821073)  # Llama 3.2 Vision's processor (and Ollama's)
CLIP_STD = (0.26862954, 0.26130258, 0.27577711)


@dataclass(frozen=True)
class TiledImage:
    """One picture ready for the vision encoder."""

    pixels: np.ndarray  # float32 [max_num_tiles, 3, image_size, image_size]; unused tiles zero
    aspect_ratio_id: int  # 1-based index of (rows, columns) in supported_aspect_ratios
    num_tiles: int  # tiles used: rows * columns

    @property
    def max_num_tiles(self) -> int:
        return int(self.pixels.shape[0])


@cache
def supported_aspect_ratios(max_num_tiles: int) -> tuple[tuple[int, int], ...]:
    """The tile arrangements `(rows, columns)` with at most `max_num_tiles` tiles, in
    transformers' order (rows outer)."""
    return tuple(
        (a, b)
        for a in range(1, max_num_tiles + 1)
        for b in range(1, max_num_tiles + 1)
        if a * b <= max_num_tiles
    )


def canvas_size(height: int, width: int, max_num_tiles: int, tile: int) -> tuple[int, int]:
    """The canvas `(height, width)` in pixels for a picture of `height` x `width`."""
    canvases = [(a * tile, b * tile) for a, b in supported_aspect_ratios(max_num_tiles)]
    # As numpy computes it in transformers: float64 quotients, the smaller per canvas.
    scales = [min(ch / height, cw / width) for ch, cw in canvases]
    up = [s for s in scales if s >= 1]
    chosen = min(up) if up else max(scales)
    best = [c for c, s in zip(canvases, scales, strict=True) if s == chosen]
    return min(best, key=lambda c: c[0] * c[1])  # the first of the smallest areas


def fit_to_canvas(height: int, width: int, canvas: tuple[int, int], tile: int) -> tuple[int, int]:
    """The resized picture's `(height, width)` inside `canvas`, aspect ratio kept."""
    target_w = min(max(width, tile), canvas[1])
    target_h = min(max(height, tile), canvas[0])
    scale_h, scale_w = target_h / height, target_w / width
    if scale_w < scale_h:
        return min(math.floor(height * scale_w) or 1, target_h), target_w
    return target_h, min(math.floor(width * scale_h) or 1, target_w)


def preprocess(
    data: bytes,
    *,
    image_size: int,
    max_num_tiles: int,
    mean: tuple[float, float, float] = CLIP_MEAN,
    std: tuple[float, float, float] = CLIP_STD,
    max_pixels: int = images.MAX_PIXELS,
) -> TiledImage:
    """The tiles of the picture in `data` (see the module docstring). Raises ValueError for
    bytes that are not a picture, or settings that make no tiles."""
    if image_size <= 0 or max_num_tiles <= 0:
        raise ValueError("the image encoder's image size and tile count must be positive")
    rgb = images.decode_rgb(data, max_pixels)
    width, height = rgb.size
    canvas = canvas_size(height, width, max_num_tiles, image_size)
    new_h, new_w = fit_to_canvas(height, width, canvas, image_size)
    try:
        resized = rgb.resize((new_w, new_h), resample=Image.Resampling.BILINEAR)
    except (OSError, SyntaxError, EOFError) as e:
        raise ValueError(f"the image is damaged or truncated ({e})") from None
    padded = np.zeros((canvas[0], canvas[1], 3), dtype=np.uint8)
    padded[:new_h, :new_w] = np.asarray(resized, dtype=np.uint8)
    rows, cols = canvas[0] // image_size, canvas[1] // image_size
    chw = images.normalize(padded, mean, std)  # [3, rows*S, cols*S]
    tiles = chw.reshape(3, rows, image_size, cols, image_size).transpose(1, 3, 0, 2, 4)
    pixels = np.zeros((max_num_tiles, 3, image_size, image_size), dtype=np.float32)
    pixels[: rows * cols] = tiles.reshape(rows * cols, 3, image_size, image_size)
    ratio_id = supported_aspect_ratios(max_num_tiles).index((rows, cols)) + 1
    return TiledImage(pixels, ratio_id, rows * cols)
