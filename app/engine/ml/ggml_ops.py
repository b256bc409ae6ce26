"""The graph-building half of `GGMLContext`: every op of api.Context as a ggml node.

`GGMLOps` is the abstract base `GGMLContext` (ggml_context.py) derives from: each op adds one
node (or a few) to the no-alloc ggml context `_ctx` and wraps it in a `GGMLTensor` owned by
the graph; nothing is allocated or run here. Where an op's operands are in host memory and
Hearth's own CPU kernels (ggml_kernels.py, ggml_experts.py, ggml_attention.py) apply, the op
is that kernel's custom node instead of ggml's. The ops are the engine's per-token hot path:
one direct method each, no layers in between.

`GraphBackend` is what a graph needs of the backend it runs on (`GGMLBackend`, ggml.py, which
creates graphs and so cannot be imported here).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol

import ggml as g

from .api import Context, RopeOptions
from .ggml_attention import AttentionKernel
from .ggml_experts import ExpertsKernel
from .ggml_kernels import FewRowsKernel
from .ggml_lib import address as _addr
from .ggml_lib import device_of_buffer_type
from .ggml_tensor import GGMLTensor
from .placement import DevicePlacement
from .tensor import DType, Tensor

__all__ = ["GGMLOps", "GraphBackend"]


class GraphBackend(Protocol):
    """The backend a graph is built for and computes on (`GGMLBackend`)."""

    flash_attention: bool
    placement: DevicePlacement
    few_rows_kernel: FewRowsKernel | None
    experts_kernel: ExpertsKernel | None
    attention_kernel: AttentionKernel | None
    _allocated_graph: int  # the graph the scheduler holds allocated (its address), or 0

    def rows_apart(self, weight: Tensor) -> bool: ...

    def _compute(
        self, ctx: Any, gf: object, on_started: Callable[[], None] | None = None
    ) -> None: ...

    def _reserve(self, gf: object) -> None: ...

    def _forget_graph(self, gf: object | None) -> None: ...


def _on_cpu(p: Any) -> bool:
    """Whether tensor `p` lives in a CPU buffer (or is not allocated yet, in which case the
    scheduler allocates it on the CPU): where Hearth's CPU kernels may read it."""
    buf = p.contents.buffer
    return not buf or device_of_buffer_type(g.ggml_backend_buffer_get_type(buf)) == "CPU"


_POOL_OPS = {"avg": g.GGML_OP_POOL_AVG, "max": g.GGML_OP_POOL_MAX}


class GGMLOps(Context):
    """The ops of api.Context on a no-alloc ggml context; `GGMLContext` sets the state."""

    _backend: GraphBackend
    _ctx: Any  # the ggml context the nodes are made in
    # Activations quantized for the experts' kernel, by (tensor address, format).
    _quantized: dict[tuple[int, int], Any]

    @property
    def flash_attention_enabled(self) -> bool:
        return self._backend.flash_attention

    def _t(self, p: object) -> GGMLTensor:
        return GGMLTensor(p, self)

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
