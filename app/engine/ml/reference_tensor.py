"""The numpy reference backend's memory: `NumpyTensor`, a window onto a shared byte buffer.

Part of the numpy reference backend (see `reference.py` for the whole design): this module
holds the element types, ggml's shape and stride arithmetic (`ne`, `nb`), the tensor handle
and `Graph`, which makes a graph's tensors (a new buffer, or a window onto an existing one);
the ops are in `reference_ops.py` and the context that runs them in `reference.py`. The three
share the tensor's private fields (`_base`, `_offset`, `_srcs`, `_run`): they are one backend
split by concern, not separate clients of `NumpyTensor`.
"""

from __future__ import annotations

import abc
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from .tensor import DType, Tensor, trim_shape

__all__ = [
    "Graph",
    "Ne",
    "NumpyTensor",
    "check_repeat",
    "check_same_ne",
    "contiguous_nb",
    "element_dtype",
    "ne4",
    "np_shape",
    "numpy_tensor",
    "tile",
]

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


def element_dtype(dtype: DType) -> np.dtype[Any]:
    """The numpy element type of `dtype`; NotImplementedError for quantized types and BF16."""
    try:
        return np.dtype(_ELEMENT[DType(dtype)])
    except KeyError:
        raise NotImplementedError(
            f"the numpy reference backend has no {DType(dtype).name} tensors "
            "(quantized and BF16 types exist only in the ggml backend)"
        ) from None


def ne4(shape: Sequence[int]) -> Ne:
    """A ggml shape of 1 to 4 positive sizes, padded with 1s to four (ValueError otherwise)."""
    dims = [int(d) for d in shape]
    if not 1 <= len(dims) <= 4 or any(d < 1 for d in dims):
        raise ValueError(f"a shape has 1 to 4 positive sizes, not {list(shape)}")
    dims += [1] * (4 - len(dims))
    return (dims[0], dims[1], dims[2], dims[3])


def contiguous_nb(esize: int, ne: Ne) -> Ne:
    """The byte strides of a tightly packed tensor of shape `ne` and element size `esize`."""
    nb1 = esize * ne[0]
    nb2 = nb1 * ne[1]
    return (esize, nb1, nb2, nb2 * ne[2])


def np_shape(ne: Ne) -> tuple[int, int, int, int]:
    """numpy order of a ggml shape (always four axes inside this backend)."""
    return (ne[3], ne[2], ne[1], ne[0])


def check_repeat(b: Ne, a: Ne, what: str) -> None:
    """ValueError unless `b` tiles onto `a` (ggml_can_repeat); `what` names the op."""
    if any(x % y for x, y in zip(a, b, strict=True)):
        raise ValueError(f"{what}: {trim_shape(b)} does not broadcast onto {trim_shape(a)}")


