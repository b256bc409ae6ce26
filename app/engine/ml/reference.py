"""A numpy implementation of the tensor API: the reference semantics, for tests.

`NumpyBackend` implements `api.Backend`/`Context`/`Tensor` with plain numpy so that engine code
(KV caches, shift functions, attention, small model graphs) can be tested without ggml, and its
results compared with the ggml backend's. It favours being obviously right over being fast:

* Every tensor is a window onto a byte buffer (a 1-D uint8 array) described by ggml's four
  sizes `ne` and byte strides `nb`. Views, reshapes and permutes share their source's buffer,
  exactly as in ggml, so writing through a view (`copy`, `set_rows`) changes what every other
  view of the same memory sees.
* Ops are recorded when they are called and run, in call order, at `compute()`; only the ops
  that the outputs and the `forward()`ed tensors depend on run (like a ggml graph). A computed
  graph may be computed again after its inputs were given new values (keyed inputs work as in
  ggml), and `on_started` is honoured (inputs are copied in before it is called).
* Arithmetic is done in float64 and rounded to the result's element type once, so results are
  the exactly rounded values (ggml's kernels may differ in the last bits, and more for F16
  operands, which ggml multiplies in F16).

Element types: F32, F16, I8, I16 and I32. Quantized types and BF16 raise NotImplementedError.
Rules checked as ggml checks them (broadcastable shapes, contiguous reshape, in-bounds views
and row indices) raise ValueError or IndexError instead of aborting.

Usage (a plugin's shift function, or a cache, on both backends):

    backend = NumpyBackend(padding=1, permuted_v=False)
    ctx = backend.new_context()
    x = ctx.from_numpy(np.ones((4, 8), np.float32))   # ggml shape [8, 4]
    y = ctx.scale(x, 2.0)
    ctx.compute(y)
    y.numpy()                                          # numpy shape (4, 8)
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from .api import Backend, CacheConfig, Context, DType, RopeOptions, Tensor

__all__ = ["NumpyBackend", "NumpyContext", "NumpyTensor"]

_ELEMENT: dict[DType, Any] = {
    DType.F32: np.float32,
    DType.F16: np.float16,
    DType.I8: np.int8,
    DType.I16: np.int16,
    DType.I32: np.int32,
}
_FLOATS = frozenset({DType.F32, DType.F16})
_READABLE = frozenset({DType.F32, DType.F16, DType.I32})

Ne = tuple[int, int, int, int]


def _element(dtype: DType) -> np.dtype[Any]:
    try:
        return np.dtype(_ELEMENT[DType(dtype)])
    except KeyError:
        raise NotImplementedError(
            f"the numpy reference backend has no {DType(dtype).name} tensors "
            "(quantized and BF16 types exist only in the ggml backend)"
        ) from None


def _ne4(shape: Sequence[int]) -> Ne:
    dims = [int(d) for d in shape]
    if not 1 <= len(dims) <= 4 or any(d < 1 for d in dims):
        raise ValueError(f"a shape has 1 to 4 positive sizes, not {list(shape)}")
    dims += [1] * (4 - len(dims))
    return (dims[0], dims[1], dims[2], dims[3])


def _contiguous_nb(esize: int, ne: Ne) -> Ne:
    nb1 = esize * ne[0]
    nb2 = nb1 * ne[1]
    return (esize, nb1, nb2, nb2 * ne[2])


def _trim(ne: Sequence[int]) -> tuple[int, ...]:
    s = list(ne)
    while len(s) > 1 and s[-1] == 1:
        s.pop()
    return tuple(s)


def _np_shape(ne: Ne) -> tuple[int, int, int, int]:
    """numpy order of a ggml shape (always four axes inside this module)."""
    return (ne[3], ne[2], ne[1], ne[0])


def _check_repeat(b: Ne, a: Ne, what: str) -> None:
    if any(x % y for x, y in zip(a, b, strict=True)):
        raise ValueError(f"{what}: {_trim(b)} does not broadcast onto {_trim(a)}")


def _tile(values: np.ndarray, ne: Ne) -> np.ndarray:
    """ggml_repeat: tile `values` (numpy order, 4 axes) up to the ggml shape `ne`."""
    target = _np_shape(ne)
    reps = tuple(t // s for t, s in zip(target, values.shape, strict=True))
    return np.tile(values, reps) if any(r != 1 for r in reps) else values


class NumpyTensor(Tensor):
    """A window (`ne`, byte strides `nb`, byte offset) onto a shared uint8 buffer."""

    __slots__ = ("_base", "_offset", "_ne", "_nb", "_dtype", "_owner", "_srcs", "_run", "name")

    def __init__(
        self,
        base: np.ndarray,
        offset: int,
        dtype: DType,
        ne: Ne,
        nb: Ne,
        owner: object,
        srcs: tuple[NumpyTensor, ...] = (),
        run: Callable[[], None] | None = None,
        name: str = "",
    ) -> None:
        self._base = base
        self._offset = offset
        self._dtype = DType(dtype)
        self._ne = ne
        self._nb = nb
        self._owner = owner  # a NumpyContext (graph tensor) or a NumpyBackend (persistent)
        self._srcs = srcs  # what this tensor's value depends on (graph order)
        self._run = run  # the op that writes this tensor's value, if any
        self.name = name

    @classmethod
    def _alloc(
        cls, dtype: DType, shape: Sequence[int], owner: object, name: str = ""
    ) -> NumpyTensor:
        ne = _ne4(shape)
        esize = _element(dtype).itemsize
        base = np.zeros(esize * ne[0] * ne[1] * ne[2] * ne[3], dtype=np.uint8)
        return cls(base, 0, dtype, ne, _contiguous_nb(esize, ne), owner, name=name)

    # -- Tensor -----------------------------------------------------------------------------
    @property
    def shape(self) -> tuple[int, ...]:
        return _trim(self._ne)

    @property
    def dtype(self) -> DType:
        return self._dtype

    @property
    def strides(self) -> tuple[int, int, int, int]:
        return self._nb

    @property
    def ne(self) -> Ne:
        return self._ne

    @property
    def nbytes(self) -> int:
        """Bytes from the first element to the end of the last (ggml_nbytes)."""
        esize = _element(self._dtype).itemsize
        return esize + sum((n - 1) * b for n, b in zip(self._ne, self._nb, strict=True))

    def is_contiguous(self) -> bool:
        """ggml_is_contiguous: elements in order, no gaps (dims of size 1 may have any stride)."""
        next_nb = _element(self._dtype).itemsize
        if self._ne[0] != 1 and self._nb[0] != next_nb:
            return False
        next_nb *= self._ne[0]
        for n, b in zip(self._ne[1:], self._nb[1:], strict=True):
            if n != 1:
                if b != next_nb:
                    return False
                next_nb *= n
        return True

    def array(self) -> np.ndarray:
        """A writeable numpy view (numpy order, always 4 axes) of this tensor's memory."""
        return np.ndarray(
            _np_shape(self._ne),
            dtype=_element(self._dtype),
            buffer=self._base,
            offset=self._offset,
            strides=_np_shape(self._nb),
        )

    def numpy(self) -> np.ndarray:
        owner = self._owner
        if isinstance(owner, NumpyContext) and not owner._computed:
            raise RuntimeError("numpy(): the graph holding this tensor has not computed yet")
        if self._dtype not in _READABLE:
            raise TypeError(f"cannot read a {self._dtype.name} tensor as numpy")
        if not self.is_contiguous():
            raise ValueError("numpy() needs a contiguous tensor; add ctx.cont() before computing")
        out = np.array(self.array()).reshape(tuple(reversed(self.shape)))
        return out.astype(np.float32) if self._dtype == DType.F16 else out

    def set(self, values: np.ndarray) -> None:
        owner = self._owner
        if isinstance(owner, NumpyContext):
            owner._set_input(self, values)
        else:  # persistent tensor: write through now
            self._store_exact(values)

    def _store_exact(self, values: np.ndarray) -> None:
        arr = np.asarray(values, dtype=_element(self._dtype))
        n = self._ne[0] * self._ne[1] * self._ne[2] * self._ne[3]
        if arr.size != n:
            raise ValueError(f"set(): {arr.size} values given, the tensor has {n}")
        self.array()[...] = arr.reshape(_np_shape(self._ne))

    def _store(self, values: np.ndarray) -> None:
        """Write an op's result (any numeric dtype, this tensor's shape) in this tensor's type."""
        out = self.array()
        out[...] = np.asarray(values).reshape(out.shape).astype(out.dtype)

    def values(self) -> np.ndarray:
        """The current values, numpy order with 4 axes: float64 for floats, int64 for ints."""
        arr = self.array()
        return arr.astype(np.float64 if self._dtype in _FLOATS else np.int64)

    def __repr__(self) -> str:
        return f"NumpyTensor({self._dtype.name}, {list(self.shape)})"


