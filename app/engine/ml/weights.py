"""Model weights: bound by GGUF name while a model is constructed, then loaded into buffers.

The flow is the one Ollama uses: the architecture's constructor asks for tensors by name
(`store.get("blk.0.attn_q.weight")`) and receives tensor handles with shapes but no data yet;
afterwards `store.load()` allocates backend buffers for exactly the tensors that were asked for
and copies their bytes from the memory-mapped file, reporting progress.

Buffer choice per tensor follows llama.cpp: a weight used as the left operand of a matrix
multiplication goes to the CPU "repack" buffer type when ggml supports it for that tensor type
(its interleaved layout makes quantized matmuls faster); everything else goes to the plain CPU
buffer. A tied output matrix (`output.weight` missing, `token_embd.weight` used instead) is
therefore loaded twice: once for row lookups, once laid out for matmul, as llama.cpp does.
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable
from dataclasses import dataclass

import ggml as g
import numpy as np

from ..gguf import GGUFError, GGUFFile, TensorInfo
from .api import DType, OutOfMemoryError
from .ggml import GGMLBackend, GGMLTensor

__all__ = ["WeightStore", "MissingTensorError", "ProgressFn"]

ProgressFn = Callable[[float], None]

_SUPPORTED_TYPES = {int(t) for t in DType} | {
    # ggml knows these quantisations too; they are valid weight types.
    9,
    15,
    16,
    17,
    18,
    19,
    20,
    21,
    22,
    23,
    29,
    34,
    35,
    39,
}


class MissingTensorError(GGUFError):
    """A tensor the architecture needs is not in the file."""


@dataclass
class _Slot:
    info: TensorInfo
    tensor: GGMLTensor
    matmul: bool
    buft: object = None


class WeightStore:
    """Tensor handles by GGUF name for one file (see the module docstring).

    Ownership: the store owns the weight buffers; `close()` frees them. Handles stay valid
    (as graph operands) until then. Not thread-safe; used while a model loads.
    """

    def __init__(self, backend: GGMLBackend, file: GGUFFile) -> None:
        self.backend = backend
        self.file = file
        n = len(file.tensors) * 2 + 8
        params = g.ggml_init_params(
            mem_size=g.ggml_tensor_overhead() * n, mem_buffer=None, no_alloc=True
        )
        self._meta = g.ggml_init(params)
        self._slots: dict[tuple[str, bool], _Slot] = {}
        self._buffers: list[object] = []
        self._contexts: list[object] = []
        self.loaded = False
        self.bytes_by_buffer_type: dict[str, int] = {}
        # Graphs need room for every op of every layer: scale the scheduler's node budget.
        backend.graph_nodes = max(backend.graph_nodes, 16 * len(file.tensors) + 1024)

    def has(self, name: str) -> bool:
        return name in self.file.tensors

    def get(
        self, name: str, alt: str | None = None, matmul: bool | None = None
    ) -> GGMLTensor | None:
        """The tensor `name` (else `alt`), or None if the file has neither.

        matmul: whether the tensor is the weight of a matrix multiplication; None infers it
        (two or more dimensions, and not the token embedding).
        """
        resolved = name if name in self.file.tensors else alt
        if resolved is None or resolved not in self.file.tensors:
            return None
        info = self.file.tensors[resolved]
        if matmul is None:
            matmul = len(info.shape) >= 2 and resolved != "token_embd.weight"
        key = (resolved, matmul)
        slot = self._slots.get(key)
        if slot is None:
            if self.loaded:
                raise RuntimeError("weights were requested after load()")
            slot = self._new_slot(info, matmul)
            self._slots[key] = slot
        return slot.tensor

    def require(self, name: str, alt: str | None = None, matmul: bool | None = None) -> GGMLTensor:
        t = self.get(name, alt, matmul)
        if t is None:
            arch = self.file.architecture or "this"
            raise MissingTensorError(
                f"{self.file.path.name} lacks tensor '{name}', which the {arch} architecture "
                "needs; the file may be damaged or converted for a different program"
            )
        return t

    def _new_slot(self, info: TensorInfo, matmul: bool) -> _Slot:
        if info.type_id not in _SUPPORTED_TYPES:
            raise GGUFError(
                f"{self.file.path.name}: tensor '{info.name}' has type {info.type_name}, which "
                "this engine's ggml cannot compute with"
            )
        ne = list(info.shape) + [1] * (4 - len(info.shape))
        p = g.ggml_new_tensor_4d(self._meta, info.type_id, ne[0], ne[1], ne[2], ne[3])
        g.ggml_set_name(p, info.name.encode()[:63])
        return _Slot(info, GGMLTensor(p, self), matmul)

    # -- loading ------------------------------------------------------------------------
    def load(self, progress: ProgressFn | None = None) -> None:
        """Allocate buffers for every requested tensor and copy the data in."""
        if self.loaded:
            return
        groups: dict[int, list[_Slot]] = {}
        bufts: dict[int, object] = {}
        extra = _extra_buffer_types()
        for slot in self._slots.values():
            slot.buft = self._choose_buffer_type(slot, extra)
            key = int(ctypes.cast(slot.buft, ctypes.c_void_p).value or 0)  # type: ignore[arg-type]
            groups.setdefault(key, []).append(slot)
            bufts[key] = slot.buft

        for key, slots in groups.items():
            params = g.ggml_init_params(
                mem_size=g.ggml_tensor_overhead() * (len(slots) + 1), mem_buffer=None, no_alloc=True
            )
            ctx = g.ggml_init(params)
            self._contexts.append(ctx)
            for slot in slots:
                # Move the handle's tensor into a context owned by this buffer type.
                src = slot.tensor.ptr
                p = g.ggml_dup_tensor(ctx, src)
                g.ggml_set_name(p, src.contents.name)  # type: ignore[attr-defined]
                slot.tensor._p = p
            buf = g.ggml_backend_alloc_ctx_tensors_from_buft(ctx, bufts[key])
            if not buf:
                need = sum(s.info.nbytes for s in slots)
                raise OutOfMemoryError(
                    f"not enough memory for the model weights ({need / 2**20:.0f} MiB)", needed=need
                )
            g.ggml_backend_buffer_set_usage(buf, g.GGML_BACKEND_BUFFER_USAGE_WEIGHTS)
            self._buffers.append(buf)
            name = g.ggml_backend_buft_name(bufts[key]).decode()
            self.bytes_by_buffer_type[name] = self.bytes_by_buffer_type.get(name, 0) + int(
                g.ggml_backend_buffer_get_size(buf)
            )

        raw = np.frombuffer(self.file._mm, dtype=np.uint8)  # read-only view of the map
        base = raw.ctypes.data
        total = sum(s.info.nbytes for s in self._slots.values()) or 1
        done = 0
        for slot in sorted(self._slots.values(), key=lambda s: s.info.offset):
            g.ggml_backend_tensor_set(slot.tensor.ptr, base + slot.info.offset, 0, slot.info.nbytes)
            done += slot.info.nbytes
            if progress is not None:
                progress(done / total)
        del raw
        self.loaded = True

    def _choose_buffer_type(self, slot: _Slot, extra: list[object]) -> object:
        if slot.matmul and extra and len(slot.info.shape) == 2:
            for buft in extra:
                if _supports_matmul(buft, slot.tensor):
                    return buft
        return self.backend.cpu_buffer_type

    @property
    def nbytes(self) -> int:
        return sum(self.bytes_by_buffer_type.values())

    def close(self) -> None:
        for buf in self._buffers:
            g.ggml_backend_buffer_free(buf)
        self._buffers.clear()
        for ctx in self._contexts:
            g.ggml_free(ctx)
        self._contexts.clear()
        if self._meta:
            g.ggml_free(self._meta)
            self._meta = None


_ExtraBuftsFn = ctypes.CFUNCTYPE(ctypes.POINTER(ctypes.c_void_p), ctypes.c_void_p)


def _extra_buffer_types() -> list[object]:
    """The CPU device's extra buffer types (the weight repacking ones), possibly none."""
    dev = g.ggml_backend_dev_by_type(g.GGML_BACKEND_DEVICE_TYPE_CPU)
    if not dev:
        return []
    reg = g.ggml_backend_dev_backend_reg(dev)
    addr = g.ggml_backend_reg_get_proc_address(reg, b"ggml_backend_dev_get_extra_bufts")
    if not addr:
        return []
    arr = _ExtraBuftsFn(addr)(dev)
    out: list[object] = []
    i = 0
    while arr and arr[i]:
        out.append(arr[i])
        i += 1
    return out


def _supports_matmul(buft: object, weight: GGMLTensor) -> bool:
    """Whether ggml can multiply by `weight` when it lives in `buft` (llama.cpp's probe)."""
    params = g.ggml_init_params(
        mem_size=g.ggml_tensor_overhead() * 4, mem_buffer=None, no_alloc=True
    )
    ctx = g.ggml_init(params)
    try:
        w = g.ggml_dup_tensor(ctx, weight.ptr)
        ne = weight.ne
        b = g.ggml_new_tensor_4d(ctx, g.GGML_TYPE_F32, ne[0], 512, ne[2], ne[3])
        op = g.ggml_mul_mat(ctx, w, b)
        buf = g.ggml_backend_buft_alloc_buffer(buft, 0)
        try:
            w.contents.buffer = ctypes.cast(buf, ctypes.c_void_p).value
            dev = g.ggml_backend_buft_get_device(buft)
            return bool(g.ggml_backend_dev_supports_op(dev, op))
        finally:
            w.contents.buffer = None
            g.ggml_backend_buffer_free(buf)
    finally:
        g.ggml_free(ctx)
