"""Hearth's CPU kernel for routed experts' products (`ggml_mul_mat_id`), see `_kernels.c`.

A prompt's tokens each choose a few experts of a layer (Qwen3-30B-A3B: 8 of 128), so every
expert multiplies the rows of the tokens that chose it, about 16 rows each in a 256-token
prompt. ggml's mul_mat_id computes that with its one-row dot product, weight row by row; the
many-rows code of Hearth's kernel (ggml_kernels.py) computes each expert's rows together.
`ExpertsKernel.mul_mat_id` builds two nodes: the activations quantized once (the gate and up
products of a layer read the same rows and share that node), then every chosen expert times
its rows, up to 8 rows by the few-rows code, more by the many-rows code. At Qwen3-30B-A3B's
expert sizes (128 experts, 8 per token, [2048, 768] and [768, 2048]), on one core of this
project's Xeon (AVX-512; bench/expert_rows.py), one product for a 256-token prompt takes
50-57 ms against ggml's 110-122 (its repacked Q4_K: 104); 64 tokens 22-24 ms against 34-41,
16 tokens 6-8 ms against 8-10.

Every element is computed as ggml's dot product computes it (the kernel's contract), so the
numbers are ggml's own and a row's do not depend on the other rows in its batch or on how
the tokens are routed. `ExpertsKernel.for_backend` checks that at load as the dense kernel's
check does: ggml's mul_mat_id and the kernel on random experts, routes that give experts
0, 1, few and many rows and activations shared by the chosen experts or one row each, on
every code path the CPU has; a type is used on the best path that agrees bit for bit.
When most experts get a row or none (decoding: below `MIN_ROWS_PER_EXPERT` rows per expert),
ggml's dot product is as fast, and those products stay ggml's.
"""

from __future__ import annotations

import ctypes
import logging
from typing import TYPE_CHECKING, Any

import ggml as g
import numpy as np

from .ggml_kernels import (
    ISA_AVX2,
    ISA_AVX512,
    FewRowsKernel,
    random_blocks,
    same_bits,
    trial_path,
)
from .tensor import DType

if TYPE_CHECKING:
    from .api import Backend

__all__ = ["ExpertsKernel", "MIN_ROWS_PER_EXPERT"]

_log = logging.getLogger("hearth.kernels")

# Products go to the kernel from this many (slot, token) rows per expert on average (at 8 of
# 128 experts: from 16 tokens). Below, most experts have one row, for which ggml's dot product
# is 10-25% faster (bench/expert_rows.py); from there on the kernel is (16 tokens: 1.3x, 64:
# 1.5x, 256: 2x on one core), more so when tokens favour some experts, as they do.
MIN_ROWS_PER_EXPERT = 1
# Weight types (weights per block, bytes per block) and their activations' block bytes.
_BLOCKS = {
    DType.Q4_K: (256, 144, 292),
    DType.Q6_K: (256, 210, 292),
    DType.Q8_0: (32, 34, 34),
    DType.Q5_0: (32, 22, 34),
    DType.Q4_0: (32, 18, 34),
}
_K_TYPES = frozenset({DType.Q4_K, DType.Q6_K})


def _path_takes(dtype: DType, isa: int) -> bool:
    """Q8_0 on the AVX-512 path only (see the kernel's many-rows code for 32-weight blocks)."""
    return dtype != DType.Q8_0 or isa >= ISA_AVX512


