"""Hearth's fused F32 attention kernel for encoders (see `_attention.c`) as a ggml custom op.

`nn.full_attention` without a mask (a vision tower's self-attention) otherwise builds two
`mul_mat` nodes and a `soft_max` over `[n_kv, n_q, heads]` F32 scores. For Llama 3.2
Vision's 6432 rows of 80-float heads that costs about 7 s per layer on two cores (ggml's sgemm
spends most of Q K^T on horizontal sums over its inner size of 80, and each head's 165 MB of
scores goes through memory four times); the kernel keeps a block of 32 queries' scores in
cache and takes both products with broadcasts into vector lanes.

Used where the extension is built, the CPU has AVX-512 (F, DQ) and FMA, the operands are F32
and the value head size is a multiple of 16 up to 128; `HEARTH_CPU_KERNELS=0` turns it off
(as it does the quantized kernel), and so does `HEARTH_CPU_KERNELS=avx2` (an AVX2-only CPU's
code paths, for testing an AVX-512 machine as one). Elsewhere `full_attention` keeps ggml's
nodes. The result is F32 throughout; it differs from ggml's nodes by float rounding only
(another summation order), which the op tests bound.
"""

from __future__ import annotations

import ctypes
import logging
import struct
from typing import Any

import ggml as g

from ... import env
from .ggml_lib import load_extension
from .tensor import DType

__all__ = ["AttentionKernel"]

_log = logging.getLogger("hearth.kernels")
_ABI = 1
MAX_HEAD = 128  # value head sizes the kernel takes: multiples of 16 up to this


class AttentionKernel:
    """The loaded kernel; `for_process()` gives the one instance, or None where unusable."""

    def __init__(self, lib: ctypes.CDLL) -> None:
        address = ctypes.cast(lib.hearth_attention, ctypes.c_void_p).value or 0
        self._fn = g.ggml_custom_op_t(address)

    @classmethod
    def for_process(cls) -> AttentionKernel | None:
        # The kernel is AVX-512 only: `avx2` (an AVX2-only CPU's code paths) keeps ggml's nodes.
        if env.cpu_kernels() in (env.CpuKernels.OFF, env.CpuKernels.AVX2):
            return None
        global _loaded
        if _loaded is _UNLOADED:
            _loaded = cls._load()
        return _loaded  # type: ignore[return-value]

    @classmethod
    def _load(cls) -> AttentionKernel | None:
        lib = load_extension(
            "hearth.engine.ml._attention", "hearth_attention_abi", _ABI,
            "Hearth's attention kernel", "ggml's nodes are used",
        )  # fmt: skip
        if lib is None:
            return None
        lib.hearth_attention_supported.restype = ctypes.c_int
        if not lib.hearth_attention_supported():
            return None
        lib.hearth_attention_init.argtypes = [ctypes.c_size_t] * 4
        fields: Any = g.ggml_tensor  # ctypes field descriptors carry byte offsets
        lib.hearth_attention_init(*(getattr(fields, n).offset for n in ("ne", "nb", "src", "data")))
        return cls(lib)

    @staticmethod
    def takes(q: Any, k: Any, v: Any) -> bool:
        """Whether the kernel computes attention of these ctypes tensors (q `[d, heads,
        n_q]`, k `[d, heads, n_kv]`, v `[dv, heads, n_kv]`)."""
        qc, kc, vc = q.contents, k.contents, v.contents
        dv = vc.ne[0]
        return (
            qc.type == kc.type == vc.type == DType.F32
            and dv % 16 == 0
            and 0 < dv <= MAX_HEAD
            and qc.ne[0] == kc.ne[0]
            and qc.ne[1] == kc.ne[1] == vc.ne[1]
            and kc.ne[2] == vc.ne[2]
            and qc.ne[3] == kc.ne[3] == vc.ne[3] == 1
            and all(not t.buffer or g.ggml_backend_buffer_is_host(t.buffer) for t in (qc, kc, vc))
        )

    def attention(self, ctx: Any, q: Any, k: Any, v: Any, scale: float) -> Any:
        """The node `[dv, heads, n_q]` of softmax(scale q.k) v per head (see `takes`)."""
        qh = g.ggml_cont(ctx, g.ggml_permute(ctx, q, 0, 2, 1, 3))  # [d, n_q, heads]
        kt = g.ggml_cont(ctx, g.ggml_permute(ctx, k, 1, 2, 0, 3))  # [n_kv, d, heads]
        vh = g.ggml_cont(ctx, g.ggml_permute(ctx, v, 0, 2, 1, 3))  # [dv, n_kv, heads]
        args = (ctypes.POINTER(g.ggml_tensor) * 3)(qh, kt, vh)
        dv, heads, n_q = v.contents.ne[0], q.contents.ne[1], q.contents.ne[2]
        bits = ctypes.c_void_p(struct.unpack("<I", struct.pack("<f", scale))[0])
        return g.ggml_custom_4d(
            ctx, g.GGML_TYPE_F32, dv, heads, n_q, 1, args, 3, self._fn, g.GGML_N_TASKS_MAX, bits
        )


_UNLOADED = object()
_loaded: object = _UNLOADED
