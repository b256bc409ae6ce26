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

A model may come in two files: the text model and a projector (llama.cpp's `mmproj-*.gguf`,
the image encoder). The store then looks names up in both (a name in both is an error) and
maps each file on its own.

One condition is ours: a repacked layout is used only if it is batch-invariant, i.e. a row's
result is bit-identical whether it is multiplied alone or among others (checked at load on one
real tensor of each type, see invariance.py). Some repacked kernels (e.g. Q4_K's) round a row
differently in a 4-row block than alone, which would make a sequence's output depend on which
other requests share its batch; with the check, the same seed gives the same text under any
load. After loading, every (type, layout) pair the model multiplies by is probed the same way
and the outcome is registered with the backend, which routes products accordingly
(`GGMLBackend.rows_apart`) and reports it (`invariance_report`).
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable
from dataclasses import dataclass

import ggml as g
import numpy as np

from ..gguf import GGUFError, GGUFFile, TensorInfo
from .api import OutOfMemoryError
from .ggml import GGMLBackend
from .ggml_lib import address, device_of_buffer_type, layout_key, metadata_context
from .ggml_tensor import GGMLTensor
from .invariance import InvarianceReport, ProductRule, probe_experts, probe_product
from .tensor import DType

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
    file: GGUFFile
    buft: object = None


class WeightStore:
    """Tensor handles by GGUF name for one file, or a model file and its projector file (see
    the module docstring).

    Ownership: the store owns the weight buffers; `close()` frees them. Handles stay valid
    (as graph operands) until then. The files stay the caller's. Not thread-safe; used while
    a model loads.
    """

    def __init__(
        self, backend: GGMLBackend, file: GGUFFile, projector: GGUFFile | None = None
    ) -> None:
        self.backend = backend
        self.file = file
        self.projector = projector
        self.files = [file] if projector is None else [file, projector]
        self._owner: dict[str, GGUFFile] = {}  # tensor name -> the file holding it
        for f in self.files:
            for name in f.tensors:
                if name in self._owner:
                    raise GGUFError(
                        f"{file.path.name} and {f.path.name} both have tensor '{name}': the "
                        "model file has its own image encoder, so it needs no projector file"
                    )
                self._owner[name] = f
        n_tensors = len(self._owner)
        self._meta = metadata_context(n_tensors * 2 + 8)
        self._slots: dict[tuple[str, bool], _Slot] = {}
        self._buffers: list[object] = []
        self._contexts: list[object] = []
        self.loaded = False
        self.bytes_by_buffer_type: dict[str, int] = {}
        self.bytes_by_device: dict[str, int] = {}  # "CPU", "CUDA0", "RPC1": weight bytes
        self.product_rules: dict[str, ProductRule] = {}  # "Q4_K (CPU)" -> probed rule
        self.rejected_layouts: dict[str, ProductRule] = {}  # probed, not invariant, not used
        self.unprobed: set[str] = set()  # "Q4_K (CUDA0)": products on devices, not probed
        self._raw: list[np.ndarray] = []  # views of the file maps, while weights point in
        # Graphs need room for every op of every layer: scale the scheduler's node budget.
        backend.graph_nodes = max(backend.graph_nodes, 16 * n_tensors + 1024)
        # The output layer's index for the backend's placement (block tensors are blk.N.*).
        backend.blocks = file.metadata.uint("block_count", 0)

    def has(self, name: str) -> bool:
        return name in self._owner

    def get(
        self, name: str, alt: str | None = None, matmul: bool | None = None
    ) -> GGMLTensor | None:
        """The tensor `name` (else `alt`), or None if the file has neither.

        matmul: whether the tensor is the weight of a matrix multiplication; None infers it
        (two or more dimensions, and not the token embedding).
        """
        resolved = name if name in self._owner else alt
        if resolved is None or resolved not in self._owner:
            return None
        file = self._owner[resolved]
        info = file.tensors[resolved]
        if matmul is None:
            matmul = len(info.shape) >= 2 and resolved != "token_embd.weight"
        key = (resolved, matmul)
        slot = self._slots.get(key)
        if slot is None:
            if self.loaded:
                raise RuntimeError("weights were requested after load()")
            slot = self._new_slot(file, info, matmul)
            self._slots[key] = slot
        return slot.tensor

    def require(self, name: str, alt: str | None = None, matmul: bool | None = None) -> GGMLTensor:
        t = self.get(name, alt, matmul)
        if t is None:
            arch = self.file.architecture or "this"
            names = " and ".join(f.path.name for f in self.files)
            raise MissingTensorError(
                f"{names} {'lack' if self.projector else 'lacks'} tensor '{name}', which the "
                f"{arch} architecture needs; the file may be damaged or converted for a "
                "different program"
            )
        return t

    def _new_slot(self, file: GGUFFile, info: TensorInfo, matmul: bool) -> _Slot:
        if info.type_id not in _SUPPORTED_TYPES:
            raise GGUFError(
                f"{file.path.name}: tensor '{info.name}' has type {info.type_name}, which "
                "this engine's ggml cannot compute with"
            )
        ne = list(info.shape) + [1] * (4 - len(info.shape))
        p = g.ggml_new_tensor_4d(self._meta, info.type_id, ne[0], ne[1], ne[2], ne[3])
        g.ggml_set_name(p, info.name.encode()[:63])
        return _Slot(info, GGMLTensor(p, self), matmul, file)

    # -- loading ------------------------------------------------------------------------
    def load(self, progress: ProgressFn | None = None) -> None:
        """Give every requested tensor its memory: plain CPU tensors point straight into the
        memory-mapped file (no copy; the page cache holds them once however many handles
        share a tensor), repacked ones are copied into their own buffers."""
        if self.loaded:
            return
        # Read-only views of the maps, kept (with the maps) while weights point into them.
        raws = {id(f): np.frombuffer(f._mm, dtype=np.uint8) for f in self.files}
        self._raw = list(raws.values())
        extra = _extra_buffer_types()
        mapped: dict[int, list[_Slot]] = {}  # by file
        copied: dict[int, list[_Slot]] = {}
        bufts: dict[int, object] = {}
        for slot in self._slots.values():
            slot.buft = self._choose_buffer_type(slot, extra)
            if slot.buft is self.backend.cpu_buffer_type:
                mapped.setdefault(id(slot.file), []).append(slot)
            else:
                copied.setdefault(address(slot.buft), []).append(slot)
                bufts[address(slot.buft)] = slot.buft
        for slots in mapped.values():
            self._map(slots, slots[0].file, raws[id(slots[0].file)].ctypes.data)
        for key, slots in copied.items():
            self._allocate(slots, bufts[key])
        # Bring the files in now (with progress) rather than on the first token.
        total = sum(s.info.nbytes for s in self._slots.values()) or 1
        done = 0
        order = {id(f): i for i, f in enumerate(self.files)}
        for slot in sorted(self._slots.values(), key=lambda s: (order[id(s.file)], s.info.offset)):
            raw = raws[id(slot.file)]
            if slot.buft is self.backend.cpu_buffer_type:
                _touch(raw, slot.info.offset, slot.info.nbytes)
            else:
                g.ggml_backend_tensor_set(
                    slot.tensor.ptr, raw.ctypes.data + slot.info.offset, 0, slot.info.nbytes
                )
            done += slot.info.nbytes
            if progress is not None:
                progress(done / total)
        self.loaded = True
        self._probe_layouts()

    def _probe_layouts(self) -> None:
        """Probe each (type, layout) the model multiplies by (one tensor each; repacked ones
        were probed when chosen), register the rule with the backend and name it in the
        report."""
        # The smallest tensor of each kind is probed: the output matrix can be 100x larger.
        # Stacked experts (3 dimensions) are multiplied by mul_mat_id, probed on their own.
        used = self.file.metadata.uint("expert_used_count", 0)
        for slot in sorted(self._slots.values(), key=lambda s: s.info.nbytes):
            experts = len(slot.info.shape) == 3
            if not slot.matmul or not (len(slot.info.shape) == 2 or experts and used):
                continue
            kind = f"{slot.info.type_name}{' experts' if experts else ''}"
            if device_of_buffer_type(slot.buft) != "CPU":
                # On a GPU or an RPC worker: its kernels are the device's, not probed here.
                name = g.ggml_backend_buft_name(slot.buft).decode()
                self.unprobed.add(f"{kind} ({name})")
                continue
            buft = g.ggml_backend_buft_name(slot.buft).decode() if slot.buft else "CPU"
            if f"{kind} ({buft})" in self.product_rules:
                continue
            if experts:
                self.product_rules[f"{kind} ({buft})"] = probe_experts(
                    self.backend, slot.tensor, used
                )
                continue
            key = layout_key(slot.tensor.ptr)
            rule = self.backend.product_rules.get(key)
            if rule is None:
                rule = self.backend.product_rules[key] = probe_product(self.backend, slot.tensor)
            self.product_rules[f"{kind} ({buft})"] = rule

    def invariance_report(self) -> InvarianceReport:
        """What the probes found for this model's weights and the backend's attention."""
        return InvarianceReport(
            kv_padding=self.backend.cache_config.padding,
            attention_exact=self.backend.attention_exact,
            flash_attention=self.backend.flash_attention,
            products=dict(self.product_rules),
            rejected=dict(self.rejected_layouts),
        )

    def _rehome(self, slots: list[_Slot]) -> object:
        """Move the handles' tensors into a fresh context (one per buffer)."""
        ctx = metadata_context(len(slots) + 1)
        self._contexts.append(ctx)
        for slot in slots:
            src = slot.tensor.ptr
            p = g.ggml_dup_tensor(ctx, src)
            g.ggml_set_name(p, src.contents.name)  # type: ignore[attr-defined]
            slot.tensor._p = p
        return ctx

    def _map(self, slots: list[_Slot], file: GGUFFile, base: int) -> None:
        """Point `slots` (all in `file`, mapped at `base`) into the map of the file."""
        self._rehome(slots)
        start = file.data_offset
        buf = g.ggml_backend_cpu_buffer_from_ptr(base + start, file.size - start)
        if not buf:
            raise OutOfMemoryError("could not map the model file")
        g.ggml_backend_buffer_set_usage(buf, g.GGML_BACKEND_BUFFER_USAGE_WEIGHTS)
        self._buffers.append(buf)
        for slot in slots:
            status = g.ggml_backend_tensor_alloc(buf, slot.tensor.ptr, base + slot.info.offset)
            if status != g.GGML_STATUS_SUCCESS:
                raise GGUFError(f"{file.path.name}: tensor '{slot.info.name}' is misaligned")
        unique = {s.info.name: s.info.nbytes for s in slots}
        self._count("CPU (mapped)", sum(unique.values()), "CPU")

    def _allocate(self, slots: list[_Slot], buft: object) -> None:
        ctx = self._rehome(slots)
        buf = g.ggml_backend_alloc_ctx_tensors_from_buft(ctx, buft)
        if not buf:
            need = sum(s.info.nbytes for s in slots)
            raise OutOfMemoryError(
                f"not enough memory for the model weights ({need / 2**20:.0f} MiB)", needed=need
            )
        g.ggml_backend_buffer_set_usage(buf, g.GGML_BACKEND_BUFFER_USAGE_WEIGHTS)
        self._buffers.append(buf)
        self._count(
            g.ggml_backend_buft_name(buft).decode(),
            int(g.ggml_backend_buffer_get_size(buf)),
            device_of_buffer_type(buft),
        )

    def _count(self, name: str, nbytes: int, device: str) -> None:
        self.bytes_by_buffer_type[name] = self.bytes_by_buffer_type.get(name, 0) + nbytes
        self.bytes_by_device[device] = self.bytes_by_device.get(device, 0) + nbytes

    def _choose_buffer_type(self, slot: _Slot, extra: list[object]) -> object:
        placed = self.backend.buffer_type_for(slot.info.name, slot.matmul)
        if placed is not None:  # on the device the layout gives its layer
            return placed
        if slot.matmul and extra and len(slot.info.shape) == 2:
            for buft in extra:
                if _supports_matmul(buft, slot.tensor) and self._batch_invariant(buft, slot):
                    return buft
        return self.backend.cpu_buffer_type

    def _batch_invariant(self, buft: object, slot: _Slot) -> bool:
        """Whether `slot`'s type laid out in `buft` gives rows the same bits in any batch."""
        key = (slot.info.type_id, address(buft))
        rule = self.backend.product_rules.get(key)
        if rule is None:
            rule = _probe_in_layout(
                self.backend, buft, slot.tensor, slot.file.tensor_bytes(slot.info.name)
            )
            self.backend.product_rules[key] = rule
        if rule is not ProductRule.INVARIANT:  # the plain layout is used; it gets probed
            name = g.ggml_backend_buft_name(buft).decode()
            self.rejected_layouts[f"{slot.info.type_name} ({name})"] = rule
        return rule is ProductRule.INVARIANT

    @property
    def nbytes(self) -> int:
        """Bytes the weights occupy: mapped file data (counted once) plus repacked copies."""
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
        self._raw = []  # releases the file maps for closing


def _touch(raw: np.ndarray, offset: int, nbytes: int, page: int = 4096) -> None:
    """Read one byte per page so the mapped tensor is resident before the first token."""
    int(raw[offset : offset + nbytes : page].sum())


def _probe_in_layout(
    backend: GGMLBackend, buft: object, weight: GGMLTensor, data: memoryview
) -> ProductRule:
    """probe_product on a copy of `weight` laid out in `buft` (a temporary buffer)."""
    ctx = metadata_context(2)
    buf = None
    try:
        w = g.ggml_dup_tensor(ctx, weight.ptr)
        buf = g.ggml_backend_alloc_ctx_tensors_from_buft(ctx, buft)
        if not buf:
            return ProductRule.NOT_INVARIANT
        raw = np.frombuffer(data, dtype=np.uint8)
        g.ggml_backend_tensor_set(w, raw.ctypes.data, 0, raw.nbytes)
        return probe_product(backend, GGMLTensor(w, ctx))
    finally:
        if buf:
            g.ggml_backend_buffer_free(buf)
        g.ggml_free(ctx)


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
    ctx = metadata_context(4)
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