class ExpertsKernel:
    """The kernel as two ggml custom ops, for the weight types it was verified on."""

    def __init__(self, lib: ctypes.CDLL) -> None:
        self._lib = lib
        addr = {
            name: ctypes.cast(getattr(lib, name), ctypes.c_void_p).value or 0
            for name in ("hearth_quantize_rows", "hearth_mul_mat_id")
        }
        self._quantize = g.ggml_custom_op_t(addr["hearth_quantize_rows"])
        self._product = g.ggml_custom_op_t(addr["hearth_mul_mat_id"])
        self.isa: dict[DType, int] = {}  # enabled types, each with its code path

    @classmethod
    def for_backend(cls, backend: Backend, rows: FewRowsKernel | None) -> ExpertsKernel | None:
        """The kernel, or None where it cannot be used: `rows` (the dense kernel, its checks
        passed) is None, or no type agrees with ggml. The check runs once per process."""
        if rows is None:
            return None
        key = (id(rows), rows.best_isa)
        if key not in _checked:
            _checked.clear()
            _checked[key] = cls._checked_on(backend, rows)
        return _checked[key]

    @classmethod
    def _checked_on(cls, backend: Backend, rows: FewRowsKernel) -> ExpertsKernel | None:
        kernel = cls(rows.library)
        for dtype, isa in rows.isa.items():
            paths = [p for p in (ISA_AVX512, ISA_AVX2) if p <= isa and _path_takes(dtype, p)]
            for path in paths:
                if kernel._agrees_with_ggml(backend, dtype, path):
                    kernel.isa[dtype] = path
                    break
                _log.warning(
                    "Hearth's %s experts' kernel (path %d) differs from ggml here; not used",
                    dtype.name,
                    path,
                )
        return kernel if kernel.isa else None

    def using(self, isa: int) -> ExpertsKernel:
        """A copy that runs every enabled type it can on code path `isa` (for checks and
        tests; Q8_0 only on AVX-512)."""
        if isa not in (ISA_AVX2, ISA_AVX512) or isa > max(self.isa.values()):
            raise ValueError(f"code path {isa} is not enabled here")
        other = ExpertsKernel(self._lib)
        other.isa = {t: isa for t in self.isa if _path_takes(t, isa)}
        return other

    def takes(self, dtype: DType, tokens: int, used: int, experts: int) -> bool:
        """Whether the products of `tokens` tokens choosing `used` of `experts` experts of
        `dtype` go to the kernel: two tokens or more, MIN_ROWS_PER_EXPERT rows per expert."""
        return dtype in self.isa and tokens >= 2 and tokens * used >= MIN_ROWS_PER_EXPERT * experts

    def applies(self, experts: Any, b: Any, ids: Any) -> bool:
        """Whether `ggml_mul_mat_id(experts, b, ids)` (ctypes tensor pointers) can be this
        kernel: plain blocks in host memory, F32 activations, I32 ids, enough tokens (`takes`)."""
        w, x, i = experts.contents, b.contents, ids.contents
        if w.type not in self.isa:
            return False
        per_block, block_bytes, _ = _BLOCKS[DType(w.type)]
        return (
            self.takes(DType(w.type), i.ne[1], i.ne[0], w.ne[2])
            and w.nb[0] == block_bytes
            and (not w.buffer or g.ggml_backend_buffer_is_host(w.buffer))
            and w.ne[0] % per_block == 0
            and w.ne[3] == 1
            and x.type == DType.F32
            and x.nb[0] == 4
            and x.ne[0] == w.ne[0]
            and x.ne[2] == i.ne[1]
            and x.ne[3] == 1
            and i.type == DType.I32
            and i.ne[2] == i.ne[3] == 1
        )

    @staticmethod
    def activation_format(dtype: DType) -> int:
        """The activations' block bytes for `dtype` weights (Q8_K 292, Q8_0 34): products
        of weights with the same format can share quantized activations."""
        return _BLOCKS[dtype][2]

    def quantize(self, ctx: Any, dtype: DType, b: Any) -> Any:
        """A node holding activations `b` [k, nx, n] quantized as products with `dtype`
        weights take them (I8 rows of Q8_K or Q8_0 blocks)."""
        per_block, _, act_bytes = _BLOCKS[dtype]
        ne = b.contents.ne
        args = (ctypes.POINTER(g.ggml_tensor) * 1)(b)
        return g.ggml_custom_4d(
            ctx, g.GGML_TYPE_I8, ne[0] // per_block * act_bytes, ne[1], ne[2], 1, args, 1,
            self._quantize, g.GGML_N_TASKS_MAX, ctypes.c_void_p(int(dtype)),
        )  # fmt: skip

    def mul_mat_id(self, ctx: Any, experts: Any, quantized: Any, ids: Any) -> Any:
        """A node equal to `ggml_mul_mat_id(ctx, experts, b, ids)`, `quantized` being
        `quantize(ctx, experts' type, b)`."""
        args = (ctypes.POINTER(g.ggml_tensor) * 3)(experts, quantized, ids)
        dtype = DType(experts.contents.type)
        m, used, n = experts.contents.ne[1], ids.contents.ne[0], ids.contents.ne[1]
        isa = ctypes.c_void_p(self.isa.get(dtype, ISA_AVX2))
        return g.ggml_custom_4d(
            ctx, g.GGML_TYPE_F32, m, used, n, 1, args, 3, self._product, g.GGML_N_TASKS_MAX, isa
        )

    def _agrees_with_ggml(self, backend: Backend, dtype: DType, isa: int) -> bool:
        """Kernel (on code path `isa`) and ggml's mul_mat_id give equal bits: 40 tokens
        choosing 3 of 11 experts, which get 40 rows (every token), 31, 17, 9, 8, 5, 4, 3, 2,
        1 and none (each of the kernel's cases), in mixed slots (a token may choose an expert
        twice); activations shared by a token's experts, or one row per expert."""
        rng = np.random.default_rng(int(dtype) + 100)
        per_block = _BLOCKS[dtype][0]
        k, m, n_expert, used, n = 2 * per_block, 37, 11, 3, 40
        weights = random_blocks(dtype, m * n_expert, k, rng)
        counts = [31, 17, 9, 8, 5, 4, 3, 2, 1]
        others = rng.permutation(np.repeat(np.arange(1, 10), counts)).reshape(n, 2)
        ids = np.concatenate([np.zeros((n, 1), np.int64), others], axis=1)
        ids = np.take_along_axis(ids, rng.permuted(np.tile(np.arange(used), (n, 1)), axis=1), 1)
        ids = ids.astype(np.int32)
        ctx = backend.new_context(32)
        try:
            with trial_path(self.isa, dtype, isa):
                w = ctx.input(dtype, [k, m, n_expert], weights)
                it = ctx.input(DType.I32, [used, n], ids)
                pairs = []
                for nx in (1, used):
                    x = rng.standard_normal((n, nx, k)).astype(np.float32)
                    xt = ctx.input(DType.F32, [k, nx, n], x)
                    p = (w.ptr, xt.ptr, it.ptr)  # type: ignore[attr-defined]
                    q = self.quantize(ctx._ctx, dtype, xt.ptr)  # type: ignore[attr-defined]
                    ours = ctx._t(self.mul_mat_id(ctx._ctx, p[0], q, p[2]))  # type: ignore[attr-defined]
                    theirs = ctx._t(g.ggml_mul_mat_id(ctx._ctx, *p))  # type: ignore[attr-defined]
                    pairs.append((ours, theirs))
                return same_bits(ctx, pairs)
        finally:
            ctx.close()


# The check's outcome for the process's dense kernel (one entry).
_checked: dict[tuple[int, int], ExpertsKernel | None] = {}
