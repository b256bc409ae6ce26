"""Greedy picks in the graph: each output row's most likely token chosen on the backend, so
that only token ids (and a count) cross to the host instead of a vocabulary of logits.

Exact: the pick is numpy's `argmax` of the row's logits, the lowest id among equal maxima,
whatever the backend's argmax does with ties. Per row the graph computes `a = argmax(x)`,
`m = x[a]` and `below = sum(step(m - x))`, how many logits lie below m (m - x is exact and
nonzero for every x < m; an x equal to m or a NaN gives 0). When `below` is `vocab - 1`, a is
the one largest logit and the pick; otherwise (equal maxima, NaNs, all -inf) the host reads the
row's logits, which the graph keeps, and takes numpy's argmax there.

Worth it where the output layer runs on a device (its logits would otherwise be copied over
each token); on the CPU ggml's argmax is a scalar loop, slower than numpy's over a copy, so
the engine then picks on the host (`ForwardEngine.greedy_on_backend`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .ml.api import Context
from .ml.tensor import Tensor

__all__ = ["GreedyNodes"]


@dataclass
class GreedyNodes:
    """The graph nodes of one pass's greedy picks: per output row an I32 `[1]` pick and an
    F32 `[1]` count of the logits below it."""

    picks: list[Tensor]
    below: list[Tensor]

    @classmethod
    def build(cls, ctx: Context, logits: Tensor) -> GreedyNodes:
        """Add the picks of `logits` (F32 `[vocab, rows]`) to the graph."""
        vocab = logits.dim(0)
        rows = logits.dim(1) if len(logits.shape) > 1 else 1
        row_bytes = logits.strides[1]
        picks, below = [], []
        for r in range(rows):
            x = ctx.view(logits, (vocab, 1), (row_bytes,), offset=r * row_bytes)
            a = ctx.argmax(x)
            m = ctx.get_rows(ctx.reshape(x, 1, vocab), a)  # [1, 1]: x[a]
            less = ctx.step(ctx.add(ctx.scale(x, -1.0), m))  # m - x > 0
            picks.append(a)
            below.append(ctx.sum_rows(ctx.reshape(less, vocab)))
        return cls(picks, below)

    @property
    def outputs(self) -> tuple[Tensor, ...]:
        return (*self.picks, *self.below)

    def read(self, vocab: int, logits: Tensor) -> np.ndarray:
        """After compute: `[rows]` int32 token ids (module docstring)."""
        out = np.empty(len(self.picks), dtype=np.int32)
        full: np.ndarray | None = None
        for r, (a, below) in enumerate(zip(self.picks, self.below, strict=True)):
            if int(below.numpy().reshape(-1)[0]) == vocab - 1:
                out[r] = int(a.numpy().reshape(-1)[0])
                continue
            if full is None:
                full = logits.numpy().reshape(len(self.picks), -1)
            out[r] = int(full[r].argmax())
        return out
