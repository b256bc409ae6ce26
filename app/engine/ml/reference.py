"""A numpy implementation of the tensor API: the reference semantics, for tests.

`NumpyBackend` implements `api.Backend`/`Context`/`Tensor` with plain numpy so that engine code
(KV caches, shift functions, attention, small model graphs) can be tested without ggml, and its
results compared with the ggml backend's. It favours being obviously right over being fast:

* Every tensor is a window onto a byte buffer (a 1-D uint8 array) described by ggml's four
  sizes `ne` and byte strides `nb`. Views, reshapes and permutes share their source's buffer,
  exactly as in ggml, so writing through a view (`copy`, `set_rows`) changes what every other
  view of the same memory sees.
* Ops are recorded when they are called and run, in call order, at `compute()`; only the ops
  that the outputs and the `forward()`ed tensors depend on run (like a ggml graph). A computed
  graph may be computed again after its inputs were given new values (keyed inputs work as in
  ggml), and `on_started` is honoured (inputs are copied in before it is called).
* Arithmetic is done in float64 and rounded to the result's element type once, so results are
  the exactly rounded values (ggml's kernels may differ in the last bits, and more for F16
  operands, which ggml multiplies in F16).

Element types: F32, F16, I8, I16 and I32. Quantized types and BF16 raise NotImplementedError.
Rules checked as ggml checks them (broadcastable shapes, contiguous reshape, in-bounds views
and row indices) raise ValueError or IndexError instead of aborting.

The backend is three modules: `reference_tensor` (element types, shapes and strides, the
tensor, and `Graph`: how an op's result tensor is made and recorded), `reference_ops` (what
each op checks and computes) and this one (inputs, running a graph, the backend itself).

Usage (a plugin's shift function, or a cache, on both backends):

    backend = NumpyBackend(padding=1, permuted_v=False)
    ctx = backend.new_context()
    x = ctx.from_numpy(np.ones((4, 8), np.float32))   # ggml shape [8, 4]
    y = ctx.scale(x, 2.0)
    ctx.compute(y)
    y.numpy()                                          # numpy shape (4, 8)
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence

import numpy as np

from .api import Backend, CacheConfig, Context
from .reference_ops import NumpyOps
from .reference_tensor import (
    NumpyTensor,
    element_dtype,
    numpy_tensor,
)
from .tensor import DType, Tensor

__all__ = ["NumpyBackend", "NumpyContext", "NumpyTensor"]


class NumpyContext(NumpyOps, Context):
    """One graph: ops are recorded and run in call order at compute(); see the module doc."""

    def __init__(self, backend: NumpyBackend, max_nodes: int) -> None:
        self._backend = backend
        self._max_nodes = max_nodes
        self._nodes: list[NumpyTensor] = []  # tensors with an op, in call order
        self._inputs: dict[int, tuple[NumpyTensor, np.ndarray | None]] = {}
        self._keyed: dict[str, tuple[Tensor, tuple[DType, tuple[int, ...]]]] = {}
        self._roots: dict[int, NumpyTensor] = {}  # forward()ed and output tensors
        self._computed = False
        self._closed = False
        self.row_groups: dict[int, list[tuple[int, int]]] = {}

    @property
    def flash_attention_enabled(self) -> bool:
        return self._backend.flash_attention

    # -- helpers ----------------------------------------------------------------------------
    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError("this context was closed")

    def _set_input(self, t: Tensor, values: np.ndarray) -> None:
        t = numpy_tensor(t)
        arr = np.array(values, dtype=element_dtype(t.dtype), copy=True)
        n = t.ne[0] * t.ne[1] * t.ne[2] * t.ne[3]
        if arr.size != n:
            raise ValueError(
                f"input {list(t.shape)} {t.dtype.name} needs {n} values, got {arr.size}"
            )
        self._inputs[id(t)] = (t, arr)

    # -- creation ---------------------------------------------------------------------------
    def _new_input(self, dtype: DType, shape: Sequence[int]) -> NumpyTensor:
        self._check_open()
        t = NumpyTensor._alloc(dtype, shape, self)
        self._inputs[id(t)] = (t, None)
        return t

    # -- running ----------------------------------------------------------------------------
    def forward(self, *tensors: Tensor) -> None:
        self._check_open()
        for t in tensors:
            self._roots.setdefault(id(t), numpy_tensor(t))

    def compute(self, *outputs: Tensor, on_started: Callable[[], None] | None = None) -> None:
        self.forward(*outputs)
        missing = [t for t, arr in self._inputs.values() if arr is None]
        if missing:
            raise ValueError(f"{len(missing)} graph input(s) were never given values")
        needed = self._reachable()
        with self._backend._lock:
            for t, arr in self._inputs.values():
                assert arr is not None
                t._store_exact(arr)
            if on_started is not None:
                on_started()
            for node in self._nodes:
                if id(node) in needed and node._run is not None:
                    node._run()
            self._computed = True
            self._backend._current = self

    def _reachable(self) -> set[int]:
        seen: set[int] = set()
        stack = list(self._roots.values())
        while stack:
            t = stack.pop()
            if id(t) in seen:
                continue
            seen.add(id(t))
            stack.extend(t._srcs)
        return seen

    @property
    def is_current(self) -> bool:
        return self._backend._current is self

    def reserve(self, *outputs: Tensor) -> None:
        """Nothing to plan: numpy allocates as it goes. The outputs join the graph."""
        self.forward(*outputs)

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._nodes.clear()
            self._roots.clear()
            self._inputs.clear()
            self._keyed.clear()
            if self._backend._current is self:
                self._backend._current = None


class NumpyBackend(Backend):
    """Host memory only. `padding`, `permuted_v` and `mask_dtype` are what `cache_config`
    reports (Ollama's test backend: no padding, permuted V as the test asks)."""

    def __init__(
        self,
        padding: int = 1,
        permuted_v: bool = False,
        mask_dtype: DType = DType.F32,
        flash_attention: bool = False,
        num_threads: int = 1,
        graph_nodes: int = 8192,
    ) -> None:
        if padding < 1:
            raise ValueError("padding must be at least 1")
        self.num_threads = num_threads
        self.flash_attention = flash_attention
        self.graph_nodes = graph_nodes
        self._config = CacheConfig(padding=padding, permuted_v=permuted_v, mask_dtype=mask_dtype)
        self._lock = threading.Lock()
        self._current: NumpyContext | None = None
        self._persistent: list[NumpyTensor] = []

    def new_context(self, max_nodes: int | None = None) -> NumpyContext:
        return NumpyContext(self, max_nodes or self.graph_nodes)

    def persistent(self, dtype: DType, shape: Sequence[int], name: str = "") -> NumpyTensor:
        t = NumpyTensor._alloc(dtype, shape, self, name)
        self._persistent.append(t)
        return t

    def persistent_bytes(self) -> int:
        return sum(t._base.nbytes for t in self._persistent)

    @property
    def cache_config(self) -> CacheConfig:
        return self._config

    def close(self) -> None:
        self._persistent.clear()
        self._current = None
