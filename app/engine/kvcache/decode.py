"""Single-token decoding's fast path for the causal cache (`Causal`, causal.py).

Steady generation prepares one row per pass: the next position of one sequence. The general
path recomputes the row's cell, its span of cells and its mask from every cell the sequence
holds (numpy over the whole sequence, each token). This path updates the last pass's result
instead, in a few steps whatever the sequence's length, and gives exactly what the general
path would (the same cell, released cells, span and mask values):

- the cell: the general path takes the region's first free cell, that is the lowest free
  cell below the sequence's used bound, else the bound itself. The state keeps the free cells
  below the bound in a heap.
- a sliding window (`Causal.window`): each row first lets go of the cells behind the window's
  memory (`swa_memory`) from its position. Each earlier row let go of those behind its own, so
  only the position `memory + 1` back can go: the state keeps each held position's cell (a
  ring of about `memory` entries) and drops that one, journaled for `reject` as the general
  path does. Once the window has slid, that freed cell is the lowest free one and is taken
  again: cells are reused ring-like. A sequence missing from a pass is slid too
  (`Causal._slide_absent`): with a state, only its position `memory` back can go, found in
  its ring; a sequence slid once stays so until its cells change (`Causal._settled`).
- the span runs from the padding boundary below the lowest held cell to the one above the
  highest: the state counts the held cells per padding block. While the span stays, the mask
  changes in place at three cells: the new one becomes visible, the one dropped and (with a
  window) the one at `position - window` no longer are. Where the span moves (a block at its
  edge empties or one past it fills, at most every padding's worth of tokens), the mask is
  computed again over the new span (`Causal._mask`, numpy over the span only).

It applies only where it provably gives the general path's result:

- no chunked attention (`Causal.chunk`: it stays on the general path), no bidirectional
  rows, a sequence that holds no cells of other regions (`copy_prefix`), and with a window,
  no other sequence holding cells of its region (their drops would free cells behind the
  state's back);
- the sequence's previous pass was a lone row at the position just before, and its cells have
  not changed since except by slides: no edit between passes (`remove`, `copy_prefix`,
  `restore`, `reject` bump `Causal._epoch`) and no pass of the general path that placed it
  (which drops its state; such a pass places cells only in the regions of the sequences it
  holds, so the others' states stay true);
- every cell it holds lies at or before the previous row's position (so that row's mask is
  the one to update), each position in one cell, and the region has a cell to take (else the
  general path raises `CacheFullError`).

Anything else takes the general path, which then records a fresh state when its pass fits.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass

import numpy as np

__all__ = ["Group", "DecodeState", "round_up"]


def round_up(n: int, m: int) -> int:
    return (n + m - 1) // m * m


@dataclass(frozen=True)
class Group:
    """One run of a sequence's rows in the batch and the cache cells it attends to."""

    start: int
    count: int
    first_cell: int
    n_kv: int
    mask: np.ndarray  # [rows padded, n_kv]


