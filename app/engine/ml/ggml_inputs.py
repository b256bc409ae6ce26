"""A ggml graph's inputs: what each must hold, and how its values reach its memory.

`GraphInput` is the record `GGMLContext` (ggml_context.py) keeps per input tensor: the numpy
type and byte size its values must have, the values last given (kept across runs: an input
never loses them), and, once the scheduler has allocated the graph, where they go: a numpy view
of the tensor's memory when that is host memory (one copy), else an upload with
`ggml_backend_tensor_set`, small inputs through a staging array made once per input. `upload()`
runs for every input of every pass: it must stay one short method.
"""

from __future__ import annotations

import ggml as g
import numpy as np

from .ggml_tensor import GGMLTensor, host_view

__all__ = ["GraphInput"]

_STAGED_BYTES = 1 << 16  # device inputs up to this size go through a staging array


class GraphInput:
    """A graph input: its tensor, what its values must be (numpy type, bytes), the values
    given, and where they go once the graph is allocated (`host`: a numpy view of the
    tensor's memory when that is host memory, written with one copy; else uploaded with
    ggml_backend_tensor_set)."""

    __slots__ = ("tensor", "np_type", "nbytes", "values", "host", "staging")

    def __init__(self, tensor: GGMLTensor) -> None:
        self.tensor = tensor
        try:
            self.np_type: np.dtype | None = np.dtype(tensor.dtype.numpy)
        except KeyError:  # quantized: raw bytes
            self.np_type = None
        self.nbytes = tensor.nbytes
        self.values: np.ndarray | None = None
        self.host: np.ndarray | None = None
        # Device memory: (a host array, its address) the values go through, so that no
        # ctypes view of a fresh array is made per upload (microseconds each).
        self.staging: tuple[np.ndarray, int] | None = None

    def map_host(self) -> np.ndarray | None:
        """A numpy array over the allocated input's memory when it is host memory, else None."""
        return host_view(self.tensor.ptr, self.np_type or np.dtype(np.uint8), self.nbytes)

    def upload(self) -> None:
        values = self.values
        assert values is not None
        if self.host is not None:
            self.host[...] = values.reshape(-1)  # (contiguous: a view)
            return
        if self.nbytes > _STAGED_BYTES:  # (a copy more would cost more than it saves)
            g.ggml_backend_tensor_set(self.tensor.ptr, values.ctypes.data, 0, self.nbytes)
            return
        staging = self.staging
        if staging is None:
            array = np.empty(self.nbytes, dtype=np.uint8)
            staging = self.staging = (array, array.ctypes.data)
        staging[0][...] = values.reshape(-1).view(np.uint8)
        g.ggml_backend_tensor_set(self.tensor.ptr, staging[1], 0, self.nbytes)
