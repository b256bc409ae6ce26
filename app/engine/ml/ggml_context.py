"""`GGMLContext`, the ggml implementation of api.Context: one graph, its inputs, its runs.

The ops that build the graph's nodes are `GGMLOps`' (ggml_ops.py); this module holds the rest
of the contract: the graph's state (a no-alloc ggml context and its graph, made at once so that
`forward()` fixes the order of side effects), its inputs (`GraphInput`, ggml_inputs.py; a keyed
input refilled with the same type and shape takes a short path, every pass of a reused graph),
and running it: `compute()` adds the outputs once and hands the graph to the backend's
scheduler (`GGMLBackend._compute`, ggml.py), which allocates it when another graph ran in
between (`_pin_sources`, `_release_allocation`, `_allocated` prepare that) and uploads the
inputs. A graph computed again for the same outputs is not built again.
"""

from __future__ import annotations

import contextlib
import ctypes
from collections.abc import Callable, Sequence
from typing import Any

import ggml as g
import numpy as np

from .api import OutOfMemoryError
from .ggml_inputs import GraphInput
from .ggml_lib import address as _addr
from .ggml_ops import GGMLOps, GraphBackend
from .ggml_tensor import GGMLTensor
from .tensor import DType, Tensor, trim_shape

__all__ = ["GGMLContext"]


