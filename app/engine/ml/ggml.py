"""The ggml implementation of the tensor API (ggml-python ctypes bindings).

Graphs run through one `ggml_backend_sched` per backend object over the devices a
`DevicePlacement` names (GPUs, RPC workers) and the CPU last: each op runs on the device holding
its weights, the CPU being the fallback. Hearth's own CPU kernels (custom ops) are used only
where their operands live in host memory; with nothing placed, every op runs on the CPU as
before.
"""

from __future__ import annotations

import contextlib
import ctypes
import threading
from collections.abc import Callable, Sequence
from typing import Any

import ggml as g
import numpy as np

from ..cpu_turns import turns_from_env
from .api import (
    Backend,
    CacheConfig,
    Context,
    DType,
    OutOfMemoryError,
    RopeOptions,
    Tensor,
    trim_shape,
)
from .ggml_attention import AttentionKernel
from .ggml_experts import ExpertsKernel
from .ggml_kernels import FewRowsKernel
from .ggml_lib import address as _addr
from .ggml_lib import compute_threads, layout_key, metadata_context
from .ggml_tensor import FLOAT_TYPES as _FLOAT_TYPES
from .ggml_tensor import GGMLTensor, host_view
from .invariance import (
    PADDING_CANDIDATES,
    ProductRule,
    probe_flash_attention,
    probe_kv_padding,
)
from .placement import DevicePlacement, PlacementError

__all__ = [
    "GGMLBackend",
    "GGMLContext",
    "GGMLTensor",
    "device_of_buffer_type",
    "metadata_context",
    "compute_threads",
]


def device_of_buffer_type(buft: object) -> str:
    """The name of the device a buffer type's memory is on: "CPU" for every CPU buffer type
    (plain, mapped, the repacked layouts), else ggml's device name ("CUDA0", "RPC1")."""
    dev = g.ggml_backend_buft_get_device(buft)
    if not dev or int(g.ggml_backend_dev_type(dev)) == g.GGML_BACKEND_DEVICE_TYPE_CPU:
        return "CPU"
    return str(g.ggml_backend_dev_name(dev).decode())


def _on_cpu(p: Any) -> bool:
    """Whether tensor `p` lives in a CPU buffer (or is not allocated yet, in which case the
    scheduler allocates it on the CPU): where Hearth's CPU kernels may read it."""
    buf = p.contents.buffer
    return not buf or device_of_buffer_type(g.ggml_backend_buffer_get_type(buf)) == "CPU"


_c_void_p = ctypes.c_void_p


_STAGED_BYTES = 1 << 16  # device inputs up to this size go through a staging array


class _Input:
    """A graph input: its tensor, what its values must be (numpy type, bytes), the values
    given, and where they go once the graph is allocated (`host`: a numpy view of the
    tensor's memory when that is host memory, written with one copy; else uploaded with
    ggml_backend_tensor_set)."""

    __slots__ = ("tensor", "np_type", "nbytes", "values", "host", "staging")

    def __init__(self, tensor: GGMLTensor) -> None:
        self.tensor = tensor
        try:
            self.np_type: np.dtype | None = np.dtype(tensor.dtype.numpy)
        except KeyError:  # quantized: raw bytes
            self.np_type = None
        self.nbytes = tensor.nbytes
        self.values: np.ndarray | None = None
        self.host: np.ndarray | None = None
        # Device memory: (a host array, its address) the values go through, so that no
        # ctypes view of a fresh array is made per upload (microseconds each).
        self.staging: tuple[np.ndarray, int] | None = None

    def upload(self) -> None:
        values = self.values
        assert values is not None
        if self.host is not None:
            self.host[...] = values.reshape(-1)  # (contiguous: a view)
            return
        if self.nbytes > _STAGED_BYTES:  # (a copy more would cost more than it saves)
            g.ggml_backend_tensor_set(self.tensor.ptr, values.ctypes.data, 0, self.nbytes)
            return
        staging = self.staging
        if staging is None:
            array = np.empty(self.nbytes, dtype=np.uint8)
            staging = self.staging = (array, array.ctypes.data)
        staging[0][...] = values.reshape(-1).view(np.uint8)
        g.ggml_backend_tensor_set(self.tensor.ptr, staging[1], 0, self.nbytes)


