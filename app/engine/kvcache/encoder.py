"""The encoder cache: cross-attention keys and values of the most recent image (mllama).

Cross-attention layers attend to an image's encoded states, not to earlier tokens, so there is
no causal structure and no mask: the cache stores the K/V computed from the last image seen,
as they are, and every later token reads them. Only one sequence is supported (the scheduler
runs such models with parallel = 1).

`put()` in a pass whose batch carries an image replaces the stored K/V; `encoder_cached` says
whether any are stored. Removing the position the image came from clears them.
"""

from __future__ import annotations

from ..input import Batch
from ..ml.api import Backend, CacheConfig, Context, DType, Tensor
from ..ml.nn import KVView
from .base import MAX_POS, Cache

__all__ = ["Encoder"]


class Encoder(Cache):
    """See the module docstring."""

    def __init__(self) -> None:
        self._backend: Backend | None = None
        self._keys: dict[int, Tensor] = {}
        self._values: dict[int, Tensor] = {}
        self._layer = 0
        self.encoder_cached = False
        self.encoder_position = -1
        self._pending_position = -1
        self._batch_size = 0

    def set_config(self, config: CacheConfig) -> None:
        """Ignored: encoder states are stored exactly as computed (no padding, no permute)."""

    def init(
        self, backend: Backend, dtype: DType, max_sequences: int, capacity: int, max_batch: int
    ) -> None:
        if max_sequences != 1:
            raise ValueError("the encoder (cross-attention) cache serves one sequence only")
        self._backend = backend
        self.dtype = dtype

    def close(self) -> None:
        self._keys.clear()
        self._values.clear()

    def prepare(self, batch: Batch, reserve: bool = False) -> None:
        self._batch_size = batch.size
        self._pending_position = -1
        if batch.multimodal and not reserve:
            index = batch.multimodal[-1][0]
            self._pending_position = int(batch.positions_host[index])

    def signature(self) -> tuple[int, ...]:
        return (self._batch_size, int(self._pending_position >= 0))

    def bind(self, ctx: Context) -> None:
        """Nothing per pass: there is no mask and no cell assignment."""

    def set_layer(self, layer: int) -> None:
        self._layer = layer

    def put(self, ctx: Context, key: Tensor, value: Tensor) -> None:
        """Store this layer's encoder K/V (shapes as given), replacing the previous image's."""
        stored = self._keys.get(self._layer)
        if stored is None or stored.shape != key.shape:
            assert self._backend is not None
            self._keys[self._layer] = self._backend.persistent(self.dtype, key.shape)
            self._values[self._layer] = self._backend.persistent(self.dtype, value.shape)
        ctx.forward(ctx.copy(key, self._keys[self._layer]))
        ctx.forward(ctx.copy(value, self._values[self._layer]))
        if self._pending_position >= 0:
            self.encoder_cached = True
            self.encoder_position = self._pending_position

    def get(self, ctx: Context) -> list[KVView]:
        return [
            KVView(
                0,
                self._batch_size,
                self._keys[self._layer],
                self._values[self._layer],
                None,
            )
        ]

    @property
    def permuted_v(self) -> bool:
        return False

    def remove(self, seq: int, begin: int, end: int = MAX_POS) -> None:
        if self.encoder_cached and begin <= self.encoder_position < end:
            self.encoder_cached = False
            self.encoder_position = -1

    def copy_prefix(self, src: int, dst: int, length: int) -> None:
        raise ValueError("the encoder cache serves one sequence only")

    def can_resume(self, seq: int, pos: int) -> bool:
        return True