class GGMLContext(GGMLOps):
    """One graph under construction (a no-alloc ggml context); see api.Context."""

    def __init__(self, backend: GraphBackend, max_nodes: int) -> None:
        self._backend = backend
        self._max_nodes = max_nodes
        size = g.ggml_tensor_overhead() * max_nodes + g.ggml_graph_overhead_custom(max_nodes, False)
        params = g.ggml_init_params(mem_size=size, mem_buffer=None, no_alloc=True)
        self._ctx = g.ggml_init(params)
        if not self._ctx:
            raise OutOfMemoryError("could not create a ggml context")
        self._inputs: dict[int, GraphInput] = {}  # by id() of the input's tensor
        # After allocation: the inputs with memory (unused ones have none), to fill per run.
        self._uploads: list[GraphInput] | None = None
        self._filled = False  # every input has been given values (they never lose them)
        self.allocations = 0  # how many times the scheduler allocated this graph (numpy())
        self._built: tuple[Tensor, ...] = ()  # the outputs compute() last added (held)
        # The graph exists from the start so that forward() fixes the order of side effects
        # (a cache write is expanded before the attention that reads the cache).
        self._graph: object | None = g.ggml_new_graph_custom(self._ctx, max_nodes, False)
        self._graph_key = _addr(self._graph)
        self._outputs: set[int] = set()
        self._keyed: dict[str, tuple[Tensor, tuple[DType, tuple[int, ...]]]] = {}
        # key -> (dtype, shape, input) as first asked: refills of the same take a short path
        self._refill: dict[str, tuple[DType, tuple[int, ...], GraphInput]] = {}
        self._was_allocated = False
        # The graph's node sources as built (see _pin_sources), once the scheduler has seen it.
        self._sources: list[tuple[Any, tuple[int, ...]]] | None = None
        # Set by the engine per pass: for operands with this many rows, the (start, count)
        # runs that belong to one sequence each (see mul_mat).
        self.row_groups: dict[int, list[tuple[int, int]]] = {}
        self._quantized = {}  # (see GGMLOps)

    # -- inputs -------------------------------------------------------------------------
    def _set_input(self, t: Tensor, values: np.ndarray) -> None:
        assert isinstance(t, GGMLTensor)
        inp = self._inputs.get(id(t))
        if inp is None or inp.tensor is not t:
            raise ValueError("set(): this tensor is not an input of its graph")
        if inp.np_type is not None:
            arr = np.ascontiguousarray(values, dtype=inp.np_type)
        else:
            arr = np.ascontiguousarray(values).view(np.uint8)
        if arr.nbytes != inp.nbytes:
            raise ValueError(
                f"input {list(t.shape)} {t.dtype.name} needs {inp.nbytes} bytes, got {arr.nbytes}"
            )
        inp.values = arr

    def input(
        self,
        dtype: DType,
        shape: Sequence[int],
        data: np.ndarray | None = None,
        key: str | None = None,
    ) -> Tensor:
        """api.Context.input; refilling a keyed input of the same type and shape (each pass
        of a reused graph) takes a short path."""
        if data is not None and key is not None:
            known = self._refill.get(key)
            if known is not None and known[0] == dtype and known[1] == shape:
                inp = known[2]
                arr = np.ascontiguousarray(data, dtype=inp.np_type)
                if arr.nbytes == inp.nbytes:
                    inp.values = arr
                    return inp.tensor
        t = super().input(dtype, shape, data, key)
        if key is not None:
            inp = self._inputs[id(t)]
            if inp.np_type is not None and t.shape == trim_shape(shape):
                self._refill[key] = (dtype, tuple(shape), inp)
        return t

    def _new_input(self, dtype: DType, shape: Sequence[int]) -> GGMLTensor:
        ne = list(shape) + [1] * (4 - len(shape))
        p = g.ggml_new_tensor_4d(self._ctx, int(dtype), ne[0], ne[1], ne[2], ne[3])
        g.ggml_set_input(p)
        t = self._t(p)
        self._inputs[id(t)] = GraphInput(t)
        self._filled = False
        return t

    # -- running ------------------------------------------------------------------------
    def forward(self, *tensors: Tensor) -> None:
        for t in tensors:
            g.ggml_build_forward_expand(self._graph, t.ptr)  # type: ignore[attr-defined]

    def _build(self, outputs: Sequence[Tensor]) -> object:
        for t in outputs:
            key = _addr(t.ptr)  # type: ignore[attr-defined]
            if key not in self._outputs:
                g.ggml_set_output(t.ptr)  # type: ignore[attr-defined]
                g.ggml_build_forward_expand(self._graph, t.ptr)  # type: ignore[attr-defined]
                self._outputs.add(key)
                if self._was_allocated:
                    raise RuntimeError("outputs cannot be added to a graph that already ran")
        return self._graph

    def compute(self, *outputs: Tensor, on_started: Callable[[], None] | None = None) -> None:
        built = self._built
        same = len(outputs) == len(built) and (
            (len(built) == 1 and outputs[0] is built[0])
            or all(a is b for a, b in zip(outputs, built, strict=True))
        )
        if not same:  # (a graph run again for the same outputs: nothing to add)
            self._build(outputs)
            self._built = outputs
        gf = self._graph
        if not self._filled:
            missing = sum(1 for inp in self._inputs.values() if inp.values is None)
            if missing:
                raise ValueError(f"{missing} graph input(s) were never given values")
            self._filled = True
        self._backend._compute(self, gf, on_started)

    def _pin_sources(self, gf: object) -> None:
        """Before the scheduler splits this graph: the first time, remember every node's
        sources; later, put them back. Splitting a graph across devices rewrites the sources
        of nodes that read another device's tensors to point at the scheduler's copies, which
        live in a context the next split frees: a graph re-allocated after another graph ran
        would read through those dead copies (stale rows, a GPU's illegal address). On one
        device there are no copies and nothing changes."""
        if self._sources is None:
            nodes = [g.ggml_graph_node(gf, i) for i in range(g.ggml_graph_n_nodes(gf))]
            self._sources = [
                (node, tuple(_addr(s) if s else 0 for s in node.contents.src)) for node in nodes
            ]
            return
        for node, sources in self._sources:
            src = node.contents.src
            for j, address in enumerate(sources):
                src[j] = ctypes.cast(address, type(src[j])) if address else None

    def _allocated(self) -> None:
        """The scheduler has just allocated this graph: note where each input goes."""
        uploads = []
        for inp in self._inputs.values():
            if inp.tensor.ptr.contents.data:  # type: ignore[attr-defined]  # unused: no memory
                inp.host = inp.map_host()
                uploads.append(inp)
        self._uploads = uploads
        self.allocations += 1

    def _release_allocation(self) -> None:
        """Forget every graph tensor's address so the allocator places them anew."""
        t = g.ggml_get_first_tensor(self._ctx)
        while t:
            c = t.contents
            c.data = None
            c.buffer = None
            t = g.ggml_get_next_tensor(self._ctx, t)

    def reserve(self, *outputs: Tensor) -> None:
        gf = self._build(outputs)
        self._pin_sources(gf)  # reserving splits the graph too
        self._backend._reserve(gf)

    @property
    def is_current(self) -> bool:
        """Whether this graph is the one the scheduler holds now, so compute() can re-run it
        (after inputs were refilled) without building anew."""
        return self._graph is not None and self._backend._allocated_graph == _addr(self._graph)

    def close(self) -> None:
        if self._ctx:
            self._backend._forget_graph(self._graph)
            g.ggml_free(self._ctx)
            self._ctx = None
            self._graph = None
            self._inputs.clear()
            self._refill.clear()
            self._uploads = None

    def __del__(self) -> None:
        with contextlib.suppress(Exception):  # interpreter shutdown
            self.close()
