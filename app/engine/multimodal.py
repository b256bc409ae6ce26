"""Encoding one image with a loaded model, outside a forward pass (tests, tools, the runner).

`encode_image(loaded, data)` does what the runner does for an image, all at once: builds the
plugin's encoder graph in a context of its own (`encode_multimodal`), computes it, and
returns the embeddings as host arrays. The plugin only builds; computing is the caller's.
"""

from __future__ import annotations

import numpy as np

from .input import Multimodal
from .model import LoadedModel

__all__ = ["encode_image", "encode_items"]


def encode_items(loaded: LoadedModel, data: bytes) -> list[tuple[Multimodal, np.ndarray]]:
    """Each item `encode_multimodal` makes of the image in `data`, with its computed
    embeddings `[rows, embd]` float32 (numpy order of the item's `[embd, rows]` tensor). The
    items' tensors are gone afterwards (their context is closed); `rows` is set.

    Raises MultimodalNotSupportedError for a model (or file) without an image encoder, and
    ValueError for bytes that are not an image."""
    ctx = loaded.backend.new_context()
    try:
        items = loaded.model.encode_multimodal(ctx, data)
        tensors = [item.tensor for item in items]
        if any(t is None for t in tensors):
            raise ValueError("encode_multimodal returned an item without a tensor")
        ctx.compute(*[t for t in tensors if t is not None])
        out: list[tuple[Multimodal, np.ndarray]] = []
        for item, t in zip(items, tensors, strict=True):
            assert t is not None
            rows = t.dim(1)
            values = np.ascontiguousarray(t.numpy().reshape(rows, t.dim(0)), dtype=np.float32)
            item.rows, item.tensor = rows, None
            out.append((item, values))
        return out
    finally:
        ctx.close()


def encode_image(loaded: LoadedModel, data: bytes) -> np.ndarray:
    """The embeddings of the image in `data`: `[rows, embd]` float32, the rows of all items
    in order (Gemma 3: `[256, text_embd]`). Raises as `encode_items`."""
    parts = [values for _, values in encode_items(loaded, data)]
    return np.concatenate(parts) if len(parts) != 1 else parts[0]
