"""The numpy reference backend's ops: what each `api.Context` op computes (`NumpyOps`).

Part of the numpy reference backend (see `reference.py` for the whole design). Each op checks
its operands as ggml does (ValueError or IndexError instead of an abort), then records its
result with `Graph._node` (a new tensor computed from its sources) or `Graph._alias` (a tensor
over an existing one's memory: a view, or an op that writes in place). Values are computed in
float64 and rounded once, to the result's element type.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from .api import RopeOptions
from .reference_tensor import (
    Graph,
    NumpyTensor,
    check_repeat,
    check_same_ne,
    contiguous_nb,
    element_dtype,
    ne4,
    numpy_tensor,
    tile,
)
from .tensor import DType, Tensor

__all__ = ["NumpyOps"]


def _gelu(x: np.ndarray) -> np.ndarray:
    return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x**3)))


_erf = np.frompyfunc(math.erf, 1, 1)


def _gelu_erf(x: np.ndarray) -> np.ndarray:
    erf = np.asarray(_erf(x / math.sqrt(2.0)), dtype=np.float64)
    return (0.5 * x * (1.0 + erf)).astype(x.dtype)


def _silu(x: np.ndarray) -> np.ndarray:
    with np.errstate(over="ignore"):
        return x / (1.0 + np.exp(-x))


def _softmax_rows(x: np.ndarray) -> np.ndarray:
    """Softmax along the last axis; rows that are all -inf give NaN, as ggml's soft_max does."""
    with np.errstate(invalid="ignore", over="ignore"):
        z = np.exp(x - x.max(axis=-1, keepdims=True))
        return z / z.sum(axis=-1, keepdims=True)


def _yarn_corr_dims(opts: RopeOptions) -> tuple[float, float]:
    """ggml_rope_yarn_corr_dims."""

    def corr_dim(n_rot: float) -> float:
        with np.errstate(divide="ignore"):
            ratio = np.log(np.float64(opts.original_context) / (n_rot * 2.0 * math.pi))
        return float(opts.dims * ratio / (2.0 * math.log(opts.base)))

    start = math.floor(corr_dim(opts.beta_fast)) if opts.original_context else -math.inf
    end = math.ceil(corr_dim(opts.beta_slow)) if opts.original_context else -math.inf
    return max(0.0, start), min(opts.dims - 1.0, end)


