"""`SequenceCache`: the slot-cache operations of `hearth.engine.prompt_cache.InputCache` on
llama.cpp's per-sequence memory (`llama_memory_seq_*`).

Dropping a sequence's tail, a context shift (positions removed, the rest moved down; refused
with `ShiftNotSupportedError` where llama.cpp cannot shift, or under M-RoPE images), sharing
a prefix between sequences (`copy_prefix`), and whether a sliding window still holds what
resuming at a position needs (`can_resume`). Under M-RoPE images (`positions` set by the
engine) the loop's positions are mapped onto llama.cpp's.
"""

from __future__ import annotations

from typing import Any

from ..engine.kvcache import ShiftNotSupportedError
from .positions import MRopePositions

__all__ = ["SequenceCache"]

_MAX_POS = 2**31 - 1  # hearth.engine.kvcache's MAX_POS: "to the end"


class SequenceCache:
    """The slot-cache operations `hearth.engine.prompt_cache.InputCache` needs, on llama.cpp's
    per-sequence memory (`llama_memory_seq_*`)."""

    def __init__(self, lib: Any, ctx: int, model: int) -> None:
        self._lib = lib
        self._mem = lib.llama_get_memory(ctx)  # None for models without a cache
        self._swa = int(lib.llama_model_n_swa(model))
        # M-RoPE images: the loop's positions -> llama.cpp's (set by the engine)
        self.positions: MRopePositions | None = None

    def _real(self, seq: int, pos: int) -> int:
        return pos if self.positions is None else self.positions.real(seq, pos)

    def remove(self, seq: int, begin: int, end: int = _MAX_POS) -> None:
        """Drop positions [begin, end); later positions move down (a context shift)."""
        lib, mem = self._lib, self._mem
        if not mem:
            return
        if end == _MAX_POS:
            lib.llama_memory_seq_rm(mem, seq, self._real(seq, begin), -1)
            if self.positions is not None:
                self.positions.truncate(seq, begin)
            return
        if self.positions is not None or not lib.llama_memory_can_shift(mem):
            raise ShiftNotSupportedError()
        lib.llama_memory_seq_rm(mem, seq, begin, end)
        lib.llama_memory_seq_add(mem, seq, end, -1, begin - end)

    def copy_prefix(self, src: int, dst: int, length: int) -> None:
        """`dst` holds `src`'s first `length` positions (and nothing else). Across streams
        llama.cpp copies a sequence only whole (a partial range aborts the process)."""
        lib, mem = self._lib, self._mem
        if not mem:
            return
        lib.llama_memory_seq_rm(mem, dst, -1, -1)
        lib.llama_memory_seq_cp(mem, src, dst, -1, -1)
        lib.llama_memory_seq_rm(mem, dst, self._real(src, length), -1)
        if self.positions is not None:
            self.positions.copy(src, dst, length)

    def can_resume(self, seq: int, pos: int) -> bool:
        """False when a sliding window already dropped positions the rest still needs."""
        if not self._mem or not self._swa:
            return True
        first = int(self._lib.llama_memory_seq_pos_min(self._mem, seq))
        if first < 0:
            return pos == 0
        return first <= max(0, self._real(seq, pos) - self._swa)
