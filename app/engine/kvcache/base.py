"""The KV cache contract (Ollama's `kvcache.Cache`), shared by the runner and model plugins.

Lifecycle, all on the runner thread that builds graphs:

1. The plugin's `make_cache()` returns an uninitialised cache; the backend may call
   `set_config()` once, then the runner calls `init()`, which sizes the cache (K/V tensors are
   allocated on first `put()` per layer, which happens during the worst-case reservation at
   load time, so a model that does not fit fails at load).
2. For each forward pass the core calls `start_forward(ctx, batch)` before the plugin's
   `forward`. That assigns cache cells to the batch's inputs and builds the attention masks
   (inputs of the pass's graph). Cells are assigned at graph-build time; passes compute in the
   order they were built, so this is safe with pipelining.
3. Inside `forward`, per layer: `set_layer(i)`, then attention calls `put(ctx, k, v)` and
   `get(ctx)`.
4. Between passes the runner edits sequences: `remove`, `copy_prefix`, `can_resume`, and
   copies one to host memory and back (`snapshot`, `restore`: the prompt cache on disk).

Errors: `CacheFullError` when no free cells remain for a batch (the runner ends that one
sequence; nothing else is affected) and `ShiftNotSupportedError` when positions would need
re-RoPE but the model has no shift function.
"""

from __future__ import annotations

import abc
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from ..input import Batch
from ..ml.api import Backend, CacheConfig, Context
from ..ml.nn import KVView
from ..ml.tensor import DType, Tensor

__all__ = [
    "Cache",
    "CacheFullError",
    "ShiftNotSupportedError",
    "ShiftFn",
    "MAX_POS",
    "SequenceState",
]

MAX_POS = 2**31 - 1  # `end` meaning "to the end of the sequence"

ShiftFn = Callable[[Context, int, Tensor, Tensor], Tensor]
"""shift(ctx, layer, key, delta): re-RoPE `key` ([head_dim, kv_heads, cells]) by the I32 per-cell
position deltas `delta` ([cells]); returns the shifted keys (same shape)."""


class CacheFullError(RuntimeError):
    def __init__(
        self, message: str = "could not find a kv cache slot: the context is full"
    ) -> None:
        super().__init__(message)


class ShiftNotSupportedError(RuntimeError):
    def __init__(
        self, message: str = "this model cannot shift its cache (no shift function)"
    ) -> None:
        super().__init__(message)


@dataclass(frozen=True)
class SequenceState:
    """One sequence's cached state copied to host memory (`Cache.snapshot`): named arrays
    whose meaning only the cache that made them knows, and the first prompt position a
    restored copy can continue from (`can_resume`: past a sliding window's start, 0 for
    full attention)."""

    arrays: dict[str, np.ndarray]
    resume_from: int

    @property
    def nbytes(self) -> int:
        return sum(a.nbytes for a in self.arrays.values())


class Cache(abc.ABC):
    """See the module docstring for when each method is called."""

    # -- configuration --------------------------------------------------------------------
    @abc.abstractmethod
    def set_config(self, config: CacheConfig) -> None:
        """Override the backend's layout wishes; only before init(), at most once."""

    @abc.abstractmethod
    def init(
        self,
        backend: Backend,
        dtype: DType,
        max_sequences: int,
        capacity: int,
        max_batch: int,
    ) -> None:
        """Size the cache: `capacity` positions per sequence, `max_batch` inputs per pass."""

    @abc.abstractmethod
    def close(self) -> None: ...

    # -- per forward pass -----------------------------------------------------------------
    def start_forward(self, ctx: Context, batch: Batch, reserve: bool = False) -> None:
        """Assign cells to the batch and build its masks: `prepare` then `bind`."""
        self.prepare(batch, reserve)
        self.bind(ctx)

    @abc.abstractmethod
    def prepare(self, batch: Batch, reserve: bool = False) -> None:
        """Assign cells to the batch's inputs and compute its masks on the host (raises
        CacheFullError). `reserve` prepares the worst case (the mask spans the whole cache)
        without changing any bookkeeping. Uses only the batch's host arrays."""

    @abc.abstractmethod
    def signature(self) -> tuple[int, ...]:
        """After prepare(): the sizes that shape this cache's part of the graph. Two passes with
        equal signatures (and equal batch shapes) can run the same built graph."""

    @abc.abstractmethod
    def bind(self, ctx: Context) -> None:
        """Create the prepared inputs (cell indices, masks) in `ctx`, or refresh their values
        when `ctx` is a graph built earlier with the same signature (inputs are keyed)."""

    @abc.abstractmethod
    def set_layer(self, layer: int) -> None: ...

    @abc.abstractmethod
    def put(self, ctx: Context, key: Tensor, value: Tensor) -> None:
        """Store the batch's `[head_dim, kv_heads, batch]` keys and values for this layer."""

    @abc.abstractmethod
    def get(self, ctx: Context) -> list[KVView]:
        """For this layer, one view per run of a sequence's rows in the batch: its keys
        `[head_dim, kv_heads, n_kv]`, values (same, or `[n_kv, head_dim, kv_heads]` when
        `permuted_v`) and mask `[n_kv, rows_padded]`."""

    @property
    @abc.abstractmethod
    def permuted_v(self) -> bool: ...

    # -- sequence edits -------------------------------------------------------------------
    @abc.abstractmethod
    def remove(self, seq: int, begin: int, end: int = MAX_POS) -> None:
        """Drop positions [begin, end) of `seq`; later positions move down by end-begin and
        their keys are re-RoPEd (ShiftNotSupportedError without a shift function). On error
        the caller should remove the whole sequence."""

    def reject(self, seq: int, begin: int) -> None:
        """Undo the rows of `seq` at positions >= `begin` that the last pass evaluated
        (drafted tokens a speculative check rejected), right after that pass: as
        `remove(seq, begin)`, and a cache that let go of older cells while placing those rows
        (a sliding window) takes them back, so that later tokens take the cells they would
        have taken had the rows never been evaluated."""
        self.remove(seq, begin)

    @abc.abstractmethod
    def copy_prefix(self, src: int, dst: int, length: int) -> None:
        """Make `dst` share `src`'s first `length` positions (no data is copied)."""

    @abc.abstractmethod
    def can_resume(self, seq: int, pos: int) -> bool:
        """Whether `seq` can continue from `pos` with what the cache still holds."""

    # -- host copies (the prompt cache on disk) --------------------------------------------
    def snapshot(self, seq: int, length: int) -> SequenceState | None:
        """A host copy of what `seq` holds for positions [0, length), or None when this
        cache cannot save it (the default; see each cache). Between passes, on the runner
        thread: it reads only `seq`'s cells, so a pass computing other sequences may run."""
        return None

    def restore(self, seq: int, state: SequenceState) -> bool:
        """Put a `snapshot` back as `seq`'s content; `seq` must hold nothing. False (and
        nothing changed) when the state does not fit this cache (other layers, sizes or
        cells taken). Writes only `seq`'s cells."""
        return False
