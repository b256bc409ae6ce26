"""Embeddings: a sequence's whole input evaluated for its hidden states, pooled as the model
says (`RunnerEngine.pooling`: the mean of every row, the first row or the last) and
L2-normalised. The batching loop (loop.py) runs one when an embedding request is active."""

from __future__ import annotations

import numpy as np

from .engine import PassInput, RunnerEngine

__all__ = ["embed"]


def embed(engine: RunnerEngine, tokens: list[int], seq_id: int) -> list[float]:
    """The embedding of `tokens`, evaluated in passes of at most `engine.num_batch` rows in
    cache sequence `seq_id` (raises `CacheFullError` where the cache cannot hold them)."""
    n = len(tokens)
    pooling = engine.pooling
    total = np.zeros(0, dtype=np.float32)
    vec = None
    for start in range(0, n, engine.num_batch):
        part = tokens[start : start + engine.num_batch]
        m = len(part)
        rows = np.arange(m) if pooling == "mean" else np.array([m - 1])
        hidden = engine.forward(
            PassInput(
                np.array(part),
                np.arange(start, start + m),
                np.full(m, seq_id),
                rows,
                hidden=True,
            )
        )
        if pooling == "mean":
            total = hidden.sum(axis=0) if not len(total) else total + hidden.sum(axis=0)
        elif pooling == "first" and start == 0:
            vec = hidden[0]
        elif pooling == "last":
            vec = hidden[-1]
    if pooling == "mean":
        vec = total / n
    assert vec is not None
    norm = float(np.linalg.norm(vec)) or 1.0
    result: list[float] = (vec / norm).tolist()
    return result
