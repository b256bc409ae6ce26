"""The ggml implementation of the tensor API (ggml-python ctypes bindings): `GGMLBackend`.

Graphs run through one `ggml_backend_sched` per backend object over the devices a
`DevicePlacement` names (GPUs, RPC workers) and the CPU last: each op runs on the device holding
its weights, the CPU being the fallback. Hearth's own CPU kernels (custom ops) are used only
where their operands live in host memory; with nothing placed, every op runs on the CPU as
before.

This module is the backend: its devices, the scheduler and its one allocated graph (`_compute`
allocates a graph when another ran in between, uploads its inputs and runs it under the lock
and, for runners that take turns, this runner's CPU turn), the compute thread pool, persistent
tensors (KV cache) and the probed cache layout. A graph is a `GGMLContext` (ggml_context.py,
its ops in ggml_ops.py, its inputs in ggml_inputs.py); a tensor a `GGMLTensor` (ggml_tensor.py).
"""

from __future__ import annotations

import contextlib
import ctypes
import threading
from collections.abc import Callable, Sequence

import ggml as g

from ..cpu_turns import turns_from_env
from .api import Backend, CacheConfig, OutOfMemoryError
from .ggml_attention import AttentionKernel
from .ggml_context import GGMLContext
from .ggml_experts import ExpertsKernel
from .ggml_kernels import FewRowsKernel
from .ggml_lib import address as _addr
from .ggml_lib import compute_threads, device_of_buffer_type, layout_key, metadata_context
from .ggml_tensor import FLOAT_TYPES as _FLOAT_TYPES
from .ggml_tensor import GGMLTensor
from .invariance import (
    PADDING_CANDIDATES,
    ProductRule,
    probe_flash_attention,
    probe_kv_padding,
)
from .placement import DevicePlacement, PlacementError
from .tensor import DType, Tensor

__all__ = ["GGMLBackend"]

_c_void_p = ctypes.c_void_p


_NO_TURN = contextlib.nullcontext()  # (reusable: it holds nothing)


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
        self._all_on_devices: bool | None = None  # every layer on a GPU (no CPU turns)
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
            return _NO_TURN
        if self.blocks and self._all_on_devices is None:  # (the placement never changes)
            on_devices = {i for layers in self.placement.layers.values() for i in layers}
            self._all_on_devices = on_devices.issuperset(range(self.blocks + 1))
        if self._all_on_devices:
            return _NO_TURN
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