def _host_view(inp: _Input) -> np.ndarray | None:
    """A numpy array over an allocated input's memory when it is host memory, else None."""
    return host_view(inp.tensor.ptr, inp.np_type or np.dtype(np.uint8), inp.nbytes)


_POOL_OPS = {"avg": g.GGML_OP_POOL_AVG, "max": g.GGML_OP_POOL_MAX}


class GGMLContext(Context):
    """One graph under construction (a no-alloc ggml context); see api.Context."""

    def __init__(self, backend: GGMLBackend, max_nodes: int) -> None:
        self._backend = backend
        self._max_nodes = max_nodes
        size = g.ggml_tensor_overhead() * max_nodes + g.ggml_graph_overhead_custom(max_nodes, False)
        params = g.ggml_init_params(mem_size=size, mem_buffer=None, no_alloc=True)
        self._ctx = g.ggml_init(params)
        if not self._ctx:
            raise OutOfMemoryError("could not create a ggml context")
        self._inputs: dict[int, _Input] = {}  # by id() of the input's tensor
        # After allocation: the inputs with memory (unused ones have none), to fill per run.
        self._uploads: list[_Input] | None = None
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
        self._refill: dict[str, tuple[DType, tuple[int, ...], _Input]] = {}
        self._was_allocated = False
        # The graph's node sources as built (see _pin_sources), once the scheduler has seen it.
        self._sources: list[tuple[Any, tuple[int, ...]]] | None = None
        # Set by the engine per pass: for operands with this many rows, the (start, count)
        # runs that belong to one sequence each (see mul_mat).
        self.row_groups: dict[int, list[tuple[int, int]]] = {}
        # Activations quantized for the experts' kernel, by (tensor address, format).
        self._quantized: dict[tuple[int, int], Any] = {}

    @property
    def flash_attention_enabled(self) -> bool:
        return self._backend.flash_attention

    # -- helpers ------------------------------------------------------------------------
    def _t(self, p: object) -> GGMLTensor:
        return GGMLTensor(p, self)

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

    # -- creation -----------------------------------------------------------------------
    def _new_input(self, dtype: DType, shape: Sequence[int]) -> GGMLTensor:
        ne = list(shape) + [1] * (4 - len(shape))
        p = g.ggml_new_tensor_4d(self._ctx, int(dtype), ne[0], ne[1], ne[2], ne[3])
        g.ggml_set_input(p)
        t = self._t(p)
        self._inputs[id(t)] = _Input(t)
        self._filled = False
        return t

    # -- arithmetic ---------------------------------------------------------------------
    def add(self, a: Tensor, b: Tensor) -> GGMLTensor:
        return self._t(g.ggml_add(self._ctx, a.ptr, b.ptr))  # type: ignore[attr-defined]

    def mul(self, a: Tensor, b: Tensor) -> GGMLTensor:
        return self._t(g.ggml_mul(self._ctx, a.ptr, b.ptr))  # type: ignore[attr-defined]

    def scale(self, a: Tensor, s: float) -> GGMLTensor:
        return self._t(g.ggml_scale(self._ctx, a.ptr, s))  # type: ignore[attr-defined]

    def scale_bias(self, a: Tensor, s: float, b: float) -> GGMLTensor:
        return self._t(g.ggml_scale_bias(self._ctx, a.ptr, s, b))  # type: ignore[attr-defined]

    def div(self, a: Tensor, b: Tensor) -> GGMLTensor:
        return self._t(g.ggml_div(self._ctx, a.ptr, b.ptr))  # type: ignore[attr-defined]

    def mul_mat(self, a: Tensor, b: Tensor, full_precision: bool = False) -> GGMLTensor:
        ne = b.ptr.contents.ne  # type: ignore[attr-defined]
        groups = self.row_groups.get(ne[1]) if self._backend.rows_apart(a) else None
        if groups is not None and len(groups) > 1 and ne[2] == 1 and ne[3] == 1:
            # This kernel path rounds a lone row differently from a batch of rows (e.g.
            # llamafile's sgemm needs n >= 2; see invariance.py): multiply each sequence's
            # rows on their own so its numbers do not depend on the rest of the batch.
            nb1 = b.strides[1]
            out = None
            for start, count in groups:
                part = g.ggml_view_2d(self._ctx, b.ptr, ne[0], count, nb1, start * nb1)  # type: ignore[attr-defined]
                y = self._mul_mat(a, part, full_precision)
                out = y if out is None else g.ggml_concat(self._ctx, out, y, 1)
            return self._t(out)
        return self._t(self._mul_mat(a, b.ptr, full_precision))  # type: ignore[attr-defined]

    def _mul_mat(self, a: Tensor, bp: Any, full_precision: bool) -> Any:
        kernel = self._backend.few_rows_kernel
        if (
            kernel is not None and _on_cpu(a.ptr) and kernel.applies(a.ptr, bp)  # type: ignore[attr-defined]
        ):
            return kernel.mul_mat(self._ctx, a.ptr, bp)  # type: ignore[attr-defined]
        p = g.ggml_mul_mat(self._ctx, a.ptr, bp)  # type: ignore[attr-defined]
        if full_precision:
            g.ggml_mul_mat_set_prec(p, g.GGML_PREC_F32)
        return p

    def get_rows(self, a: Tensor, rows: Tensor) -> GGMLTensor:
        return self._t(g.ggml_get_rows(self._ctx, a.ptr, rows.ptr))  # type: ignore[attr-defined]

    def set_rows(self, dst: Tensor, src: Tensor, rows: Tensor) -> GGMLTensor:
        return self._t(g.ggml_set_rows(self._ctx, dst.ptr, src.ptr, rows.ptr))  # type: ignore[attr-defined]

    # -- normalisation and activations --------------------------------------------------
    def rms_norm(self, a: Tensor, eps: float) -> GGMLTensor:
        return self._t(g.ggml_rms_norm(self._ctx, a.ptr, eps))  # type: ignore[attr-defined]

    def norm(self, a: Tensor, eps: float) -> GGMLTensor:
        return self._t(g.ggml_norm(self._ctx, a.ptr, eps))  # type: ignore[attr-defined]

    def soft_max(
        self,
        a: Tensor,
        mask: Tensor | None = None,
        scale: float = 1.0,
        sinks: Tensor | None = None,
    ) -> GGMLTensor:
        m = mask.ptr if mask is not None else None  # type: ignore[attr-defined]
        p = g.ggml_soft_max_ext(self._ctx, a.ptr, m, scale, 0.0)  # type: ignore[attr-defined]
        if sinks is not None:
            g.ggml_soft_max_add_sinks(p, sinks.ptr)  # type: ignore[attr-defined]
        return self._t(p)

    def gelu(self, a: Tensor) -> GGMLTensor:
        return self._t(g.ggml_gelu(self._ctx, a.ptr))  # type: ignore[attr-defined]

    def gelu_erf(self, a: Tensor) -> GGMLTensor:
        return self._t(g.ggml_gelu_erf(self._ctx, a.ptr))  # type: ignore[attr-defined]

    def silu(self, a: Tensor) -> GGMLTensor:
        return self._t(g.ggml_silu(self._ctx, a.ptr))  # type: ignore[attr-defined]

    def tanh(self, a: Tensor) -> GGMLTensor:
        return self._t(g.ggml_tanh(self._ctx, a.ptr))  # type: ignore[attr-defined]

    def geglu(self, gate: Tensor, up: Tensor) -> GGMLTensor:
        return self._t(g.ggml_geglu_split(self._ctx, gate.ptr, up.ptr))  # type: ignore[attr-defined]

    def swiglu(self, gate: Tensor, up: Tensor) -> GGMLTensor:
        return self._t(g.ggml_swiglu_split(self._ctx, gate.ptr, up.ptr))  # type: ignore[attr-defined]

    def rope(
        self,
        a: Tensor,
        positions: Tensor,
        opts: RopeOptions,
        factors: Tensor | None = None,
    ) -> GGMLTensor:
        mode = g.GGML_ROPE_TYPE_NEOX if opts.neox else g.GGML_ROPE_TYPE_NORMAL
        f = factors.ptr if factors is not None else None  # type: ignore[attr-defined]
        p = g.ggml_rope_ext(
            self._ctx,
            a.ptr,  # type: ignore[attr-defined]
            positions.ptr,  # type: ignore[attr-defined]
            f,
            opts.dims,
            mode,
            opts.original_context,
            opts.base,
            opts.scale,
            opts.ext_factor,
            opts.attn_factor,
            opts.beta_fast,
            opts.beta_slow,
        )
        return self._t(p)

    def flash_attention(
        self,
        q: Tensor,
        k: Tensor,
        v: Tensor,
        mask: Tensor | None,
        scale: float,
        softcap: float = 0.0,
        sinks: Tensor | None = None,
    ) -> GGMLTensor:
        m = mask.ptr if mask is not None else None  # type: ignore[attr-defined]
        p = g.ggml_flash_attn_ext(self._ctx, q.ptr, k.ptr, v.ptr, m, scale, 0.0, softcap)  # type: ignore[attr-defined]
        if sinks is not None:
            g.ggml_flash_attn_ext_add_sinks(p, sinks.ptr)  # type: ignore[attr-defined]
        g.ggml_flash_attn_ext_set_prec(p, g.GGML_PREC_F32)
        # The result is [d_v, heads, tokens] already (ggml permutes internally).
        return self._t(p)

    def encoder_attention(self, q: Tensor, k: Tensor, v: Tensor, scale: float) -> GGMLTensor | None:
        kernel = self._backend.attention_kernel
        qp, kp, vp = q.ptr, k.ptr, v.ptr  # type: ignore[attr-defined]
        if kernel is None or self._backend.placement.projector or not kernel.takes(qp, kp, vp):
            # (an encoder placed on a device computes there: a custom op cannot)
            return None
        return self._t(kernel.attention(self._ctx, qp, kp, vp, scale))

    # -- routed experts -----------------------------------------------------------------
    def mul_mat_id(self, experts: Tensor, b: Tensor, ids: Tensor) -> GGMLTensor:
        ep, bp, ip = experts.ptr, b.ptr, ids.ptr  # type: ignore[attr-defined]
        kernel = self._backend.experts_kernel
        if kernel is not None and _on_cpu(ep) and kernel.applies(ep, bp, ip):
            # Hearth's kernel (ggml_experts.py); the products of one layer that read the
            # same activations (gate and up) share their quantized copy.
            dtype = DType(ep.contents.type)
            key = (_addr(bp), kernel.activation_format(dtype))
            q = self._quantized.get(key)
            if q is None:
                q = self._quantized[key] = kernel.quantize(self._ctx, dtype, bp)
            return self._t(kernel.mul_mat_id(self._ctx, ep, q, ip))
        return self._t(g.ggml_mul_mat_id(self._ctx, ep, bp, ip))

    def add_id(self, a: Tensor, b: Tensor, ids: Tensor) -> GGMLTensor:
        return self._t(g.ggml_add_id(self._ctx, a.ptr, b.ptr, ids.ptr))  # type: ignore[attr-defined]

    def argsort_top_k(self, a: Tensor, k: int) -> GGMLTensor:
        if not 0 < k <= a.dim(0):
            raise ValueError(f"argsort_top_k: k is 1..{a.dim(0)}, not {k}")
        return self._t(g.ggml_argsort_top_k(self._ctx, a.ptr, k))  # type: ignore[attr-defined]

    def sum_rows(self, a: Tensor) -> GGMLTensor:
        return self._t(g.ggml_sum_rows(self._ctx, a.ptr))  # type: ignore[attr-defined]

    def argmax(self, a: Tensor) -> GGMLTensor:
        return self._t(g.ggml_argmax(self._ctx, a.ptr))  # type: ignore[attr-defined]

    def step(self, a: Tensor) -> GGMLTensor:
        return self._t(g.ggml_step(self._ctx, a.ptr))  # type: ignore[attr-defined]

    def sigmoid(self, a: Tensor) -> GGMLTensor:
        return self._t(g.ggml_sigmoid(self._ctx, a.ptr))  # type: ignore[attr-defined]

    def clamp(self, a: Tensor, lo: float, hi: float) -> GGMLTensor:
        return self._t(g.ggml_clamp(self._ctx, a.ptr, lo, hi))  # type: ignore[attr-defined]

    def swiglu_oai(self, gate: Tensor, up: Tensor, alpha: float, limit: float) -> GGMLTensor:
        return self._t(g.ggml_swiglu_oai(self._ctx, gate.ptr, up.ptr, alpha, limit))  # type: ignore[attr-defined]

    def pool_2d(
        self, a: Tensor, kernel: int, stride: int | None = None, mode: str = "avg"
    ) -> GGMLTensor:
        op = _POOL_OPS.get(mode)
        if op is None:
            raise ValueError(f"pool_2d: mode is 'avg' or 'max', not {mode!r}")
        s = kernel if stride is None else stride
        if kernel < 1 or s < 1 or kernel > a.dim(0) or kernel > a.dim(1):
            raise ValueError(f"pool_2d: a {kernel}x{kernel} window does not fit {list(a.shape)}")
        p = g.ggml_pool_2d(self._ctx, a.ptr, op, kernel, kernel, s, s, 0.0, 0.0)  # type: ignore[attr-defined]
        return self._t(p)

    # -- layout -------------------------------------------------------------------------
    def reshape(self, a: Tensor, *shape: int) -> GGMLTensor:
        ap = a.ptr  # type: ignore[attr-defined]
        n = len(shape)
        if n == 1:
            p = g.ggml_reshape_1d(self._ctx, ap, shape[0])
        elif n == 2:
            p = g.ggml_reshape_2d(self._ctx, ap, shape[0], shape[1])
        elif n == 3:
            p = g.ggml_reshape_3d(self._ctx, ap, shape[0], shape[1], shape[2])
        else:
            p = g.ggml_reshape_4d(self._ctx, ap, shape[0], shape[1], shape[2], shape[3])
        return self._t(p)

    def view(
        self,
        a: Tensor,
        shape: Sequence[int],
        strides: Sequence[int] = (),
        offset: int = 0,
    ) -> GGMLTensor:
        ap = a.ptr  # type: ignore[attr-defined]
        n = len(shape)
        if len(strides) != n - 1:
            raise ValueError("view(): give one byte stride for each dimension after the first")
        if n == 1:
            p = g.ggml_view_1d(self._ctx, ap, shape[0], offset)
        elif n == 2:
            p = g.ggml_view_2d(self._ctx, ap, shape[0], shape[1], strides[0], offset)
        elif n == 3:
            p = g.ggml_view_3d(
                self._ctx, ap, shape[0], shape[1], shape[2], strides[0], strides[1], offset
            )
        else:
            p = g.ggml_view_4d(
                self._ctx, ap, shape[0], shape[1], shape[2], shape[3],
                strides[0], strides[1], strides[2], offset,
            )  # fmt: skip
        return self._t(p)

    def permute(self, a: Tensor, *axes: int) -> GGMLTensor:
        ax = list(axes) + list(range(len(axes), 4))
        return self._t(g.ggml_permute(self._ctx, a.ptr, ax[0], ax[1], ax[2], ax[3]))  # type: ignore[attr-defined]

    def cont(self, a: Tensor) -> GGMLTensor:
        return self._t(g.ggml_cont(self._ctx, a.ptr))  # type: ignore[attr-defined]

    def copy(self, src: Tensor, dst: Tensor) -> GGMLTensor:
        return self._t(g.ggml_cpy(self._ctx, src.ptr, dst.ptr))  # type: ignore[attr-defined]

    def cast(self, a: Tensor, dtype: DType) -> GGMLTensor:
        return self._t(g.ggml_cast(self._ctx, a.ptr, int(dtype)))  # type: ignore[attr-defined]

    def concat(self, a: Tensor, b: Tensor, dim: int) -> GGMLTensor:
        return self._t(g.ggml_concat(self._ctx, a.ptr, b.ptr, dim))  # type: ignore[attr-defined]

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
        same = len(outputs) == len(built) and all(
            a is b for a, b in zip(outputs, built, strict=True)
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
                inp.host = _host_view(inp)
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


class GGMLBackend(Backend):
    """CPU (and, in GPU builds, accelerator) devices with one graph scheduler."""

    def __init__(
        self,
        num_threads: int | None = None,
        flash_attention: bool = False,
        graph_nodes: int = 8192,
        placement: DevicePlacement | None = None,
    ) -> None:
        self.num_threads = num_threads or compute_threads()
        self.placement = placement or DevicePlacement()
        self.blocks = 0  # the model's block count (the output layer's index); set by its weights
        self.flash_attention = flash_attention
        self.graph_nodes = graph_nodes
        self._lock = threading.Lock()
        self._cpu = g.ggml_backend_cpu_init()
        if not self._cpu:
            raise RuntimeError("ggml could not start its CPU backend")
        g.ggml_backend_cpu_set_n_threads(self._cpu, self.num_threads)
        # One persistent pool of compute threads (builds without OpenMP; with OpenMP ggml
        # ignores it): starting threads for every graph would cost each token.
        params = g.ggml_threadpool_params_default(self.num_threads)
        # Runners started by the service take turns on the CPU (engine/cpu_turns.py); a pool
        # waiting for its turn must sleep between graphs, not spin (ggml's poll level 50).
        self.cpu_turns = turns_from_env()
        if self.cpu_turns is not None:
            params.poll = 0
        self._threadpool = g.ggml_threadpool_new(ctypes.byref(params))
        if self._threadpool:
            g.ggml_backend_cpu_set_threadpool(self._cpu, self._threadpool)
        # One backend per device the placement names, in its order; the CPU last (ggml's
        # scheduler requires it there and falls back to it for ops a device lacks).
        self.device_backends: dict[str, object] = {}
        self._backends = []
        try:
            for name in self.placement.devices:
                self.device_backends[name] = self._init_device(name)
        except BaseException:
            for b in self.device_backends.values():
                g.ggml_backend_free(b)
            g.ggml_backend_free(self._cpu)
            raise
        self._backends = [*self.device_backends.values(), self._cpu]
        self._sched: object | None = None
        self._sched_nodes = 0
        self._allocated_graph = 0
        self._persistent: list[tuple[object, object]] = []  # (ggml context, buffer)
        self.cpu_buffer_type = g.ggml_backend_cpu_buffer_type()
        # Quantized weight products go to Hearth's own kernel (few rows when sequences decode
        # together, many for prompts, one for a huge output matrix; see ggml_kernels.py)
        # where it is built and agrees bit for bit with ggml's.
        self.few_rows_kernel: FewRowsKernel | None = FewRowsKernel.for_backend(self)
        # Routed experts' products for prompts likewise (ggml_experts.py).
        self.experts_kernel: ExpertsKernel | None = ExpertsKernel.for_backend(
            self, self.few_rows_kernel
        )
        # Encoders' unmasked F32 attention as one fused node (ggml_attention.py).
        self.attention_kernel: AttentionKernel | None = AttentionKernel.for_process()
        # What the weight store probed at load (invariance.py), by layout_key.
        self.product_rules: dict[tuple[int, int], ProductRule] = {}
        self._kv_padding: int | None = None
        self._attention_exact: bool | None = None

    @staticmethod
    def _init_device(name: str) -> object:
        dev = g.ggml_backend_dev_by_name(name.encode())
        if not dev:
            have = [
                g.ggml_backend_dev_name(g.ggml_backend_dev_get(i)).decode()
                for i in range(int(g.ggml_backend_dev_count()))
            ]
            raise PlacementError(
                f"the layout names device {name}, which this process does not have "
                f"(devices: {', '.join(have)})"
            )
        backend = g.ggml_backend_dev_init(dev, None)
        if not backend:
            raise RuntimeError(f"ggml could not start device {name}")
        return backend

    def buffer_type_for(self, name: str, matmul: bool = True) -> object | None:
        """The buffer type of the device the placement gives tensor `name` (a weight or a
        cache tensor), or None for the CPU (whose buffer type the caller chooses)."""
        device = self.placement.device_of_tensor(name, self.blocks, matmul)
        if device is None:
            return None
        dev = g.ggml_backend_get_device(self.device_backends[device])
        return g.ggml_backend_dev_buffer_type(dev)

    def device_names(self) -> list[str]:
        """Names of the scheduler's devices, the CPU last."""
        return [
            g.ggml_backend_dev_name(g.ggml_backend_get_device(b)).decode() for b in self._backends
        ]

    def graph_memory_by_device(self) -> dict[str, int]:
        """Bytes each device's compute buffer holds now (after reserve or compute)."""
        if self._sched is None:
            return {}
        return {
            name: int(g.ggml_backend_sched_get_buffer_size(self._sched, b))
            for name, b in zip(self.device_names(), self._backends, strict=True)
        }

    def rows_apart(self, weight: Tensor) -> bool:
        """Whether products with `weight` must take each sequence's rows on their own to stay
        batch-invariant: as probed for its type and layout, else (layouts never probed) for
        float types, whose lone rows ggml computes with another kernel."""
        rule = self.product_rules.get(layout_key(weight.ptr))  # type: ignore[attr-defined]
        if rule is None:
            return weight.dtype in _FLOAT_TYPES
        return rule is not ProductRule.INVARIANT

    # -- scheduler ----------------------------------------------------------------------
    def _scheduler(self) -> object:
        if self._sched is None or self._sched_nodes < self.graph_nodes:
            if self._sched is not None:
                g.ggml_backend_sched_free(self._sched)
            arr = (_c_void_p * len(self._backends))(*self._backends)
            self._sched = g.ggml_backend_sched_new(
                arr, None, len(self._backends), self.graph_nodes, False, True
            )
            self._sched_nodes = self.graph_nodes
            self._allocated_graph = 0
        return self._sched

    def _compute(
        self,
        ctx: GGMLContext,
        gf: object,
        on_started: Callable[[], None] | None = None,
    ) -> None:
        with self._lock:
            sched = self._scheduler()
            key = ctx._graph_key
            if self._allocated_graph != key:
                if ctx._was_allocated:
                    # ggml's allocator takes tensors that still hold addresses for allocated;
                    # forget the old ones or the new allocation would alias memory.
                    ctx._release_allocation()
                ctx._pin_sources(gf)
                g.ggml_backend_sched_reset(sched)
                if not g.ggml_backend_sched_alloc_graph(sched, gf):
                    self._allocated_graph = 0
                    raise OutOfMemoryError("not enough memory to run this graph")
                self._allocated_graph = key
                ctx._was_allocated = True
                ctx._allocated()
            assert ctx._uploads is not None
            for inp in ctx._uploads:
                inp.upload()
            if on_started is not None:
                on_started()
            with self._cpu_turn():
                status = g.ggml_backend_sched_graph_compute(sched, gf)
            if status != g.GGML_STATUS_SUCCESS:
                self._allocated_graph = 0
                raise RuntimeError(f"ggml graph compute failed (status {status})")

    @property
    def output_on_device(self) -> bool:
        """Whether the placement puts the output layer (index `blocks`) on a device."""
        return bool(self.blocks) and any(
            self.blocks in layers for layers in self.placement.layers.values()
        )

    def _cpu_turn(self) -> contextlib.AbstractContextManager[None]:
        """This runner's turn on the CPU for one graph, unless it takes no turns or every layer
        is on a GPU (engine/cpu_turns.py)."""
        if self.cpu_turns is None:
            return contextlib.nullcontext()
        on_devices = {i for layers in self.placement.layers.values() for i in layers}
        if self.blocks and on_devices.issuperset(range(self.blocks + 1)):
            return contextlib.nullcontext()
        return self.cpu_turns.turn()

    def _reserve(self, gf: object) -> None:
        with self._lock:
            sched = self._scheduler()
            self._allocated_graph = 0
            g.ggml_backend_sched_reset(sched)
            if not g.ggml_backend_sched_reserve(sched, gf):
                raise OutOfMemoryError("not enough memory for the worst-case graph")

    def _forget_graph(self, gf: object | None) -> None:
        if gf is not None and self._allocated_graph == _addr(gf):
            self._allocated_graph = 0

    def graph_memory(self) -> int:
        """Bytes the scheduler's compute buffers hold now (after reserve or compute)."""
        if self._sched is None:
            return 0
        return sum(
            int(g.ggml_backend_sched_get_buffer_size(self._sched, b)) for b in self._backends
        )

    # -- tensors ------------------------------------------------------------------------
    def new_context(self, max_nodes: int | None = None) -> GGMLContext:
        return GGMLContext(self, max_nodes or self.graph_nodes)

    def persistent(self, dtype: DType, shape: Sequence[int], name: str = "") -> GGMLTensor:
        ctx = metadata_context(2)
        ne = list(shape) + [1] * (4 - len(shape))
        p = g.ggml_new_tensor_4d(ctx, int(dtype), ne[0], ne[1], ne[2], ne[3])
        if name:
            g.ggml_set_name(p, name.encode()[:63])
        buft = (self.buffer_type_for(name) if name else None) or self.cpu_buffer_type
        buf = g.ggml_backend_alloc_ctx_tensors_from_buft(ctx, buft)
        if not buf:
            g.ggml_free(ctx)
            where = g.ggml_backend_buft_name(buft).decode()
            raise OutOfMemoryError(
                f"could not allocate {g.ggml_nbytes(p)} bytes on {where} for "
                f"{name or 'a cache tensor'}",
                needed=int(g.ggml_nbytes(p)),
            )
        g.ggml_backend_buffer_clear(buf, 0)
        self._persistent.append((ctx, buf))
        return GGMLTensor(p, self)

    def persistent_bytes(self) -> int:
        return sum(int(g.ggml_backend_buffer_get_size(buf)) for _, buf in self._persistent)

    def persistent_bytes_by_device(self) -> dict[str, int]:
        """Cache bytes by device name ("CPU", "CUDA0", "RPC1")."""
        out: dict[str, int] = {}
        for _, buf in self._persistent:
            name = device_of_buffer_type(g.ggml_backend_buffer_get_type(buf))
            out[name] = out.get(name, 0) + int(g.ggml_backend_buffer_get_size(buf))
        return out

    @property
    def cache_config(self) -> CacheConfig:
        if self.flash_attention:
            return CacheConfig(padding=self.kv_padding, permuted_v=False, mask_dtype=DType.F16)
        return CacheConfig(padding=self.kv_padding, permuted_v=True, mask_dtype=DType.F32)

    @property
    def kv_padding(self) -> int:
        """The KV padding: flash attention's 256; on the soft_max path the smallest under
        which masked cells add exact zeros on this CPU (32 with AVX2, 64 with AVX-512), or
        256 where none does (`attention_exact` then says so). Probed once per backend."""
        if self._kv_padding is None:
            self._probe_attention()
        assert self._kv_padding is not None
        return self._kv_padding

    @property
    def attention_exact(self) -> bool:
        """Whether attention gives a row the same bits whatever shares its batch: the
        soft_max path under `kv_padding`, or flash attention. Probed once per backend."""
        if self._attention_exact is None:
            self._probe_attention()
        return bool(self._attention_exact)

    def _probe_attention(self) -> None:
        if self.flash_attention:
            self._kv_padding = PADDING_CANDIDATES[-1]
            self._attention_exact = probe_flash_attention(self)
        else:
            probed = probe_kv_padding(self)
            self._kv_padding = probed or PADDING_CANDIDATES[-1]
            self._attention_exact = probed is not None

    def close(self) -> None:
        with self._lock:
            self.cpu_turns = None  # shared by the process (cpu_turns.turns_from_env)
            if self._threadpool:
                g.ggml_backend_cpu_set_threadpool(self._cpu, None)
                g.ggml_threadpool_free(self._threadpool)
                self._threadpool = None
            if self._sched is not None:
                g.ggml_backend_sched_free(self._sched)
                self._sched = None
            for ctx, buf in self._persistent:
                g.ggml_backend_buffer_free(buf)
                g.ggml_free(ctx)
            self._persistent.clear()
            for b in self._backends:
                g.ggml_backend_free(b)
            self._backends = []