def _nt(t: Tensor) -> NumpyTensor:
    if not isinstance(t, NumpyTensor):
        raise TypeError(f"the numpy backend cannot use a {type(t).__name__}")
    return t


def _same_ne(a: NumpyTensor, b: NumpyTensor, what: str) -> None:
    if a.ne != b.ne:
        raise ValueError(f"{what}: shapes {list(a.shape)} and {list(b.shape)} differ")


def _gelu(x: np.ndarray) -> np.ndarray:
    return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x**3)))


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


class NumpyContext(Context):
    """One graph: ops are recorded and run in call order at compute(); see the module doc."""

    def __init__(self, backend: NumpyBackend, max_nodes: int) -> None:
        self._backend = backend
        self._max_nodes = max_nodes
        self._nodes: list[NumpyTensor] = []  # tensors with an op, in call order
        self._inputs: dict[int, tuple[NumpyTensor, np.ndarray | None]] = {}
        self._keyed: dict[str, NumpyTensor] = {}
        self._roots: dict[int, NumpyTensor] = {}  # forward()ed and output tensors
        self._computed = False
        self._closed = False
        self.row_groups: dict[int, list[tuple[int, int]]] = {}

    @property
    def flash_attention_enabled(self) -> bool:
        return self._backend.flash_attention

    # -- helpers ----------------------------------------------------------------------------
    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError("this context was closed")

    def _node(
        self,
        dtype: DType,
        shape: Sequence[int],
        srcs: Sequence[NumpyTensor],
        fn: Callable[[], np.ndarray],
    ) -> NumpyTensor:
        """A new tensor whose value is `fn()` (numpy order), computed at compute()."""
        self._check_open()
        out = NumpyTensor._alloc(dtype, shape, self)
        out._srcs = tuple(srcs)

        def run() -> None:
            out._store(fn())

        out._run = run
        self._nodes.append(out)
        return out

    def _alias(
        self,
        a: NumpyTensor,
        ne: Ne,
        nb: Ne,
        offset: int,
        srcs: Sequence[NumpyTensor] | None = None,
        run: Callable[[], None] | None = None,
    ) -> NumpyTensor:
        """A tensor over `a`'s memory (a view, or the result of an op writing into it)."""
        self._check_open()
        esize = _element(a.dtype).itemsize
        last = offset + esize + sum((n - 1) * b for n, b in zip(ne, nb, strict=True))
        if offset < 0 or last > a._base.nbytes:
            raise ValueError(
                f"view {_trim(ne)} at byte {offset} with strides {nb} runs past its "
                f"{a._base.nbytes}-byte buffer"
            )
        t = NumpyTensor(a._base, offset, a.dtype, ne, nb, self, tuple(srcs or (a,)), run)
        if run is not None:
            self._nodes.append(t)
        return t

    def _set_input(self, t: NumpyTensor, values: np.ndarray) -> None:
        arr = np.array(values, dtype=_element(t.dtype), copy=True)
        n = t.ne[0] * t.ne[1] * t.ne[2] * t.ne[3]
        if arr.size != n:
            raise ValueError(
                f"input {list(t.shape)} {t.dtype.name} needs {n} values, got {arr.size}"
            )
        self._inputs[id(t)] = (t, arr)

    # -- creation ---------------------------------------------------------------------------
    def input(
        self,
        dtype: DType,
        shape: Sequence[int],
        data: np.ndarray | None = None,
        key: str | None = None,
    ) -> NumpyTensor:
        self._check_open()
        if key is not None:
            existing = self._keyed.get(key)
            if existing is not None:
                if existing.dtype != dtype or existing.shape != _trim(_ne4(shape)):
                    raise ValueError(
                        f"input '{key}' is {existing.dtype.name}{list(existing.shape)} in this "
                        f"graph, not {DType(dtype).name}{list(_trim(_ne4(shape)))}"
                    )
                if data is not None:
                    self._set_input(existing, data)
                return existing
        t = NumpyTensor._alloc(dtype, shape, self)
        self._inputs[id(t)] = (t, None)
        if data is not None:
            self._set_input(t, data)
        if key is not None:
            self._keyed[key] = t
        return t

    def has_input(self, key: str) -> bool:
        return key in self._keyed

    # -- arithmetic -------------------------------------------------------------------------
    def add(self, a: Tensor, b: Tensor) -> NumpyTensor:
        x, y = _nt(a), _nt(b)
        _check_repeat(y.ne, x.ne, "add")
        return self._node(x.dtype, x.ne, (x, y), lambda: x.values() + _tile(y.values(), x.ne))

    def mul(self, a: Tensor, b: Tensor) -> NumpyTensor:
        x, y = _nt(a), _nt(b)
        _check_repeat(y.ne, x.ne, "mul")
        return self._node(x.dtype, x.ne, (x, y), lambda: x.values() * _tile(y.values(), x.ne))

    def scale(self, a: Tensor, s: float) -> NumpyTensor:
        x = _nt(a)
        return self._node(x.dtype, x.ne, (x,), lambda: x.values() * float(s))

    def mul_mat(self, a: Tensor, b: Tensor, full_precision: bool = False) -> NumpyTensor:
        x, y = _nt(a), _nt(b)
        if x.ne[0] != y.ne[0] or y.ne[2] % x.ne[2] or y.ne[3] % x.ne[3]:
            raise ValueError(f"mul_mat: {list(x.shape)} cannot multiply {list(y.shape)}")
        r2, r3 = y.ne[2] // x.ne[2], y.ne[3] // x.ne[3]

        def fn() -> np.ndarray:
            w = np.repeat(np.repeat(x.values(), r3, axis=0), r2, axis=1)  # [b3, b2, m, k]
            return np.matmul(y.values(), np.swapaxes(w, -1, -2))  # [b3, b2, n, m]

        return self._node(DType.F32, (x.ne[1], y.ne[1], y.ne[2], y.ne[3]), (x, y), fn)

    def get_rows(self, a: Tensor, rows: Tensor) -> NumpyTensor:
        x, r = _nt(a), _nt(rows)
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
        d, s, r = _nt(dst), _nt(src), _nt(rows)
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
        x = _nt(a)

        def fn() -> np.ndarray:
            v = x.values()
            return v / np.sqrt((v * v).mean(axis=-1, keepdims=True) + eps)

        return self._node(x.dtype, x.ne, (x,), fn)

    def norm(self, a: Tensor, eps: float) -> NumpyTensor:
        x = _nt(a)

        def fn() -> np.ndarray:
            v = x.values()
            v = v - v.mean(axis=-1, keepdims=True)
            return v / np.sqrt((v * v).mean(axis=-1, keepdims=True) + eps)

        return self._node(x.dtype, x.ne, (x,), fn)

    def soft_max(self, a: Tensor, mask: Tensor | None = None, scale: float = 1.0) -> NumpyTensor:
        x = _nt(a)
        m = _nt(mask) if mask is not None else None
        if m is not None and (
            m.ne[0] != x.ne[0] or m.ne[1] < x.ne[1] or x.ne[2] % m.ne[2] or x.ne[3] % m.ne[3]
        ):
            raise ValueError(f"soft_max: mask {list(m.shape)} does not fit {list(x.shape)}")

        def fn() -> np.ndarray:
            v = x.values() * float(scale)
            if m is not None:
                mv = m.values()[:, :, : x.ne[1], :]
                v = v + _tile(mv, (x.ne[0], x.ne[1], x.ne[2], x.ne[3]))
            return _softmax_rows(v)

        srcs = (x,) if m is None else (x, m)
        return self._node(DType.F32, x.ne, srcs, fn)

    def gelu(self, a: Tensor) -> NumpyTensor:
        x = _nt(a)
        return self._node(x.dtype, x.ne, (x,), lambda: _gelu(x.values()))

    def silu(self, a: Tensor) -> NumpyTensor:
        x = _nt(a)
        return self._node(x.dtype, x.ne, (x,), lambda: _silu(x.values()))

    def tanh(self, a: Tensor) -> NumpyTensor:
        x = _nt(a)
        return self._node(x.dtype, x.ne, (x,), lambda: np.tanh(x.values()))

    def geglu(self, gate: Tensor, up: Tensor) -> NumpyTensor:
        g, u = _nt(gate), _nt(up)
        _same_ne(g, u, "geglu")
        return self._node(g.dtype, g.ne, (g, u), lambda: _gelu(g.values()) * u.values())

    def swiglu(self, gate: Tensor, up: Tensor) -> NumpyTensor:
        g, u = _nt(gate), _nt(up)
        _same_ne(g, u, "swiglu")
        return self._node(g.dtype, g.ne, (g, u), lambda: _silu(g.values()) * u.values())

    def rope(
        self,
        a: Tensor,
        positions: Tensor,
        opts: RopeOptions,
        factors: Tensor | None = None,
    ) -> NumpyTensor:
        x, p = _nt(a), _nt(positions)
        f = _nt(factors) if factors is not None else None
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
    ) -> NumpyTensor:
        qt, kt, vt = _nt(q), _nt(k), _nt(v)
        mt = _nt(mask) if mask is not None else None
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
                s = s + _tile(mv, (s.shape[3], s.shape[2], s.shape[1], s.shape[0]))
            with np.errstate(invalid="ignore"):
                probs = _softmax_rows(s)
            probs = np.nan_to_num(probs, nan=0.0)  # a row that sees nothing gives zeros
            out = np.matmul(probs, vv)  # [q3, heads, tokens, d_v]
            return np.swapaxes(out, 1, 2)  # [q3, tokens, heads, d_v]

        srcs = (qt, kt, vt) if mt is None else (qt, kt, vt, mt)
        return self._node(DType.F32, (vt.ne[0], heads, tokens, q3), srcs, fn)

    # -- layout -----------------------------------------------------------------------------
    def reshape(self, a: Tensor, *shape: int) -> NumpyTensor:
        x = _nt(a)
        ne = _ne4(shape)
        if not x.is_contiguous():
            raise ValueError("reshape() needs a contiguous tensor (add ctx.cont())")
        if math.prod(ne) != math.prod(x.ne):
            raise ValueError(f"reshape: {list(x.shape)} has no {list(shape)} form")
        return self._alias(x, ne, _contiguous_nb(_element(x.dtype).itemsize, ne), x._offset)

    def view(
        self,
        a: Tensor,
        shape: Sequence[int],
        strides: Sequence[int] = (),
        offset: int = 0,
    ) -> NumpyTensor:
        x = _nt(a)
        n = len(shape)
        if len(strides) != n - 1:
            raise ValueError("view(): give one byte stride for each dimension after the first")
        ne = _ne4(shape)
        nb = [_element(x.dtype).itemsize, *(int(s) for s in strides)]
        while len(nb) < 4:
            nb.append(nb[-1] * ne[len(nb) - 1])
        return self._alias(x, ne, (nb[0], nb[1], nb[2], nb[3]), x._offset + int(offset))

    def permute(self, a: Tensor, *axes: int) -> NumpyTensor:
        x = _nt(a)
        ax = [int(i) for i in axes] + list(range(len(axes), 4))
        if sorted(ax) != [0, 1, 2, 3]:
            raise ValueError(f"permute: {list(axes)} is not a permutation of the 4 axes")
        ne, nb = [0] * 4, [0] * 4
        for i, target in enumerate(ax):
            ne[target] = x.ne[i]
            nb[target] = x.strides[i]
        return self._alias(x, (ne[0], ne[1], ne[2], ne[3]), (nb[0], nb[1], nb[2], nb[3]), x._offset)

    def cont(self, a: Tensor) -> NumpyTensor:
        x = _nt(a)
        return self._node(x.dtype, x.ne, (x,), x.values)

    def copy(self, src: Tensor, dst: Tensor) -> NumpyTensor:
        s, d = _nt(src), _nt(dst)
        if math.prod(s.ne) != math.prod(d.ne):
            raise ValueError(f"copy: {list(s.shape)} and {list(d.shape)} differ in size")

        def run() -> None:
            # Elements are copied in order (ggml_cpy): the shapes need only the same size.
            d._store(s.values().reshape(-1))

        return self._alias(d, d.ne, d.strides, d._offset, (s, d), run)

    def cast(self, a: Tensor, dtype: DType) -> NumpyTensor:
        x = _nt(a)
        return self._node(DType(dtype), x.ne, (x,), x.values)

    def concat(self, a: Tensor, b: Tensor, dim: int) -> NumpyTensor:
        x, y = _nt(a), _nt(b)
        if x.dtype != y.dtype or any(i != dim and x.ne[i] != y.ne[i] for i in range(4)):
            raise ValueError(f"concat: {list(x.shape)} and {list(y.shape)} along {dim}")
        ne = list(x.ne)
        ne[dim] += y.ne[dim]
        axis = 3 - dim
        return self._node(
            x.dtype, ne, (x, y), lambda: np.concatenate([x.values(), y.values()], axis=axis)
        )

    # -- running ----------------------------------------------------------------------------
    def forward(self, *tensors: Tensor) -> None:
        self._check_open()
        for t in tensors:
            self._roots.setdefault(id(t), _nt(t))

    def compute(self, *outputs: Tensor, on_started: Callable[[], None] | None = None) -> None:
        self.forward(*outputs)
        missing = [t for t, arr in self._inputs.values() if arr is None]
        if missing:
            raise ValueError(f"{len(missing)} graph input(s) were never given values")
        needed = self._reachable()
        with self._backend._lock:
            for t, arr in self._inputs.values():
                assert arr is not None
                t._store_exact(arr)
            if on_started is not None:
                on_started()
            for node in self._nodes:
                if id(node) in needed and node._run is not None:
                    node._run()
            self._computed = True
            self._backend._current = self

    def _reachable(self) -> set[int]:
        seen: set[int] = set()
        stack = list(self._roots.values())
        while stack:
            t = stack.pop()
            if id(t) in seen:
                continue
            seen.add(id(t))
            stack.extend(t._srcs)
        return seen

    @property
    def is_current(self) -> bool:
        return self._backend._current is self

    def reserve(self, *outputs: Tensor) -> None:
        """Nothing to plan: numpy allocates as it goes. The outputs join the graph."""
        self.forward(*outputs)

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._nodes.clear()
            self._roots.clear()
            self._inputs.clear()
            self._keyed.clear()
            if self._backend._current is self:
                self._backend._current = None


