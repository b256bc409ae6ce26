"""A cache made of several caches, one chosen per layer (gemma3: sliding-window + global)."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from ..input import Batch
from ..ml.api import Backend, CacheConfig, Context
from ..ml.nn import KVView
from ..ml.tensor import DType, Tensor
from .base import MAX_POS, Cache, SequenceState

__all__ = ["Wrapper"]


class Wrapper(Cache):
    """`layer_cache(i)` gives the index into `caches` that layer i uses.

    start_forward runs every cache; if one fails (full), the ones before it undo the batch's
    positions. remove and copy_prefix fan out; can_resume is true only if all caches agree.
    snapshot holds every cache's arrays (named `<index>.<name>`), or is None if one cannot
    save; restore restores all or none.
    """

    def __init__(self, caches: Sequence[Cache], layer_cache: Callable[[int], int]) -> None:
        self.caches = list(caches)
        self.layer_cache = layer_cache
        self._current = self.caches[0]

    def set_config(self, config: CacheConfig) -> None:
        for c in self.caches:
            c.set_config(config)

    def init(
        self, backend: Backend, dtype: DType, max_sequences: int, capacity: int, max_batch: int
    ) -> None:
        for c in self.caches:
            c.init(backend, dtype, max_sequences, capacity, max_batch)

    def close(self) -> None:
        for c in self.caches:
            c.close()

    def prepare(self, batch: Batch, reserve: bool = False) -> None:
        for i, c in enumerate(self.caches):
            try:
                c.prepare(batch, reserve)
            except Exception:
                if not reserve:
                    for done in self.caches[:i]:
                        for seq, pos in zip(batch.sequences, batch.positions_host, strict=True):
                            done.remove(int(seq), int(pos), MAX_POS)
                raise

    def signature(self) -> tuple[int, ...]:
        return tuple(x for c in self.caches for x in c.signature())

    def bind(self, ctx: Context) -> None:
        for c in self.caches:
            c.bind(ctx)

    def set_layer(self, layer: int) -> None:
        self._current = self.caches[self.layer_cache(layer)]
        for c in self.caches:
            c.set_layer(layer)

    def put(self, ctx: Context, key: Tensor, value: Tensor) -> None:
        self._current.put(ctx, key, value)

    def get(self, ctx: Context) -> list[KVView]:
        return self._current.get(ctx)

    @property
    def permuted_v(self) -> bool:
        return self._current.permuted_v

    def remove(self, seq: int, begin: int, end: int = MAX_POS) -> None:
        for c in self.caches:
            c.remove(seq, begin, end)

    def reject(self, seq: int, begin: int) -> None:
        for c in self.caches:
            c.reject(seq, begin)

    def copy_prefix(self, src: int, dst: int, length: int) -> None:
        for c in self.caches:
            c.copy_prefix(src, dst, length)

    def can_resume(self, seq: int, pos: int) -> bool:
        return all(c.can_resume(seq, pos) for c in self.caches)

    def snapshot(self, seq: int, length: int) -> SequenceState | None:
        arrays: dict = {}
        resume_from = 0
        for i, c in enumerate(self.caches):
            state = c.snapshot(seq, length)
            if state is None:
                return None
            arrays.update({f"{i}.{name}": a for name, a in state.arrays.items()})
            resume_from = max(resume_from, state.resume_from)
        return SequenceState(arrays, resume_from)

    def restore(self, seq: int, state: SequenceState) -> bool:
        parts: list[dict] = [{} for _ in self.caches]
        for name, a in state.arrays.items():
            index, _, rest = name.partition(".")
            if not index.isdigit() or int(index) >= len(parts):
                return False
            parts[int(index)][rest] = a
        for i, c in enumerate(self.caches):
            if not c.restore(seq, SequenceState(parts[i], state.resume_from)):
                for done in self.caches[:i]:
                    done.remove(seq, 0)
                return False
        return True