@dataclass
class DecodeState:
    """What one sequence's last lone-row pass prepared (see the module docstring).

    `group.mask` is this state's own array, changed in place as cells are taken (a pass is
    prepared only once the previous one's inputs were uploaded: ForwardEngine.plan) and
    replaced by the cache when the span moves."""

    epoch: int
    position: int  # the last row's position
    used: int  # the sequence's used bound (Causal._used)
    base: int  # the region's first cell
    region: int  # cells in the region
    padding: int
    group: Group
    free: list[int]  # a heap: the free cells of the region below base + used
    blocks: list[int]  # held cells per padding block of the region
    low: int  # the first and last block holding a cell
    high: int
    ring: dict[int, int] | None  # with a window: each held position's cell
    window: int
    memory: int  # the window's memory (Causal.swa_memory)

    @classmethod
    def record(
        cls,
        epoch: int,
        position: int,
        group: Group,
        base: int,
        region: int,
        used: int,
        padding: int,
        held: np.ndarray,
        positions: np.ndarray,
        free: list[int],
        window: int = 0,
        memory: int = 0,
    ) -> DecodeState | None:
        """The state after the general path prepared a lone row at `position`: `held` are
        the cells the sequence holds (ascending, all in its region, at `positions`), `free`
        the free cells of the region below its used bound (ascending). None where the path
        does not apply (module docstring)."""
        if not len(held) or int(positions.max()) > position:
            return None
        offsets = held - base
        blocks = np.bincount(offsets // padding, minlength=region // padding).tolist()
        low, high = int(offsets[0]) // padding, int(offsets[-1]) // padding
        if (group.first_cell, group.n_kv) != (base + low * padding, (high + 1 - low) * padding):
            return None  # (not the span this state would compute)
        ring = None
        if window:
            ring = dict(zip(positions.tolist(), held.tolist(), strict=True))
            if len(ring) != len(held):
                return None  # a position held twice
        g = Group(0, 1, group.first_cell, group.n_kv, np.array(group.mask, dtype=np.float32))
        state = cls(
            epoch, position, used, base, region, padding, g, free, blocks, low, high, ring,
            window, memory,
        )  # fmt: skip
        return state

    def room(self) -> bool:
        """Whether the next position has a cell to take."""
        if self.free or self.used < self.region:
            return True
        return self.ring is not None and self.position - self.memory in self.ring

    def span(self) -> tuple[int, int]:
        """The span's first cell and the cell past its last (`Causal._group`; a region
        ends on a padding boundary)."""
        pad = self.padding
        return self.base + self.low * pad, self.base + (self.high + 1) * pad

    def advance(
        self, cell_pos: np.ndarray, cell_seqs: np.ndarray, bit: np.uint64
    ) -> tuple[int, int, bool]:
        """Place position + 1 (the caller checked `room()`): drop the cell that leaves the
        window's memory, take the next cell and write both in the cache's bookkeeping
        (`cell_pos`, `cell_seqs`), update the mask in place. Returns the cell taken, the cell
        dropped (-1 = none) and whether the span moved (the caller then gives the state the
        mask of its new `span()`)."""
        p = self.position + 1
        base, pad, blocks = self.base, self.padding, self.blocks
        unseen = []  # cells that the previous row saw and this one does not
        dropped = -1
        ring = self.ring
        if ring is not None:
            leaving = p - 1 - self.memory
            gone = ring.pop(leaving, -1)
            if gone >= 0:
                if cell_pos[gone] == leaving and cell_seqs[gone] == bit:  # (else slid already)
                    cell_pos[gone] = -1
                    cell_seqs[gone] = 0
                    dropped = gone
                heapq.heappush(self.free, gone)
                blocks[(gone - base) // pad] -= 1
                unseen.append(gone)
            edge = ring.get(p - self.window)  # (a ring: there is a window)
            if edge is not None:
                unseen.append(edge)
        cell = heapq.heappop(self.free) if self.free else base + self.used
        self.used = max(self.used, cell - base + 1)
        cell_pos[cell] = p
        cell_seqs[cell] = bit
        if ring is not None:
            ring[p] = cell
        block = (cell - base) // pad
        blocks[block] += 1
        self.position = p
        low, high = min(self.low, block), max(self.high, block)
        while not blocks[low]:
            low += 1
        while not blocks[high]:
            high -= 1
        moved = (low, high) != (self.low, self.high)
        self.low, self.high = low, high
        if not moved:
            mask, first = self.group.mask, self.group.first_cell
            for c in unseen:
                mask[0, c - first] = -np.inf
            mask[0, cell - first] = 0.0
        return cell, dropped, moved

    def slid_cell(self) -> int:
        """With a window: the cell that a pass without this sequence lets go of (its
        position `memory` back: `Causal._slide_absent`), -1 = none."""
        assert self.ring is not None
        return self.ring.get(self.position - self.memory, -1)
