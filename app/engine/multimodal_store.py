"""The multimodal store: encoded images (and other non-text items) in host memory, by hash.

How an image travels (the runner drives it):

1. A request's image bytes are hashed. If the store knows the hash, its items are recalled and
   nothing is encoded; otherwise the plugin's `encode_multimodal` builds the encoder graph in a
   context of its own, and the store keeps that context, not yet computed.
2. The items are laid out as input positions (`hearth.engine.input.image_positions`, from
   what each item declares, after the plugin's `post_tokenize`). Each image gets a
   stable image id, and each of its positions a *placeholder*: a negative number standing in
   for a token id (`placeholder(image, row)`). A prompt is then a plain list of ints, so the
   prompt cache compares images as it compares tokens: the same image gives the same
   placeholders (a follow-up turn reuses the cache), a different image never matches.
3. When a batch first needs an image's rows, the batching thread computes its graph (the only
   thread that computes), copies the embeddings to host memory and frees the context. The text
   graph gets them as an input (`Batch.multimodal_embd`); vision and text graphs stay apart.

Computed embeddings are kept for later turns within a byte budget, least recently used first
out; an image whose embeddings were dropped is encoded again only if a batch needs its rows
(a prompt-cache hit needs none).
"""

from __future__ import annotations

import hashlib
import re
import threading
from collections import OrderedDict
from dataclasses import dataclass, field, replace

import numpy as np

from .input import Multimodal
from .ml.api import Context

__all__ = [
    "IMAGE_MARKER",
    "MultimodalStore",
    "placeholder",
    "is_placeholder",
    "split_placeholder",
    "image_hash",
]

IMAGE_MARKER = re.compile(r"\[img-(\d+)\]")  # image N of a request, in its prompt text

_ROW_BITS = 20  # rows per image: up to a million positions
DEFAULT_BUDGET = 512 * 2**20  # bytes of computed embeddings kept for later turns


def image_hash(data: bytes) -> int:
    """A 63-bit content hash (`Input.multimodal_hash`; 0 means "no item")."""
    return int.from_bytes(hashlib.sha256(data).digest()[:8], "little") >> 1 or 1


def placeholder(image: int, row: int) -> int:
    """The negative stand-in token of `row` of image `image` (both >= 0)."""
    return -((image << _ROW_BITS) | row) - 1


def is_placeholder(token: int) -> bool:
    return token < 0


def split_placeholder(token: int) -> tuple[int, int]:
    """(image id, row) of a placeholder."""
    v = -token - 1
    return v >> _ROW_BITS, v & ((1 << _ROW_BITS) - 1)


@dataclass
class _Entry:
    image: int
    items: list[Multimodal]  # rows set; tensors only until computed
    ctx: Context | None = None  # the encoder graph, until computed
    embeddings: np.ndarray | None = None  # [rows, embd] float32, all items in order
    lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def rows(self) -> int:
        return sum(item.rows for item in self.items)

    @property
    def whole(self) -> bool:
        """Whether the items come to `forward` whole (`Multimodal.positions` > 0)."""
        return any(item.positions for item in self.items)


class MultimodalStore:
    """See the module docstring. Thread-safe: requests register, the batching thread reads."""

    def __init__(self, budget: int = DEFAULT_BUDGET) -> None:
        self.budget = budget
        self._ids: dict[int, int] = {}  # hash -> image id (stable for the runner's life)
        self._entries: OrderedDict[int, _Entry] = OrderedDict()  # image id -> entry (LRU)
        self._lock = threading.Lock()
        self.encoded = 0  # encoder graphs computed (for tests and stats)

    def image_id(self, digest: int) -> int:
        with self._lock:
            return self._ids.setdefault(digest, len(self._ids))

    def recall(self, digest: int) -> list[Multimodal] | None:
        """The items of a known image (tensors None), or None when it must be encoded."""
        with self._lock:
            image = self._ids.get(digest)
            entry = self._entries.get(image) if image is not None else None
            if entry is None:
                return None
            self._entries.move_to_end(image)  # type: ignore[arg-type]
            return [replace(item, tensor=None) for item in entry.items]

    def add(self, digest: int, ctx: Context, items: list[Multimodal]) -> list[Multimodal]:
        """Keep a freshly built (uncomputed) encoder graph; sets each item's `rows`."""
        for item in items:
            if item.tensor is None:
                raise ValueError("encode_multimodal returned an item without a tensor")
            item.rows = item.tensor.shape[1] if len(item.tensor.shape) > 1 else 1
        image = self.image_id(digest)
        with self._lock:
            old = self._entries.pop(image, None)
            self._entries[image] = _Entry(image, items, ctx)
        if old is not None and old.ctx is not None:
            old.ctx.close()
        return items

    def info(self, image: int) -> _Entry | None:
        with self._lock:
            return self._entries.get(image)

    def embeddings(self, image: int) -> np.ndarray:
        """`[rows, embd]` embeddings of an image, computing its graph on first use (call
        from the computing thread only). KeyError when the image is no longer stored."""
        with self._lock:
            entry = self._entries[image]
            self._entries.move_to_end(image)
        with entry.lock:
            if entry.embeddings is None:
                ctx = entry.ctx
                if ctx is None:
                    raise KeyError(image)
                tensors = [item.tensor for item in entry.items if item.tensor is not None]
                ctx.compute(*tensors)
                parts = [
                    _rows_first(t.numpy(), item.rows)
                    for t, item in zip(tensors, entry.items, strict=True)
                ]
                entry.embeddings = np.ascontiguousarray(np.concatenate(parts), dtype=np.float32)
                for item in entry.items:
                    item.tensor = None
                entry.ctx = None
                ctx.close()
                self.encoded += 1
                self._evict(keep=image)
            return entry.embeddings

    def _evict(self, keep: int) -> None:
        with self._lock:
            total = sum(
                e.embeddings.nbytes for e in self._entries.values() if e.embeddings is not None
            )
            for image in list(self._entries):
                if total <= self.budget:
                    break
                entry = self._entries[image]
                if image == keep or entry.embeddings is None:
                    continue
                total -= entry.embeddings.nbytes
                del self._entries[image]

    def close(self) -> None:
        with self._lock:
            entries = list(self._entries.values())
            self._entries.clear()
        for entry in entries:
            if entry.ctx is not None:
                entry.ctx.close()


def _rows_first(values: np.ndarray, rows: int) -> np.ndarray:
    """A computed `[embd, rows]` tensor (numpy order `[rows, embd]`) as 2-D rows."""
    return values.reshape(rows, -1)
