"""The encoder cache: cross-attention keys and values of each sequence's image (mllama).

Cross-attention layers attend to an image's encoded states, not to earlier tokens, so there is
no causal structure: each sequence keeps the K/V computed from the last image it was given,
as they are, and every later row of that sequence reads them. Several sequences batch
together, each with its own image (or none).

How a pass uses it:

* `prepare` reads the batch's whole multimodal items (`Multimodal.positions` > 0, at the row
  of the image's position): the last one of each sequence is that sequence's new image;
  `stored_items(batch)` lists those items of the batch `forward` builds with (whose
  `tensor` is the image's encoded states), in batch order.
* Per cross-attention layer the model computes the K/V of each stored item and calls `put`
  once per item, in that order; `get` returns one view per run of a sequence's rows: its
  image's K/V without a mask, or, for a sequence without an image, one zero key and value
  (the attention output is then zero).
* `mask(ctx)` gives an F32 `[1, n]` row mask: 1 where the row's sequence has an image and
  the row's position is at or after the image's, else 0 (a row before its sequence's image,
  or of a sequence without one, gets no cross-attention contribution: Meta's reference).
  `active` says whether any row of the pass is such a row (a model may otherwise skip its
  cross-attention layers).

Storage: per sequence and layer, K and V `[head_dim, kv_heads, rows]` tensors sized for the
largest image at the load-time reservation (every sequence gets them then, so a model that
does not fit fails at load); a larger image later grows them. `copy_prefix` copies the
image's K/V when the shared prefix holds the image's position; `remove` forgets the image
when its position goes. A host copy (`snapshot`) exists only for a prefix before the
sequence's image: it holds nothing (the image's K/V are not saved).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..input import Batch, Multimodal, sequence_runs
from ..ml.api import Backend, CacheConfig, Context
from ..ml.nn import KVView
from ..ml.tensor import DType, Tensor
from .base import MAX_POS, Cache, SequenceState

__all__ = ["Encoder"]


@dataclass(frozen=True)
class _Image:
    rows: int  # K/V rows stored
    position: int  # the input position the image came from


@dataclass(frozen=True)
class _Run:
    start: int
    count: int
    seq: int
    rows: int  # the sequence's image rows in this pass (0: none)


class Encoder(Cache):
    """See the module docstring."""

    def __init__(self) -> None:
        self._backend: Backend | None = None
        self._storage: dict[tuple[int, int], tuple[Tensor, Tensor]] = {}  # (seq, layer)
        self._images: dict[int, _Image] = {}  # seq -> its image
        # seq -> storage reallocations: in the signature, so no built graph reads old storage
        self._generation: dict[int, int] = {}
        self._layer = 0
        self._key = f"enc{id(self):x}."  # names this cache's graph inputs
        self._runs: list[_Run] = []
        self._incoming: list[int] = []  # sequences given an image in this pass, batch order
        self._stored: list[tuple[int, int]] = []  # their items' places in batch.multimodal
        self._puts: dict[int, int] = {}  # layer -> puts so far in this graph
        self._after = np.zeros(0, np.float32)
        self._reserve = False
        self.max_sequences = 1

    # -- configuration --------------------------------------------------------------------
    def set_config(self, config: CacheConfig) -> None:
        """Ignored: encoder states are stored exactly as computed (no padding, no permute)."""

    def init(
        self, backend: Backend, dtype: DType, max_sequences: int, capacity: int, max_batch: int
    ) -> None:
        self._backend = backend
        self.dtype = dtype
        self.max_sequences = max_sequences

    def close(self) -> None:
        self._storage.clear()
        self._images.clear()

    # -- per forward pass -----------------------------------------------------------------
    def prepare(self, batch: Batch, reserve: bool = False) -> None:
        n = batch.size
        seqs = batch.sequences
        positions = batch.positions_host
        self._reserve = reserve
        incoming: dict[int, tuple[tuple[int, int], _Image]] = {}  # seq -> (place, image)
        for j, (row, items) in enumerate(batch.multimodal):
            for k, item in enumerate(items):
                if item.positions:
                    seq = 0 if reserve else int(seqs[row])
                    incoming[seq] = ((j, k), _Image(item.rows, int(positions[row])))
        order = sorted(incoming.items(), key=lambda kv: kv[1][0])
        self._incoming = [seq for seq, _ in order]
        self._stored = [place for _, (place, _) in order]
        images = dict(self._images)
        images.update({seq: image for seq, (_, image) in incoming.items()})
        if not reserve:
            self._images = images
        self._runs = []
        self._after = np.zeros(n, np.float32)
        for start, count in batch.runs or sequence_runs(seqs):
            seq = 0 if reserve else int(seqs[start])
            image = images.get(seq)
            self._runs.append(_Run(start, count, seq, image.rows if image else 0))
            if image is not None:
                after = positions[start : start + count] >= image.position
                self._after[start : start + count] = after.astype(np.float32)

    @property
    def active(self) -> bool:
        """After prepare(): whether any row of the pass is at or after its sequence's image
        (a pass that brings an image always is: the image's own row)."""
        return bool(self._after.any())

    def stored_items(self, batch: Batch) -> list[Multimodal]:
        """After prepare(): the items of `batch` (the batch `forward` builds with) whose K/V
        `put` stores, in the order the model must put them; each one's `tensor` is the
        image's encoded states `[embd, rows]`."""
        return [batch.multimodal[j][1][k] for j, k in self._stored]

    def signature(self) -> tuple[int, ...]:
        runs = tuple(
            x
            for r in self._runs
            for x in (r.start, r.count, r.seq, r.rows, self._generation.get(r.seq, 0))
        )
        return (len(self._after), len(self._incoming), *self._incoming, *runs)

    def bind(self, ctx: Context) -> None:
        self._puts = {}
        n = len(self._after)
        ctx.input(DType.F32, (1, n), self._after.reshape(n, 1), key=self._key + "after")

    def mask(self, ctx: Context) -> Tensor:
        """The F32 `[1, n]` row mask of rows at or after their image (module docstring)."""
        return ctx.input(DType.F32, (1, len(self._after)), key=self._key + "after")

    def set_layer(self, layer: int) -> None:
        self._layer = layer

    def put(self, ctx: Context, key: Tensor, value: Tensor) -> None:
        """Store one image's K/V `[head_dim, kv_heads, rows]` for this layer: the next
        sequence of `stored_items`."""
        done = self._puts.get(self._layer, 0)
        if done >= len(self._incoming):
            raise ValueError("put(): more images than the pass brings (see stored_items)")
        self._puts[self._layer] = done + 1
        seqs = range(self.max_sequences) if self._reserve else [self._incoming[done]]
        for seq in seqs:
            k, v = self._tensors(seq, key, value)
            ctx.forward(ctx.copy(key, self._rows(ctx, k, key.dim(2))))
            ctx.forward(ctx.copy(value, self._rows(ctx, v, value.dim(2))))

    def _tensors(self, seq: int, key: Tensor, value: Tensor) -> tuple[Tensor, Tensor]:
        """The storage of `seq` at this layer, (re)allocated to hold `key`'s rows."""
        stored = self._storage.get((seq, self._layer))
        if stored is None or stored[0].dim(2) < key.dim(2) or stored[0].shape[:2] != key.shape[:2]:
            assert self._backend is not None
            name = f"cache_xk_s{seq}_l{self._layer}"
            k = self._backend.persistent(self.dtype, key.shape, name)
            v = self._backend.persistent(self.dtype, value.shape, name.replace("xk", "xv"))
            stored = self._storage[(seq, self._layer)] = (k, v)
            self._generation[seq] = self._generation.get(seq, 0) + 1
        return stored

    @staticmethod
    def _rows(ctx: Context, t: Tensor, rows: int) -> Tensor:
        """The first `rows` rows (dimension 2) of a stored `[head_dim, kv_heads, cap]`."""
        return ctx.view(t, (t.dim(0), t.dim(1), rows), t.strides[1:3])

    def get(self, ctx: Context) -> list[KVView]:
        views = []
        for run in self._runs:
            if run.rows:
                k, v = self._storage[(run.seq, self._layer)]
                k, v = self._rows(ctx, k, run.rows), self._rows(ctx, v, run.rows)
            else:
                k = v = self._zeros(ctx)
            views.append(KVView(run.start, run.count, k, v, None))
        return views

    def _zeros(self, ctx: Context) -> Tensor:
        """One zero key (and value) `[head_dim, kv_heads, 1]` shaped as this layer's."""
        k = next(t for (_, layer), (t, _) in self._storage.items() if layer == self._layer)
        d, h = k.dim(0), k.dim(1)
        key = self._key + f"zeros{d}.{h}"
        values = None if ctx.has_input(key) else np.zeros((1, h, d), np.float32)
        return ctx.input(DType.F32, (d, h, 1), values, key=key)

    @property
    def permuted_v(self) -> bool:
        return False

    # -- sequence edits -------------------------------------------------------------------
    def remove(self, seq: int, begin: int, end: int = MAX_POS) -> None:
        image = self._images.get(seq)
        if image is None:
            return
        if begin <= image.position < end:
            del self._images[seq]
        elif image.position >= end and end != MAX_POS:
            self._images[seq] = _Image(image.rows, image.position - (end - begin))

    def copy_prefix(self, src: int, dst: int, length: int) -> None:
        image = self._images.get(src)
        self._images.pop(dst, None)
        if image is None or image.position >= length or src == dst:
            return
        assert self._backend is not None
        ctx = self._backend.new_context()
        try:
            outs = []
            for (seq, layer), (k, v) in list(self._storage.items()):
                if seq != src:
                    continue
                self._layer = layer
                dk, dv = self._tensors(dst, k, v)
                for a, b in ((k, dk), (v, dv)):
                    outs.append(
                        ctx.copy(self._rows(ctx, a, image.rows), self._rows(ctx, b, image.rows))
                    )
            if outs:
                ctx.forward(*outs)
                ctx.compute(*outs)
        finally:
            ctx.close()
        self._images[dst] = image

    def can_resume(self, seq: int, pos: int) -> bool:
        return True

    def image_position(self, seq: int) -> int:
        """The position `seq`'s image came from, or -1 (for tests and diagnostics)."""
        image = self._images.get(seq)
        return image.position if image is not None else -1

    # -- host copies ----------------------------------------------------------------------
    def snapshot(self, seq: int, length: int) -> SequenceState | None:
        image = self._images.get(seq)
        if image is not None and image.position < length:
            return None  # an image's K/V are not saved (module docstring)
        return SequenceState({}, 0)

    def restore(self, seq: int, state: SequenceState) -> bool:
        if state.arrays:
            return False
        self._images.pop(seq, None)
        return True
