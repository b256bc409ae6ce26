"""Positions for models whose images take fewer positions than embeddings (M-RoPE: Qwen2-VL,
Qwen2.5-VL and kin).

The batching loop gives every input of a sequence the next position: an input's position is
its index in the slot. With M-RoPE an image of `rows` embeddings on an `nx` x `ny` grid takes
`n_pos` = max(nx, ny) positions in llama.cpp (`mtmd_input_chunk_get_n_pos`), its embeddings
getting (t, y, x) positions on the grid, so after an image llama.cpp's positions run behind the
loop's. `MRopePositions` keeps, per sequence, where each image ended (in the loop's positions)
and how far llama.cpp's positions trail from there, and translates the loop's positions into
llama.cpp's for decoding and for the cache edits (`remove`, `copy_prefix`, `can_resume`).
"""

from __future__ import annotations

from bisect import bisect_right

import numpy as np

__all__ = ["MRopePositions"]


class MRopePositions:
    """Per sequence: (loop position where an image ended, llama.cpp minus loop position from
    there on), in order. A sequence without images has no entry and no offset."""

    def __init__(self) -> None:
        self._ends: dict[int, list[int]] = {}
        self._offsets: dict[int, list[int]] = {}

    def real(self, seq: int, pos: int) -> int:
        """llama.cpp's position of the loop's `pos` in `seq`."""
        ends = self._ends.get(seq)
        if not ends:
            return pos
        k = bisect_right(ends, pos)
        return pos + (self._offsets[seq][k - 1] if k else 0)

    def real_rows(self, seqs: np.ndarray, positions: np.ndarray) -> np.ndarray:
        """`real()` of every row (int32)."""
        if not any(self._ends.get(int(s)) for s in np.unique(seqs)):
            return positions
        return np.array(
            [self.real(s, p) for s, p in zip(seqs.tolist(), positions.tolist(), strict=True)],
            dtype=np.int32,
        )

    def image_done(self, seq: int, end: int, rows: int, n_pos: int) -> None:
        """An image of `rows` embeddings ending at the loop's position `end` (exclusive) took
        `n_pos` of llama.cpp's positions."""
        start = end - rows
        offset = self.real(seq, start) - start + (n_pos - rows)
        self.truncate(seq, start)  # (the same image decoded again replaces its entry)
        self._ends.setdefault(seq, []).append(end)
        self._offsets.setdefault(seq, []).append(offset)

    def truncate(self, seq: int, begin: int) -> None:
        """The loop's positions from `begin` on were removed: forget images that ended after
        `begin` (an image ending at `begin` still shifts what comes next)."""
        ends = self._ends.get(seq)
        if not ends:
            return
        k = bisect_right(ends, begin)
        del ends[k:]
        del self._offsets[seq][k:]

    def copy(self, src: int, dst: int, length: int) -> None:
        """`dst` now holds `src`'s first `length` loop positions."""
        ends = self._ends.get(src, [])
        k = bisect_right(ends, length)
        self._ends[dst] = ends[:k]
        self._offsets[dst] = self._offsets.get(src, [])[:k]
