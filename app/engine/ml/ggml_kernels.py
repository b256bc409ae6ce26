"""Hearth's own CPU kernel for quantized weights times a few rows (see `_kernels.c`).

Decoding several sequences together multiplies every weight matrix by 2..8 activation rows.
ggml's kernels for that case cost about 2.5x one row on two cores; ours (Q8_0, Q5_0, Q4_0,
Q4_K, Q6_K weights) decodes each weight block once for up to four rows, and with it four
streams of Gemma 3 270M decode at 2.1-2.5x the tokens per second of one (ggml's: 1.7x).

The kernel computes every element exactly as ggml's own dot product does, so the numbers do
not change (they stay bit-identical to llama.cpp's). That is not taken on trust:
`FewRowsKernel.for_backend` runs the kernel and ggml's `mul_mat` on random weights of every
type it supports, for every row count, and enables a type only where all results are equal.
Where the extension is missing, the CPU lacks AVX2/FMA/F16C, the check fails, or
`HEARTH_CPU_KERNELS=0` is set, graphs use ggml's mul_mat as before.
"""

from __future__ import annotations

import ctypes
import importlib.util
import logging
import os
from typing import TYPE_CHECKING, Any

import ggml as g
import numpy as np

from .api import DType

if TYPE_CHECKING:
    from .ggml import GGMLBackend

__all__ = ["FewRowsKernel", "MAX_ROWS", "random_blocks"]

_log = logging.getLogger("hearth.kernels")

MAX_ROWS = 8  # the kernel's limit on activation rows (the C side refuses more)
MIN_ROWS = 2  # one row is ggml's vec_dot already, with nothing to share
# Weight types: (weights per block, bytes per block).
_BLOCKS = {
    DType.Q8_0: (32, 34),
    DType.Q5_0: (32, 22),
    DType.Q4_0: (32, 18),
    DType.Q4_K: (256, 144),
    DType.Q6_K: (256, 210),
}
_Q8_K = 15  # ggml's activation type for the K types (not a weight type Hearth names)


def _load_library() -> ctypes.CDLL | None:
    spec = importlib.util.find_spec("hearth.engine.ml._kernels")
    if spec is None or not spec.origin:
        _log.debug("Hearth's CPU kernels are not built; ggml's mul_mat is used")
        return None
    try:
        lib = ctypes.CDLL(spec.origin)
    except OSError as exc:
        _log.warning("could not load Hearth's CPU kernels (%s); ggml's mul_mat is used", exc)
        return None
    lib.hearth_kernels_supported.restype = ctypes.c_int
    lib.hearth_kernels_init.restype = ctypes.c_int
    lib.hearth_kernels_init.argtypes = [ctypes.c_void_p] * 2 + [ctypes.c_size_t] * 5
    return lib


def _ggml_features_match() -> bool:
    """The kernel reproduces ggml's AVX2 dot products; ggml must have been built with them."""
    return all(getattr(g, f"ggml_cpu_has_{name}", lambda: 0)() for name in ("avx2", "fma", "f16c"))