class NumpyOps(Graph):
    """The `api.Context` ops of `NumpyContext`, each recorded by `_node` or `_alias`."""

    # -- arithmetic -------------------------------------------------------------------------
    def add(self, a: Tensor, b: Tensor) -> NumpyTensor:
        x, y = numpy_tensor(a), numpy_tensor(b)
        check_repeat(y.ne, x.ne, "add")
        return self._node(x.dtype, x.ne, (x, y), lambda: x.values() + tile(y.values(), x.ne))

    def mul(self, a: Tensor, b: Tensor) -> NumpyTensor:
        x, y = numpy_tensor(a), numpy_tensor(b)
        check_repeat(y.ne, x.ne, "mul")
        return self._node(x.dtype, x.ne, (x, y), lambda: x.values() * tile(y.values(), x.ne))

    def scale(self, a: Tensor, s: float) -> NumpyTensor:
        x = numpy_tensor(a)
        return self._node(x.dtype, x.ne, (x,), lambda: x.values() * float(s))

    def scale_bias(self, a: Tensor, s: float, b: float) -> NumpyTensor:
        x = numpy_tensor(a)
        return self._node(x.dtype, x.ne, (x,), lambda: x.values() * np.float32(s) + np.float32(b))

    def div(self, a: Tensor, b: Tensor) -> NumpyTensor:
        x, y = numpy_tensor(a), numpy_tensor(b)
        check_repeat(y.ne, x.ne, "div")
        return self._node(x.dtype, x.ne, (x, y), lambda: x.values() / tile(y.values(), x.ne))

    def mul_mat(self, a: Tensor, b: Tensor, full_precision: bool = False) -> NumpyTensor:
        x, y = numpy_tensor(a), numpy_tensor(b)
        if x.ne[0] != y.ne[0] or y.ne[2] % x.ne[2] or y.ne[3] % x.ne[3]:
            raise ValueError(f"mul_mat: {list(x.shape)} cannot multiply {list(y.shape)}")
        r2, r3 = y.ne[2] // x.ne[2], y.ne[3] // x.ne[3]

        def fn() -> np.ndarray:
            w = np.repeat(np.repeat(x.values(), r3, axis=0), r2, axis=1)  # [b3, b2, m, k]
            return np.matmul(y.values(), np.swapaxes(w, -1, -2))  # [b3, b2, n, m]

        return self._node(DType.F32, (x.ne[1], y.ne[1], y.ne[2], y.ne[3]), (x, y), fn)

    def get_rows(self, a: Tensor, rows: Tensor) -> NumpyTensor:
        x, r = numpy_tensor(a), numpy_tensor(rows)
        if r.dtype != DType.I32:
            raise ValueError("get_rows: row indices must be I32")
        if x.ne[2] != r.ne[1] or x.ne[3] != r.ne[2] or r.ne[3] != 1:
            raise ValueError(f"get_rows: indices {list(r.shape)} do not fit {list(x.shape)}")

        def fn() -> np.ndarray:
            idx = r.values()[0]  # [r2, r1, k]
            if idx.size and (idx.min() < 0 or idx.max() >= x.ne[1]):
                raise IndexError(f"get_rows: a row index is outside 0..{x.ne[1] - 1}")
            i3 = np.arange(x.ne[3])[:, None, None]
            i2 = np.arange(x.ne[2])[None, :, None]
            return x.values()[i3, i2, idx]  # [a3, a2, k, n]

        dtype = DType.I32 if x.dtype == DType.I32 else DType.F32
        return self._node(dtype, (x.ne[0], r.ne[0], r.ne[1], r.ne[2]), (x, r), fn)

    def set_rows(self, dst: Tensor, src: Tensor, rows: Tensor) -> NumpyTensor:
        d, s, r = numpy_tensor(dst), numpy_tensor(src), numpy_tensor(rows)
        if r.dtype != DType.I32:
            raise ValueError("set_rows: row indices must be I32")
        if d.ne[0] != s.ne[0] or d.ne[2] != s.ne[2] or d.ne[3] != s.ne[3]:
            raise ValueError(f"set_rows: rows {list(s.shape)} do not fit {list(d.shape)}")
        if s.ne[1] != r.ne[0] or s.ne[2] % r.ne[1] or s.ne[3] % r.ne[2] or r.ne[3] != 1:
            raise ValueError(f"set_rows: indices {list(r.shape)} do not fit {list(s.shape)}")

        def run() -> None:
            out = d.array()
            values = s.values().astype(out.dtype)
            idx = r.values()[0]  # [r2, r1, k]
            if idx.size and (idx.min() < 0 or idx.max() >= d.ne[1]):
                raise IndexError(f"set_rows: a row index is outside 0..{d.ne[1] - 1}")
            for i3 in range(s.ne[3]):
                for i2 in range(s.ne[2]):
                    rows_of = idx[i3 % r.ne[2], i2 % r.ne[1]]
                    if len(np.unique(rows_of)) == len(rows_of):
                        out[i3, i2, rows_of] = values[i3, i2]
                    else:  # repeated rows: written in order, the last write wins (as ggml)
                        for j, row in enumerate(rows_of):
                            out[i3, i2, row] = values[i3, i2, j]

        return self._alias(d, d.ne, d.strides, d._offset, (d, s, r), run)

    # -- normalisation and activations ------------------------------------------------------
    def rms_norm(self, a: Tensor, eps: float) -> NumpyTensor:
        x = numpy_tensor(a)

        def fn() -> np.ndarray:
            v = x.values()
            return v / np.sqrt((v * v).mean(axis=-1, keepdims=True) + eps)

        return self._node(x.dtype, x.ne, (x,), fn)

    def norm(self, a: Tensor, eps: float) -> NumpyTensor:
        x = numpy_tensor(a)

        def fn() -> np.ndarray:
            v = x.values()
            v = v - v.mean(axis=-1, keepdims=True)
            return v / np.sqrt((v * v).mean(axis=-1, keepdims=True) + eps)

        return self._node(x.dtype, x.ne, (x,), fn)

    def soft_max(
        self,
        a: Tensor,
        mask: Tensor | None = None,
        scale: float = 1.0,
        sinks: Tensor | None = None,
    ) -> NumpyTensor:
        x = numpy_tensor(a)
        m = numpy_tensor(mask) if mask is not None else None
        sk = numpy_tensor(sinks) if sinks is not None else None
        if sk is not None and sk.ne[0] != x.ne[2]:
            raise ValueError(f"soft_max: sinks {list(sk.shape)} do not fit {list(x.shape)}")
        if m is not None and (
            m.ne[0] != x.ne[0] or m.ne[1] < x.ne[1] or x.ne[2] % m.ne[2] or x.ne[3] % m.ne[3]
        ):
            raise ValueError(f"soft_max: mask {list(m.shape)} does not fit {list(x.shape)}")

        def fn() -> np.ndarray:
            v = x.values() * float(scale)
            if m is not None:
                mv = m.values()[:, :, : x.ne[1], :]
                v = v + tile(mv, (x.ne[0], x.ne[1], x.ne[2], x.ne[3]))
            if sk is None:
                return _softmax_rows(v)
            sink = np.broadcast_to(sk.values().reshape(1, -1, 1, 1), (*v.shape[:3], 1))
            return _softmax_rows(np.concatenate([v, sink], axis=-1))[..., :-1]

        srcs = tuple(t for t in (x, m, sk) if t is not None)
        return self._node(DType.F32, x.ne, srcs, fn)

    def gelu(self, a: Tensor) -> NumpyTensor:
        x = numpy_tensor(a)
        return self._node(x.dtype, x.ne, (x,), lambda: _gelu(x.values()))

    def gelu_erf(self, a: Tensor) -> NumpyTensor:
        x = numpy_tensor(a)
        return self._node(x.dtype, x.ne, (x,), lambda: _gelu_erf(x.values()))

    def silu(self, a: Tensor) -> NumpyTensor:
        x = numpy_tensor(a)
        return self._node(x.dtype, x.ne, (x,), lambda: _silu(x.values()))

    def tanh(self, a: Tensor) -> NumpyTensor:
        x = numpy_tensor(a)
        return self._node(x.dtype, x.ne, (x,), lambda: np.tanh(x.values()))

    def geglu(self, gate: Tensor, up: Tensor) -> NumpyTensor:
        g, u = numpy_tensor(gate), numpy_tensor(up)
        check_same_ne(g, u, "geglu")
        return self._node(g.dtype, g.ne, (g, u), lambda: _gelu(g.values()) * u.values())

    def swiglu(self, gate: Tensor, up: Tensor) -> NumpyTensor:
        g, u = numpy_tensor(gate), numpy_tensor(up)
        check_same_ne(g, u, "swiglu")
        return self._node(g.dtype, g.ne, (g, u), lambda: _silu(g.values()) * u.values())

    def rope(
        self,
        a: Tensor,
        positions: Tensor,
        opts: RopeOptions,
        factors: Tensor | None = None,
    ) -> NumpyTensor:
        x, p = numpy_tensor(a), numpy_tensor(positions)
        f = numpy_tensor(factors) if factors is not None else None
        n_dims = opts.dims
        if p.dtype != DType.I32 or p.ne[0] != x.ne[2]:
            raise ValueError("rope: positions must be I32 with one per token (dimension 2)")
        if n_dims % 2 or n_dims > x.ne[0]:
            raise ValueError(f"rope: {n_dims} rotated dims do not fit head_dim {x.ne[0]}")
        half = n_dims // 2
        if f is not None and f.ne[0] < half:
            raise ValueError(f"rope: {half} frequency factors needed")

        def fn() -> np.ndarray:
            v = x.values()  # [a3, tokens, heads, head_dim]
            pos = p.values().reshape(-1)[: x.ne[2]].astype(np.float64)
            i = np.arange(half, dtype=np.float64)
            theta_extrap = pos[:, None] * opts.base ** (-2.0 * i / n_dims)[None, :]
            if f is not None:
                theta_extrap = theta_extrap / f.values().reshape(-1)[:half][None, :]
            theta = opts.scale * theta_extrap
            mscale = opts.attn_factor
            if opts.ext_factor != 0.0:
                low, high = _yarn_corr_dims(opts)
                ramp = (1.0 - np.clip((i - low) / max(0.001, high - low), 0.0, 1.0)) * (
                    opts.ext_factor
                )
                theta = theta * (1.0 - ramp) + theta_extrap * ramp
                mscale *= 1.0 + 0.1 * math.log(1.0 / opts.scale)
            cos = (np.cos(theta) * mscale)[None, :, None, :]
            sin = (np.sin(theta) * mscale)[None, :, None, :]
            out = v.copy()
            if opts.neox:
                x0, x1 = v[..., :half], v[..., half:n_dims]
                out[..., :half] = x0 * cos - x1 * sin
                out[..., half:n_dims] = x0 * sin + x1 * cos
            else:
                x0, x1 = v[..., 0:n_dims:2], v[..., 1:n_dims:2]
                out[..., 0:n_dims:2] = x0 * cos - x1 * sin
                out[..., 1:n_dims:2] = x0 * sin + x1 * cos
            return out

        srcs = (x, p) if f is None else (x, p, f)
        return self._node(x.dtype, x.ne, srcs, fn)

    def flash_attention(
        self,
        q: Tensor,
        k: Tensor,
        v: Tensor,
        mask: Tensor | None,
        scale: float,
        softcap: float = 0.0,
        sinks: Tensor | None = None,
    ) -> NumpyTensor:
        if sinks is not None:
            raise NotImplementedError("the numpy flash_attention has no sinks (use soft_max)")
        qt, kt, vt = numpy_tensor(q), numpy_tensor(k), numpy_tensor(v)
        mt = numpy_tensor(mask) if mask is not None else None
        d, tokens, heads, q3 = qt.ne
        if kt.ne[0] != d or vt.ne[1] != kt.ne[1] or vt.ne[2] != kt.ne[2] or heads % kt.ne[2]:
            raise ValueError(
                f"flash_attention: q {list(qt.shape)}, k {list(kt.shape)}, "
                f"v {list(vt.shape)} do not fit together"
            )
        if mt is not None and (mt.ne[0] != kt.ne[1] or mt.ne[1] < tokens):
            raise ValueError(f"flash_attention: mask {list(mt.shape)} does not fit")
        rep = heads // kt.ne[2]

        def fn() -> np.ndarray:
            qv = qt.values()  # [q3, heads, tokens, d]
            kv = np.repeat(kt.values(), rep, axis=1)  # [., heads, n_kv, d]
            vv = np.repeat(vt.values(), rep, axis=1)  # [., heads, n_kv, d_v]
            s = np.matmul(qv, np.swapaxes(kv, -1, -2)) * scale  # [q3, heads, tokens, n_kv]
            if softcap:
                s = softcap * np.tanh(s / softcap)
            if mt is not None:
                mv = mt.values()[:, :, :tokens, :]  # [m3, m2, tokens, n_kv]
                s = s + tile(mv, (s.shape[3], s.shape[2], s.shape[1], s.shape[0]))
            with np.errstate(invalid="ignore"):
                probs = _softmax_rows(s)
            probs = np.nan_to_num(probs, nan=0.0)  # a row that sees nothing gives zeros
            out = np.matmul(probs, vv)  # [q3, heads, tokens, d_v]
            return np.swapaxes(out, 1, 2)  # [q3, tokens, heads, d_v]

        srcs = (qt, kt, vt) if mt is None else (qt, kt, vt, mt)
        return self._node(DType.F32, (vt.ne[0], heads, tokens, q3), srcs, fn)

    def pool_2d(
        self, a: Tensor, kernel: int, stride: int | None = None, mode: str = "avg"
    ) -> NumpyTensor:
        x = numpy_tensor(a)
        if mode not in ("avg", "max"):
            raise ValueError(f"pool_2d: mode is 'avg' or 'max', not {mode!r}")
        s = kernel if stride is None else stride
        if kernel < 1 or s < 1 or kernel > x.ne[0] or kernel > x.ne[1]:
            raise ValueError(f"pool_2d: a {kernel}x{kernel} window does not fit {list(x.shape)}")
        ow, oh = (x.ne[0] - kernel) // s + 1, (x.ne[1] - kernel) // s + 1

        def fn() -> np.ndarray:
            v = x.values()  # [n, channels, h, w]
            out = np.empty((v.shape[0], v.shape[1], oh, ow))
            for i in range(oh):
                for j in range(ow):
                    win = v[:, :, i * s : i * s + kernel, j * s : j * s + kernel]
                    out[:, :, i, j] = win.mean(axis=(2, 3)) if mode == "avg" else win.max((2, 3))
            return out

        return self._node(DType.F32, (ow, oh, x.ne[2], x.ne[3]), (x,), fn)

    # -- layout -----------------------------------------------------------------------------
    def reshape(self, a: Tensor, *shape: int) -> NumpyTensor:
        x = numpy_tensor(a)
        ne = ne4(shape)
        if not x.is_contiguous():
            raise ValueError("reshape() needs a contiguous tensor (add ctx.cont())")
        if math.prod(ne) != math.prod(x.ne):
            raise ValueError(f"reshape: {list(x.shape)} has no {list(shape)} form")
        return self._alias(x, ne, contiguous_nb(element_dtype(x.dtype).itemsize, ne), x._offset)

    def view(
        self,
        a: Tensor,
        shape: Sequence[int],
        strides: Sequence[int] = (),
        offset: int = 0,
    ) -> NumpyTensor:
        x = numpy_tensor(a)
        n = len(shape)
        if len(strides) != n - 1:
            raise ValueError("view(): give one byte stride for each dimension after the first")
        ne = ne4(shape)
        nb = [element_dtype(x.dtype).itemsize, *(int(s) for s in strides)]
        while len(nb) < 4:
            nb.append(nb[-1] * ne[len(nb) - 1])
        return self._alias(x, ne, (nb[0], nb[1], nb[2], nb[3]), x._offset + int(offset))

    def permute(self, a: Tensor, *axes: int) -> NumpyTensor:
        x = numpy_tensor(a)
        ax = [int(i) for i in axes] + list(range(len(axes), 4))
        if sorted(ax) != [0, 1, 2, 3]:
            raise ValueError(f"permute: {list(axes)} is not a permutation of the 4 axes")
        ne, nb = [0] * 4, [0] * 4
        for i, target in enumerate(ax):
            ne[target] = x.ne[i]
            nb[target] = x.strides[i]
        return self._alias(x, (ne[0], ne[1], ne[2], ne[3]), (nb[0], nb[1], nb[2], nb[3]), x._offset)

    def cont(self, a: Tensor) -> NumpyTensor:
        x = numpy_tensor(a)
        return self._node(x.dtype, x.ne, (x,), x.values)

    def copy(self, src: Tensor, dst: Tensor) -> NumpyTensor:
        s, d = numpy_tensor(src), numpy_tensor(dst)
        if math.prod(s.ne) != math.prod(d.ne):
            raise ValueError(f"copy: {list(s.shape)} and {list(d.shape)} differ in size")

        def run() -> None:
            # Elements are copied in order (ggml_cpy): the shapes need only the same size.
            d._store(s.values().reshape(-1))

        return self._alias(d, d.ne, d.strides, d._offset, (s, d), run)

    def cast(self, a: Tensor, dtype: DType) -> NumpyTensor:
        x = numpy_tensor(a)
        return self._node(DType(dtype), x.ne, (x,), x.values)

    def concat(self, a: Tensor, b: Tensor, dim: int) -> NumpyTensor:
        x, y = numpy_tensor(a), numpy_tensor(b)
        if x.dtype != y.dtype or any(i != dim and x.ne[i] != y.ne[i] for i in range(4)):
            raise ValueError(f"concat: {list(x.shape)} and {list(y.shape)} along {dim}")
        ne = list(x.ne)
        ne[dim] += y.ne[dim]
        axis = 3 - dim
        return self._node(
            x.dtype, ne, (x, y), lambda: np.concatenate([x.values(), y.values()], axis=axis)
        )
