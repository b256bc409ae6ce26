"""Single-token decoding's fast path for the causal cache (`Causal`, causal.py).

Steady generation prepares one row per pass: the next position of one sequence. The general
path recomputes the row's cell, its span of cells and its mask from every cell the sequence
holds (numpy over the whole sequence, each token). This path updates the last pass's result
instead: the new position takes the cell right after the sequence's last one, the span grows
to the padding boundary above it, and the mask gains that one visible cell. It gives exactly
what the general path would (the same cell, span and mask values), and applies only where it
provably does:

- full attention (no sliding window, no chunks), no bidirectional rows, a sequence that holds
  no cells of other regions (`copy_prefix`);
- the sequence's previous pass was a lone row at the position just before, and its cells have
  not changed since: no edit between passes (`remove`, `copy_prefix`, `restore`, `reject`
  bump `Causal._epoch`) and no pass of the general path that placed it (which drops its
  state; such a pass places cells only in the regions of the sequences it holds, so the
  others' states stay true);
- its region has no free cell below its used bound (the general path takes the first free
  cell: here that is the bound itself), and every cell it holds lies at or before the
  previous row's position (so that row saw every cell it holds, and the new one sees those
  and its own).

Anything else takes the general path, which then records a fresh state when its pass fits.
"""

from __future__ import annotations

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
    replaced by a wider one when the span grows."""

    epoch: int
    position: int  # the last row's position
    used: int  # the sequence's used bound then (= its cell count: no free cell below it)
    base: int  # the region's first cell
    group: Group

    @classmethod
    def record(cls, epoch: int, position: int, used: int, base: int, group: Group) -> DecodeState:
        mask = np.array(group.mask, dtype=np.float32)  # (a copy)
        return cls(epoch, position, used, base, Group(0, 1, group.first_cell, group.n_kv, mask))

    def advance(self, cells: int, padding: int) -> int:
        """Take the next cell for position + 1; returns it (the caller writes the
        bookkeeping). Updates the group and its mask."""
        cell = self.base + self.used
        g = self.group
        hi = min(cells, round_up(cell + 1, padding))
        mask = g.mask
        if hi != g.first_cell + g.n_kv:  # the span reaches the next padding boundary
            n_kv = hi - g.first_cell
            grown = np.full((mask.shape[0], n_kv), -np.inf, dtype=np.float32)
            grown[:, : g.n_kv] = mask
            mask = grown
            self.group = Group(0, 1, g.first_cell, n_kv, mask)
        mask[0, cell - g.first_cell] = 0.0
        self.used += 1
        self.position += 1
        return cell
