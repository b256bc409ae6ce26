"""The ggml tensor handle (see tensor.Tensor)."""

from __future__ import annotations

import ctypes

import ggml as g
import numpy as np

from .tensor import DType, Tensor

__all__ = ["GGMLTensor", "FLOAT_TYPES", "host_data", "host_view"]

FLOAT_TYPES = frozenset({DType.F32, DType.F16, DType.BF16})


def host_data(t: Tensor, values: np.ndarray) -> np.ndarray:
    """Values as the tensor's element type; quantized tensors take their raw bytes."""
    try:
        np_type = t.dtype.numpy
    except KeyError:
        return np.ascontiguousarray(values).view(np.uint8)
    return np.ascontiguousarray(values, dtype=np_type)


def host_view(p: object, np_type: np.dtype, nbytes: int) -> np.ndarray | None:
    """A flat numpy array over the memory of allocated tensor `p` when that is host memory,
    else None (not allocated, or on a device)."""
    c = p.contents  # type: ignore[attr-defined]
    if not c.data or not c.buffer or not g.ggml_backend_buffer_is_host(c.buffer):
        return None
    raw = (ctypes.c_uint8 * nbytes).from_address(c.data)
    return np.frombuffer(memoryview(raw).cast("B"), dtype=np_type)


class GGMLTensor(Tensor):
    """A ggml tensor pointer plus the object that keeps its memory alive."""

    __slots__ = ("_p", "_owner", "_layout", "_host")

    def __init__(self, p: object, owner: object) -> None:
        self._p = p
        self._owner = owner
        # numpy() reads: (empty numpy shape, its type, bytes, result shape), once checked
        self._layout: tuple[tuple[int, ...], np.dtype, int, tuple[int, ...]] | None = None
        # (the owning graph's allocation count, a numpy view of this tensor's memory when that
        # is host memory, else None), so that numpy() reads with one copy
        self._host: tuple[int, np.ndarray | None] | None = None

    @property
    def ptr(self) -> object:
        return self._p

    @property
    def shape(self) -> tuple[int, ...]:
        ne = self._p.contents.ne  # type: ignore[attr-defined]
        n = 4
        while n > 1 and ne[n - 1] == 1:
            n -= 1
        return tuple(ne[:n])

    @property
    def ne(self) -> tuple[int, int, int, int]:
        ne = self._p.contents.ne  # type: ignore[attr-defined]
        return (ne[0], ne[1], ne[2], ne[3])

    @property
    def dtype(self) -> DType:
        return DType(self._p.contents.type)  # type: ignore[attr-defined]

    @property
    def strides(self) -> tuple[int, int, int, int]:
        nb = self._p.contents.nb  # type: ignore[attr-defined]
        return (nb[0], nb[1], nb[2], nb[3])

    @property
    def nbytes(self) -> int:
        return int(g.ggml_nbytes(self._p))

    @property
    def name(self) -> str:
        return self._p.contents.name.decode("utf-8", "replace")  # type: ignore[attr-defined]

    def numpy(self, copy: bool = True) -> np.ndarray:
        layout = self._layout
        if layout is None:  # a tensor's type and shape never change: check them once
            dtype = self.dtype
            if dtype not in (DType.F32, DType.F16, DType.I32):
                raise TypeError(f"cannot read a {dtype.name} tensor as numpy")
            if not g.ggml_is_contiguous(self._p):
                raise ValueError(
                    "numpy() needs a contiguous tensor; add ctx.cont() before computing"
                )
            np_type = np.dtype(dtype.numpy)
            full = tuple(reversed(self.ne))
            nbytes = int(np.prod(full)) * np_type.itemsize
            layout = self._layout = (full, np_type, nbytes, tuple(reversed(self.shape)))
        full, np_type, nbytes, shape = layout
        allocations = getattr(self._owner, "allocations", None)  # a graph's tensor
        host = self._host
        if allocations is not None and (host is None or host[0] != allocations):
            host = self._host = (allocations, host_view(self._p, np_type, nbytes))
        if host is not None and host[1] is not None:
            out = host[1].reshape(shape)
            if copy:
                out = out.copy()
        else:
            out = np.empty(full, dtype=np_type)
            g.ggml_backend_tensor_get(self._p, out.ctypes.data, 0, nbytes)
            out = out.reshape(shape)
        return out.astype(np.float32) if np_type == np.float16 else out

    def set(self, values: np.ndarray) -> None:
        set_input = getattr(self._owner, "_set_input", None)
        if set_input is not None:  # a graph input: uploaded when the graph computes
            set_input(self, values)
        else:  # persistent tensor: write through now
            arr = host_data(self, values)
            if arr.nbytes != self.nbytes:
                raise ValueError(f"set(): {arr.nbytes} bytes given, tensor has {self.nbytes}")
            g.ggml_backend_tensor_set(self._p, arr.ctypes.data, 0, arr.nbytes)

    def read_bytes(self, offset: int, size: int) -> np.ndarray:
        self._check_span(offset, size)
        out = np.empty(size, dtype=np.uint8)
        if size:
            g.ggml_backend_tensor_get(self._p, out.ctypes.data, offset, size)
        return out

    def write_bytes(self, offset: int, data: np.ndarray) -> None:
        arr = np.ascontiguousarray(data).view(np.uint8).ravel()
        self._check_span(offset, arr.nbytes)
        if arr.nbytes:
            g.ggml_backend_tensor_set(self._p, arr.ctypes.data, offset, arr.nbytes)

    def _check_span(self, offset: int, size: int) -> None:
        if offset < 0 or size < 0 or offset + size > self.nbytes:
            raise ValueError(f"bytes [{offset}, {offset + size}) lie outside {self!r}")

    def __repr__(self) -> str:
        return f"GGMLTensor({self.dtype.name}, {list(self.shape)})"