class NumpyBackend(Backend):
    """Host memory only. `padding`, `permuted_v` and `mask_dtype` are what `cache_config`
    reports (Ollama's test backend: no padding, permuted V as the test asks)."""

    def __init__(
        self,
        padding: int = 1,
        permuted_v: bool = False,
        mask_dtype: DType = DType.F32,
        flash_attention: bool = False,
        num_threads: int = 1,
        graph_nodes: int = 8192,
    ) -> None:
        if padding < 1:
            raise ValueError("padding must be at least 1")
        self.num_threads = num_threads
        self.flash_attention = flash_attention
        self.graph_nodes = graph_nodes
        self._config = CacheConfig(padding=padding, permuted_v=permuted_v, mask_dtype=mask_dtype)
        self._lock = threading.Lock()
        self._current: NumpyContext | None = None
        self._persistent: list[NumpyTensor] = []

    def new_context(self, max_nodes: int | None = None) -> NumpyContext:
        return NumpyContext(self, max_nodes or self.graph_nodes)

    def persistent(self, dtype: DType, shape: Sequence[int], name: str = "") -> NumpyTensor:
        t = NumpyTensor._alloc(dtype, shape, self, name)
        self._persistent.append(t)
        return t

    def persistent_bytes(self) -> int:
        return sum(t._base.nbytes for t in self._persistent)

    @property
    def cache_config(self) -> CacheConfig:
        return self._config

    def close(self) -> None:
        self._persistent.clear()
        self._current = None
