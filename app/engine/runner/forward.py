"""Forward passes of one loaded model over its KV cache, with graph reuse.

`ForwardEngine` owns the cache and the core-side half of every pass: it builds the batch's
input tensors, lets the cache assign cells (`prepare`), asks the plugin for the graph, and
computes it. The most recent graph is kept and run again when the next pass has the same shape
(same batch size, output rows and cache signature), after its inputs are refilled; that is
what makes token-by-token generation cheap in Python (as llama.cpp's graph reuse does).

At construction it reserves the worst-case graphs (a full batch whose mask spans the whole
cache, and a batch of one), so that a model which does not fit fails here, not mid-inference.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..input import Batch
from ..kvcache import Cache
from ..ml.api import Context, DType, OutOfMemoryError, Tensor
from ..model import LoadedModel

__all__ = ["ForwardEngine", "MemoryReport"]


@dataclass(frozen=True)
class MemoryReport:
    weights: int
    cache: int
    graph: int

    @property
    def total(self) -> int:
        return self.weights + self.cache + self.graph


@dataclass
class _Graph:
    key: tuple
    ctx: Context
    batch: Batch
    logits: Tensor


class ForwardEngine:
    """See the module docstring. Not thread-safe: one thread builds and runs passes."""

    def __init__(
        self,
        loaded: LoadedModel,
        num_ctx: int = 4096,
        num_batch: int = 512,
        parallel: int = 1,
        kv_dtype: DType = DType.F16,
        memory_limit: int | None = None,
    ) -> None:
        self.loaded = loaded
        self.model = loaded.model
        self.backend = loaded.backend
        self.num_ctx = num_ctx
        self.num_batch = min(num_batch, num_ctx)
        self.parallel = parallel
        self.vocab_size = loaded.tokenizer.vocab_size
        cache = self.model.make_cache()
        if cache is None:
            raise ValueError("models without a KV cache are not supported yet")
        self.cache: Cache = cache
        self.cache.init(self.backend, kv_dtype, parallel, num_ctx, self.num_batch)
        self._last: _Graph | None = None  # the most recent graph, re-run for equal shapes
        self.graphs_built = 0
        self.graphs_reused = 0
        self.memory = self._reserve()
        if memory_limit is not None and self.memory.total > memory_limit:
            raise OutOfMemoryError(
                f"this model needs {_mib(self.memory.total)} (weights {_mib(self.memory.weights)}, "
                f"KV cache {_mib(self.memory.cache)}, compute {_mib(self.memory.graph)}) but only "
                f"{_mib(memory_limit)} is available; try a smaller context length",
                needed=self.memory.total,
                available=memory_limit,
            )

    # -- reservation ----------------------------------------------------------------------
    def _reserve(self) -> MemoryReport:
        for n in (self.num_batch, 1):
            outputs = np.full(min(self.parallel, n), n - 1, dtype=np.int32)
            ctx = self.backend.new_context()
            try:
                batch = self._batch(
                    ctx,
                    np.zeros(n, np.int32),
                    np.arange(n, dtype=np.int32),
                    np.zeros(n, np.int32),
                    outputs,
                )
                self.cache.start_forward(ctx, batch, reserve=True)
                logits = self.model.forward(ctx, batch, self.cache)
                ctx.reserve(logits)
            finally:
                ctx.close()
        return MemoryReport(
            weights=self.loaded.weights.nbytes,
            cache=self.backend.persistent_bytes(),
            graph=self.backend.graph_memory(),
        )

    # -- passes ---------------------------------------------------------------------------
    @staticmethod
    def _batch(
        ctx: Context,
        tokens: np.ndarray,
        positions: np.ndarray,
        sequences: np.ndarray,
        outputs: np.ndarray,
    ) -> Batch:
        n = len(tokens)
        return Batch(
            tokens=ctx.input(DType.I32, (n,), tokens, key="batch.tokens"),
            positions=ctx.input(DType.I32, (n,), positions, key="batch.positions"),
            outputs=ctx.input(DType.I32, (len(outputs),), outputs, key="batch.outputs"),
            positions_host=positions,
            sequences=sequences,
            outputs_host=outputs,
        )

    def forward(
        self,
        tokens: np.ndarray,
        positions: np.ndarray,
        sequences: np.ndarray,
        outputs: np.ndarray,
    ) -> np.ndarray:
        """Run one pass; returns logits `[len(outputs), vocab]` (numpy order) for the rows
        `outputs` (indices into this batch). Raises CacheFullError when no cells are free."""
        tokens = np.ascontiguousarray(tokens, dtype=np.int32)
        positions = np.ascontiguousarray(positions, dtype=np.int32)
        sequences = np.ascontiguousarray(sequences, dtype=np.int32)
        outputs = np.ascontiguousarray(outputs, dtype=np.int32)
        host = Batch(None, None, None, positions, sequences, outputs)  # type: ignore[arg-type]
        self.cache.prepare(host)
        key = (len(tokens), len(outputs), self.cache.signature())
        graph = self._last
        if graph is not None and graph.key == key and graph.ctx.is_current:
            self.graphs_reused += 1
            self._batch(graph.ctx, tokens, positions, sequences, outputs)  # refill inputs
            self.cache.bind(graph.ctx)
        else:
            if graph is not None:
                graph.ctx.close()
                self._last = None
            ctx = self.backend.new_context()
            batch = self._batch(ctx, tokens, positions, sequences, outputs)
            self.cache.bind(ctx)
            logits = self.model.forward(ctx, batch, self.cache)
            graph = self._last = _Graph(key, ctx, batch, logits)
            self.graphs_built += 1
        graph.ctx.compute(graph.logits)
        return graph.logits.numpy().reshape(len(outputs), -1)

    def close(self) -> None:
        if self._last is not None:
            self._last.ctx.close()
            self._last = None
        self.cache.close()


def _mib(n: int) -> str:
    return f"{n / 2**20:,.0f} MiB"