def tile(values: np.ndarray, ne: Ne) -> np.ndarray:
    """ggml_repeat: tile `values` (numpy order, 4 axes) up to the ggml shape `ne`."""
    target = np_shape(ne)
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
        ne = ne4(shape)
        esize = element_dtype(dtype).itemsize
        base = np.zeros(esize * ne[0] * ne[1] * ne[2] * ne[3], dtype=np.uint8)
        return cls(base, 0, dtype, ne, contiguous_nb(esize, ne), owner, name=name)

    # -- Tensor -----------------------------------------------------------------------------
    @property
    def shape(self) -> tuple[int, ...]:
        return trim_shape(self._ne)

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
        esize = element_dtype(self._dtype).itemsize
        return esize + sum((n - 1) * b for n, b in zip(self._ne, self._nb, strict=True))

    def is_contiguous(self) -> bool:
        """ggml_is_contiguous: elements in order, no gaps (dims of size 1 may have any stride)."""
        next_nb = element_dtype(self._dtype).itemsize
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
            np_shape(self._ne),
            dtype=element_dtype(self._dtype),
            buffer=self._base,
            offset=self._offset,
            strides=np_shape(self._nb),
        )

    def numpy(self, copy: bool = True) -> np.ndarray:  # (always a copy)
        owner = self._owner
        if isinstance(owner, Graph) and not owner._computed:
            raise RuntimeError("numpy(): the graph holding this tensor has not computed yet")
        if self._dtype not in _READABLE:
            raise TypeError(f"cannot read a {self._dtype.name} tensor as numpy")
        if not self.is_contiguous():
            raise ValueError("numpy() needs a contiguous tensor; add ctx.cont() before computing")
        out = np.array(self.array()).reshape(tuple(reversed(self.shape)))
        return out.astype(np.float32) if self._dtype == DType.F16 else out

    def set(self, values: np.ndarray) -> None:
        owner = self._owner
        if isinstance(owner, Graph):
            owner._set_input(self, values)
        else:  # persistent tensor: write through now
            self._store_exact(values)

    def read_bytes(self, offset: int, size: int) -> np.ndarray:
        self._check_span(offset, size)
        start = self._offset + offset
        return np.array(self._base[start : start + size], dtype=np.uint8)

    def write_bytes(self, offset: int, data: np.ndarray) -> None:
        arr = np.ascontiguousarray(data).view(np.uint8).ravel()
        self._check_span(offset, arr.nbytes)
        start = self._offset + offset
        self._base[start : start + arr.nbytes] = arr

    def _check_span(self, offset: int, size: int) -> None:
        if offset < 0 or size < 0 or offset + size > self.nbytes:
            raise ValueError(f"bytes [{offset}, {offset + size}) lie outside the tensor")

    def _store_exact(self, values: np.ndarray) -> None:
        arr = np.asarray(values, dtype=element_dtype(self._dtype))
        n = self._ne[0] * self._ne[1] * self._ne[2] * self._ne[3]
        if arr.size != n:
            raise ValueError(f"set(): {arr.size} values given, the tensor has {n}")
        self.array()[...] = arr.reshape(np_shape(self._ne))

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


class Graph(abc.ABC):
    """A graph's side of its tensors: how ops make them, and what the tensors ask of it.

    `NumpyContext` derives from it; it is declared here so that this module need not import the
    context's module (which imports this one). An op's result is either a new tensor (`_node`)
    or a window onto an existing tensor's memory (`_alias`: a view, or an op writing in place),
    and is recorded to run at compute(). A tensor whose owner is not a Graph is persistent: its
    owner is the `NumpyBackend`, and it is readable and writable at any time.
    """

    _computed: bool  # graph tensors have values only once compute() has run
    _nodes: list[NumpyTensor]  # tensors with an op, in call order; compute() runs them

    @abc.abstractmethod
    def _check_open(self) -> None:
        """RuntimeError once the graph was closed: no more ops may be added."""

    @abc.abstractmethod
    def _set_input(self, t: NumpyTensor, values: np.ndarray) -> None:
        """Keep `values` for the input `t`; they are copied in when the graph computes."""

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
        esize = element_dtype(a.dtype).itemsize
        last = offset + esize + sum((n - 1) * b for n, b in zip(ne, nb, strict=True))
        if offset < 0 or last > a._base.nbytes:
            raise ValueError(
                f"view {trim_shape(ne)} at byte {offset} with strides {nb} runs past its "
                f"{a._base.nbytes}-byte buffer"
            )
        t = NumpyTensor(a._base, offset, a.dtype, ne, nb, self, tuple(srcs or (a,)), run)
        if run is not None:
            self._nodes.append(t)
        return t


def numpy_tensor(t: Tensor) -> NumpyTensor:
    """`t` itself, checked to be this backend's (TypeError for another backend's tensor)."""
    if not isinstance(t, NumpyTensor):
        raise TypeError(f"the numpy backend cannot use a {type(t).__name__}")
    return t


def check_same_ne(a: NumpyTensor, b: NumpyTensor, what: str) -> None:
    """ValueError unless `a` and `b` have the same shape; `what` names the op."""
    if a.ne != b.ne:
        raise ValueError(f"{what}: shapes {list(a.shape)} and {list(b.shape)} differ")
