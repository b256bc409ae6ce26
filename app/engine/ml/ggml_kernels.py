"""Hearth's own CPU kernel for quantized weights times several rows (see `_kernels.c`).

Few rows: decoding several sequences together multiplies every weight matrix by 2..8
activation rows. ggml's kernels for that case cost about 2.5x one row on two cores; ours
(Q8_0, Q5_0, Q4_0, Q4_K, Q6_K weights) decodes each weight block once for up to four rows,
and with it four streams of Gemma 3 270M decode at 2.1-2.5x the tokens per second of one
(ggml's: 1.7x).

Many rows: prompt evaluation multiplies by hundreds of rows. For K-quants (Q4_K, Q6_K) ggml
computes one weight row and row at a time, and llama.cpp's faster repacked Q4_K kernel is not
batch-invariant; for Q8_0/Q5_0/Q4_0 it uses llamafile's sgemm. Ours takes any number of rows
of K-quants and 12 or more rows of the 32-weight block types (Q8_0 on AVX-512 only), on an
AVX-512 VNNI or an AVX2 code path. At 512 rows on 2 cores (AMD Zen 5; bench/kernel_rows.py):
Q4_K 1024x640 0.90 ms (ggml 3.7 ms, ggml repacked 1.35 ms), Q4_K 2048x640 1.8 ms (6.9,
repacked 2.7), Q6_K 2048x640 1.9 ms (7.2), Q5_0 640x2048 2.3 ms (sgemm 6.0). The AVX2 path
takes about twice as long; against an AVX2-only build of ggml it is still 1.3x its repacked
Q4_K and 2x its Q5_0 sgemm. Gemma 3 270M evaluates a 512-token prompt at about 1.65x
llama.cpp's speed (0.8x with ggml's kernels).

The kernel computes every element exactly as ggml's own dot product does, so the numbers do
not change (they stay bit-identical to llama.cpp's, and a row's result does not depend on
the rest of its batch). That is not taken on trust: `FewRowsKernel.for_backend` runs the
kernel and ggml's `mul_mat` on random weights of every type it supports, for row counts
covering each code path's cases (`_CHECK_ROWS`), on every code path the CPU has (AVX-512
and AVX2), and enables a type, on the best path that agrees, only where all results are
equal (about 0.05 s on two cores). Where the extension is missing, the CPU lacks
AVX2/FMA/F16C, the check fails, or `HEARTH_CPU_KERNELS=0` is set, graphs use ggml's mul_mat
as before; `HEARTH_CPU_KERNELS=avx2` keeps the kernel to its AVX2 code. Routed experts'
products (`mul_mat_id`) use the same code through `ggml_experts.py`, checked there likewise.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import ggml as g
import numpy as np

from ... import env
from .ggml_lib import load_extension
from .tensor import DType

if TYPE_CHECKING:
    from .api import Backend

__all__ = [
    "FewRowsKernel",
    "FEW_ROWS",
    "MANY_ROWS",
    "MANY_FROM_32",
    "ISA_AVX2",
    "ISA_AVX512",
    "takes",
    "random_blocks",
    "same_bits",
    "trial_path",
]

_log = logging.getLogger("hearth.kernels")

MIN_ROWS = 2  # one row is ggml's vec_dot already, with nothing to share...
# ...except on a weight matrix this large, which streams from memory at every token (an output
# matrix over a big vocabulary): the kernel's prefetching reads it faster than ggml's vec_dot
# (Gemma 3's 168 MB output matrix times one row: 6.2 -> 5.2 ms on 2 cores, decoding +6%).
LONE_ROW_BYTES = 32 << 20
FEW_ROWS = 8  # the few-rows code's limit (for K-quants on AVX2: 11)
MANY_ROWS = 1 << 16  # the many-rows code's: none to speak of (a prompt's batch is far less)
# 32-weight block types: the many-rows code from this many rows (from 9 to 11, ggml's tiled
# sgemm is as fast).
MANY_FROM_32 = 12
# Weight types: (weights per block, bytes per block).
_BLOCKS = {
    DType.Q8_0: (32, 34),
    DType.Q5_0: (32, 22),
    DType.Q4_0: (32, 18),
    DType.Q4_K: (256, 144),
    DType.Q6_K: (256, 210),
}
_K_TYPES = frozenset({DType.Q4_K, DType.Q6_K})
_Q8_K = 15  # ggml's activation type for the K types (not a weight type Hearth names)
# The C side's cases and calling convention (hearth_kernels_abi): a build of other sources
# would abort on a case it does not know, so it is not used.
_ABI = 3
# The kernel's code paths (the C side's numbers), chosen per weight type at load: AVX2, or
# AVX-512 (F, BW, VL, VNNI) for more than a few rows.
ISA_AVX2 = 1
ISA_AVX512 = 2
_ISA_NAMES = {ISA_AVX2: "AVX2", ISA_AVX512: "AVX-512"}
# Activation row counts of the check at load (those a path takes): every few-rows count,
# the few-rows code's three column groups (K-quants up to 11 rows on AVX2), then the
# many-rows code's cases: a partial and a full 16-row vector, a short 8-row one (from 17),
# threads sharing the weight rows (under 32 rows each) or the activation rows.
_CHECK_ROWS = (*range(1, 13), 16, 17, 24, 33, 64)


def takes(dtype: DType, isa: int, n: int, weight_bytes: int = 0) -> bool:
    """Whether the kernel multiplies weights of `dtype` (`weight_bytes` in all) by `n`
    activation rows on code path `isa`: one row only for weights of LONE_ROW_BYTES or more;
    K-quants from 2 rows on; the 32-weight block types 2..8 rows, and from MANY_FROM_32 on,
    except Q8_0 on AVX2 (there the exact AVX2 form would need ggml's own sign trick, and
    ggml's tiled sgemm does as well)."""
    if n == 1:
        return weight_bytes >= LONE_ROW_BYTES
    if not MIN_ROWS <= n <= MANY_ROWS:
        return False
    if dtype in _K_TYPES or n <= FEW_ROWS:
        return True
    return (isa >= ISA_AVX512 or dtype != DType.Q8_0) and n >= MANY_FROM_32


def _load_library() -> ctypes.CDLL | None:
    lib = load_extension(
        "hearth.engine.ml._kernels", "hearth_kernels_abi", _ABI, "Hearth's CPU kernels",
        "ggml's mul_mat is used",
    )  # fmt: skip
    if lib is None:
        return None
    lib.hearth_kernels_supported.restype = ctypes.c_int
    lib.hearth_kernels_isa.restype = ctypes.c_int
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

    def __init__(self, lib: ctypes.CDLL, best_isa: int) -> None:
        self._lib = lib
        address = ctypes.cast(lib.hearth_mul_mat_few, ctypes.c_void_p).value or 0
        self._fn = g.ggml_custom_op_t(address)
        self.best_isa = best_isa  # the best code path this CPU (and the settings) allow
        # Enabled weight types, each with the code path its check passed on.
        self.isa: dict[DType, int] = {}

    @property
    def types(self) -> set[DType]:
        return set(self.isa)

    @property
    def library(self) -> ctypes.CDLL:
        """The loaded extension (its experts' entry points: ggml_experts.py)."""
        return self._lib

    @classmethod
    def for_backend(cls, backend: Backend) -> FewRowsKernel | None:
        """The kernel, or None where it cannot be used. The check runs once per process (on
        the first backend); `HEARTH_CPU_KERNELS=0` turns the kernel off, `=avx2` keeps it to
        its AVX2 code paths."""
        if env.cpu_kernels() is env.CpuKernels.OFF:
            return None
        global _checked
        if _checked is _UNCHECKED:
            _checked = cls._checked_on(backend)
        return _checked  # type: ignore[return-value]

    @classmethod
    def _checked_on(cls, backend: Backend) -> FewRowsKernel | None:
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
        best = lib.hearth_kernels_isa()
        if env.cpu_kernels() is env.CpuKernels.AVX2:
            best = min(best, ISA_AVX2)
        if best < ISA_AVX2:
            return None
        kernel = cls(lib, best)
        # Every code path the CPU has is checked (a type falls back to AVX2 if its AVX-512
        # path disagrees); the best that agrees is used.
        paths = [isa for isa in (ISA_AVX512, ISA_AVX2) if isa <= best]
        for dtype in _BLOCKS:
            agreeing = [isa for isa in paths if kernel._agrees_with_ggml(backend, dtype, isa)]
            for isa in paths:
                if isa not in agreeing:
                    _log.warning(
                        "Hearth's %s kernel (%s path) differs from ggml here; path not used",
                        dtype.name,
                        _ISA_NAMES[isa],
                    )
            if agreeing:
                kernel.isa[dtype] = agreeing[0]
        return kernel if kernel.isa else None

    def using(self, isa: int) -> FewRowsKernel:
        """A copy that runs every enabled type on code path `isa` (for checks and tests)."""
        if not ISA_AVX2 <= isa <= self.best_isa:
            raise ValueError(f"code path {isa} is not available on this CPU")
        other = FewRowsKernel(self._lib, self.best_isa)
        other.isa = dict.fromkeys(self.isa, isa)
        return other

    def applies(self, a: Any, b: Any) -> bool:
        """Whether `ggml_mul_mat(a, b)` (ctypes tensor pointers) can be this kernel."""
        wa, xb = a.contents, b.contents
        if wa.type not in self.isa:
            return False
        dtype = DType(wa.type)
        per_block, block_bytes = _BLOCKS[dtype]
        return (
            wa.nb[0] == block_bytes  # plain blocks (not repacked)
            and (not wa.buffer or g.ggml_backend_buffer_is_host(wa.buffer))
            and xb.type == DType.F32
            and takes(dtype, self.isa[dtype], xb.ne[1], wa.nb[1] * wa.ne[1])
            and wa.ne[0] == xb.ne[0]
            and wa.ne[0] % per_block == 0
            and wa.ne[2] == wa.ne[3] == xb.ne[2] == xb.ne[3] == 1
            and xb.nb[0] == 4
        )

    def mul_mat(self, ctx: Any, a: Any, b: Any) -> Any:
        """A node equal to `ggml_mul_mat(ctx, a, b)`, computed by the kernel."""
        args = (ctypes.POINTER(g.ggml_tensor) * 2)(a, b)
        m, n = a.contents.ne[1], b.contents.ne[1]
        isa = ctypes.c_void_p(self.isa.get(DType(a.contents.type), ISA_AVX2))
        return g.ggml_custom_4d(
            ctx, g.GGML_TYPE_F32, m, n, 1, 1, args, 2, self._fn, g.GGML_N_TASKS_MAX, isa
        )

    def _agrees_with_ggml(self, backend: Backend, dtype: DType, isa: int) -> bool:
        """Kernel (on code path `isa`) and ggml's mul_mat give equal bits for each row count
        of `_CHECK_ROWS` the path takes (odd sizes too)."""
        rng = np.random.default_rng(int(dtype))
        k, m = 2 * _BLOCKS[dtype][0], 37
        counts = [n for n in _CHECK_ROWS if n == 1 or takes(dtype, isa, n)]
        ctx = backend.new_context(4 * len(counts) + 4)
        try:
            with trial_path(self.isa, dtype, isa):
                w = ctx.input(dtype, [k, m], random_blocks(dtype, m, k, rng))
                pairs = []
                for n in counts:
                    x = rng.standard_normal((n, k)).astype(np.float32)
                    xt = ctx.input(DType.F32, [k, n], x)
                    ours = ctx._t(self.mul_mat(ctx._ctx, w.ptr, xt.ptr))  # type: ignore[attr-defined]
                    theirs = ctx._t(g.ggml_mul_mat(ctx._ctx, w.ptr, xt.ptr))  # type: ignore[attr-defined]
                    pairs.append((ours, theirs))
                return same_bits(ctx, pairs)
        finally:
            ctx.close()


@contextlib.contextmanager
def trial_path(isa: dict[DType, int], dtype: DType, path: int) -> Iterator[None]:
    """A kernel's code path for `dtype` (its `isa` map) set to `path` while a load-time check
    runs, then put back."""
    saved = isa.get(dtype)
    isa[dtype] = path
    try:
        yield
    finally:
        if saved is None:
            isa.pop(dtype, None)
        else:
            isa[dtype] = saved


def same_bits(ctx: Any, pairs: list[tuple[Any, Any]]) -> bool:
    """Compute each (ours, ggml's) pair of nodes; whether every pair is bit-equal."""
    ctx.compute(*(t for pair in pairs for t in pair))
    return all(np.array_equal(a.numpy(), b.numpy()) for a, b in pairs)


_UNCHECKED = object()
_checked: object = _UNCHECKED