def random_blocks(dtype: DType, rows: int, k: int, rng: np.random.Generator) -> np.ndarray:
    """Random but valid quantized weights [rows, row bytes] of a kernel type, for checks:
    any quant and scale bits, fp16 block scales of weights' size."""
    per_block, nbytes = _BLOCKS[dtype]
    blocks = rng.integers(0, 256, (rows * (k // per_block), nbytes), dtype=np.uint8)
    scale = rng.uniform(1e-3, 5e-2, (len(blocks), 2)).astype(np.float16).view(np.uint8)
    if dtype == DType.Q6_K:  # d is last
        blocks[:, -2:] = scale[:, :2]
    elif dtype == DType.Q4_K:  # d, dmin first
        blocks[:, :4] = scale.reshape(-1, 4)
    else:  # d first
        blocks[:, :2] = scale[:, :2]
    return blocks.reshape(rows, -1)


class FewRowsKernel:
    """The kernel as a ggml custom op, for the weight types it was verified on."""

    def __init__(self, lib: ctypes.CDLL) -> None:
        self._lib = lib
        address = ctypes.cast(lib.hearth_mul_mat_few, ctypes.c_void_p).value or 0
        self._fn = g.ggml_custom_op_t(address)
        self.types: set[DType] = set()

    @classmethod
    def for_backend(cls, backend: GGMLBackend) -> FewRowsKernel | None:
        """The kernel, or None where it cannot be used. The check runs once per process (on
        the first backend); `HEARTH_CPU_KERNELS=0` turns the kernel off."""
        if os.environ.get("HEARTH_CPU_KERNELS", "1") == "0":
            return None
        global _checked
        if _checked is _UNCHECKED:
            _checked = cls._checked_on(backend)
        return _checked  # type: ignore[return-value]

    @classmethod
    def _checked_on(cls, backend: GGMLBackend) -> FewRowsKernel | None:
        if not _ggml_features_match():
            return None
        lib = _load_library()
        if lib is None or not lib.hearth_kernels_supported():
            return None
        quantizers = [
            ctypes.cast(g.ggml_get_type_traits_cpu(t).contents.from_float, ctypes.c_void_p).value
            for t in (int(DType.Q8_0), _Q8_K)
        ]
        fields: Any = g.ggml_tensor  # ctypes field descriptors carry byte offsets
        offsets = [getattr(fields, name).offset for name in ("type", "ne", "nb", "src", "data")]
        if not lib.hearth_kernels_init(*quantizers, *offsets):
            return None
        kernel = cls(lib)
        for dtype in _BLOCKS:
            if kernel._agrees_with_ggml(backend, dtype):
                kernel.types.add(dtype)
            else:
                _log.warning("Hearth's %s kernel differs from ggml here; not used", dtype.name)
        return kernel if kernel.types else None

    def applies(self, a: Any, b: Any) -> bool:
        """Whether `ggml_mul_mat(a, b)` (ctypes tensor pointers) can be this kernel."""
        wa, xb = a.contents, b.contents
        if wa.type not in self.types:
            return False
        per_block, block_bytes = _BLOCKS[DType(wa.type)]
        return (
            wa.nb[0] == block_bytes  # plain blocks (not repacked)
            and (not wa.buffer or g.ggml_backend_buffer_is_host(wa.buffer))
            and xb.type == DType.F32
            and MIN_ROWS <= xb.ne[1] <= MAX_ROWS
            and wa.ne[0] == xb.ne[0]
            and wa.ne[0] % per_block == 0
            and wa.ne[2] == wa.ne[3] == xb.ne[2] == xb.ne[3] == 1
            and xb.nb[0] == 4
        )

    def mul_mat(self, ctx: Any, a: Any, b: Any) -> Any:
        """A node equal to `ggml_mul_mat(ctx, a, b)`, computed by the kernel."""
        args = (ctypes.POINTER(g.ggml_tensor) * 2)(a, b)
        m, n = a.contents.ne[1], b.contents.ne[1]
        return g.ggml_custom_4d(
            ctx, g.GGML_TYPE_F32, m, n, 1, 1, args, 2, self._fn, g.GGML_N_TASKS_MAX, None
        )

    def _agrees_with_ggml(self, backend: GGMLBackend, dtype: DType) -> bool:
        """Kernel and ggml's mul_mat give equal bits for 1..MAX_ROWS rows (odd sizes too)."""
        rng = np.random.default_rng(int(dtype))
        k, m = 2 * _BLOCKS[dtype][0], 37
        ctx = backend.new_context(8 * MAX_ROWS)
        try:
            w = ctx.input(dtype, [k, m], random_blocks(dtype, m, k, rng))
            pairs = []
            for n in range(1, MAX_ROWS + 1):
                x = ctx.input(DType.F32, [k, n], rng.standard_normal((n, k)).astype(np.float32))
                ours = ctx._t(self.mul_mat(ctx._ctx, w.ptr, x.ptr))  # type: ignore[attr-defined]
                theirs = ctx._t(g.ggml_mul_mat(ctx._ctx, w.ptr, x.ptr))  # type: ignore[attr-defined]
                pairs.append((ours, theirs))
            ctx.compute(*(t for pair in pairs for t in pair))
            return all(np.array_equal(a.numpy(), b.numpy()) for a, b in pairs)
        finally:
            ctx.close()


_UNCHECKED = object()
_checked: object = _UNCHECKED
