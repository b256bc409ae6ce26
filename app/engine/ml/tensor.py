"""Tensors of the tensor API and their element types (see api.py for the conventions).

`DType` is an element type (its value ggml's type id; `.numpy` the numpy dtype where one
exists). `Tensor` is the contract every backend's tensor handle keeps (ggml_tensor.py,
reference_tensor.py): a node of a graph or a persistent tensor (weight, cache), its shape in
ggml order with trailing 1s trimmed (`trim_shape`), its values readable after its graph has
computed. What builds and runs graphs of tensors is api.py's `Context` and `Backend`.
"""

from __future__ import annotations

import abc
import enum
from collections.abc import Sequence
from typing import Any

import numpy as np

__all__ = ["DType", "Tensor", "trim_shape"]


class DType(enum.IntEnum):
    """Element types; the values are ggml's type ids."""

    F32 = 0
    F16 = 1
    Q4_0 = 2
    Q4_1 = 3
    Q5_0 = 6
    Q5_1 = 7
    Q8_0 = 8
    Q2_K = 10
    Q3_K = 11
    Q4_K = 12
    Q5_K = 13
    Q6_K = 14
    I8 = 24
    I16 = 25
    I32 = 26
    BF16 = 30
    MXFP4 = 39  # 32 E2M1 values sharing one E8M0 scale (gpt-oss experts)

    @property
    def numpy(self) -> Any:
        """The numpy dtype for element types that have one (float and integer types)."""
        return _NUMPY[self]


_NUMPY = {
    DType.F32: np.float32,
    DType.F16: np.float16,
    DType.I8: np.int8,
    DType.I16: np.int16,
    DType.I32: np.int32,
}


def trim_shape(shape: Sequence[int]) -> tuple[int, ...]:
    """A shape as the API reports it: trailing sizes of 1 dropped (at least one size kept)."""
    s = [int(d) for d in shape]
    while len(s) > 1 and s[-1] == 1:
        s.pop()
    return tuple(s)


class Tensor(abc.ABC):
    """A node of a graph, or a persistent tensor (weight, cache), in ggml dimension order."""

    __slots__ = ()

    @property
    @abc.abstractmethod
    def shape(self) -> tuple[int, ...]:
        """Sizes per dimension, ggml order, trailing 1s trimmed (at least one entry)."""

    @property
    @abc.abstractmethod
    def dtype(self) -> DType: ...

    @property
    @abc.abstractmethod
    def strides(self) -> tuple[int, int, int, int]:
        """Byte strides of all four ggml dimensions (nb[0..3])."""

    @abc.abstractmethod
    def numpy(self, copy: bool = True) -> np.ndarray:
        """The computed values as float32 (or int32) numpy, shape reversed to numpy order.

        Valid after the graph holding this tensor has computed (or for persistent tensors).
        `copy=False` lets a backend return a view of the tensor's host memory instead (no copy
        of, say, a vocabulary's logits), valid only until its graph computes again: for a
        value read at once.
        """

    @abc.abstractmethod
    def set(self, values: np.ndarray) -> None:
        """Give an input tensor new values (uploaded at the next compute)."""

    def read_bytes(self, offset: int, size: int) -> np.ndarray:
        """`size` raw bytes of a persistent tensor's memory from byte `offset` (uint8), as
        stored (quantized blocks included). For saving the KV cache; a backend without raw
        access raises NotImplementedError."""
        raise NotImplementedError(f"{type(self).__name__} has no raw byte access")

    def write_bytes(self, offset: int, data: np.ndarray) -> None:
        """Write raw bytes (`data`, uint8) into a persistent tensor's memory at byte `offset`:
        the inverse of `read_bytes`."""
        raise NotImplementedError(f"{type(self).__name__} has no raw byte access")

    def dim(self, i: int) -> int:
        s = self.shape
        return s[i] if i < len(s) else 1
