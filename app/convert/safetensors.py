"""Reading safetensors shards one tensor at a time, memory-mapped.

The format is an 8-byte little-endian header length, a JSON header (name -> dtype, shape,
data_offsets) and the raw data. Reading the header ourselves (instead of the `safetensors`
package) lets us map any dtype numpy lacks: BF16 is widened to F32 by shifting its 16 bits
into the high half of a 32-bit word. Only the tensor being converted is ever materialised.
"""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass
from pathlib import Path

import numpy as np

__all__ = ["CheckpointTensor", "read_header", "read_tensor"]

_DTYPES: dict[str, np.dtype] = {
    "F32": np.dtype("<f4"),
    "F16": np.dtype("<f2"),
    "BF16": np.dtype("<u2"),  # widened on read
    "F64": np.dtype("<f8"),
    "I64": np.dtype("<i8"),
    "I32": np.dtype("<i4"),
    "I16": np.dtype("<i2"),
    "I8": np.dtype("i1"),
    "U8": np.dtype("u1"),
    "BOOL": np.dtype("?"),
}
_MAX_HEADER = 100 * 1024 * 1024


@dataclass(frozen=True)
class CheckpointTensor:
    """One tensor of a shard: where its bytes are and what they are."""

    name: str
    path: Path
    dtype: str  # safetensors' name: "F32", "BF16", ...
    shape: tuple[int, ...]
    start: int  # absolute offset in the file
    end: int

    @property
    def nbytes(self) -> int:
        return self.end - self.start


def read_header(path: Path) -> list[CheckpointTensor]:
    """The tensors of one shard, in file order. Raises ValueError for a damaged file."""
    with open(path, "rb") as f:
        head = f.read(8)
        if len(head) != 8:
            raise ValueError(f"{path.name} is not a safetensors file (it is too short)")
        (size,) = struct.unpack("<Q", head)
        if size > _MAX_HEADER:
            raise ValueError(f"{path.name} is not a safetensors file (header of {size} bytes)")
        raw = f.read(size)
    try:
        header = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError):
        raise ValueError(f"{path.name} is not a safetensors file (unreadable header)") from None
    if not isinstance(header, dict):
        raise ValueError(f"{path.name} is not a safetensors file (unreadable header)")
    base = 8 + size
    file_size = path.stat().st_size
    out = []
    for name, info in header.items():
        if name == "__metadata__":
            continue
        try:
            dtype, shape = str(info["dtype"]), tuple(int(d) for d in info["shape"])
            start, end = (base + int(o) for o in info["data_offsets"])
        except (KeyError, TypeError, ValueError):
            raise ValueError(f"{path.name}: tensor '{name}' has a damaged header entry") from None
        if dtype not in _DTYPES:
            raise ValueError(f"{path.name}: tensor '{name}' has type {dtype}, which is not read")
        count = int(np.prod(shape, dtype=np.int64))
        if end - start != count * _DTYPES[dtype].itemsize or end > file_size:
            raise ValueError(f"{path.name}: tensor '{name}' has the wrong size (truncated file?)")
        out.append(CheckpointTensor(name, path, dtype, shape, start, end))
    out.sort(key=lambda t: t.start)
    return out


def read_tensor(t: CheckpointTensor) -> np.ndarray:
    """The tensor as a numpy array (F32 for every floating type), read through a memory map:
    only this tensor's pages are touched. F32 data is returned as the (read-only) map itself,
    other types as an F32 copy; callers must not write into the result."""
    dtype = _DTYPES[t.dtype]
    count = int(np.prod(t.shape, dtype=np.int64))
    if count == 0:
        return np.zeros(t.shape, np.float32)
    raw = np.memmap(t.path, dtype=dtype, mode="r", offset=t.start, shape=(count,))
    if t.dtype == "F32":
        return raw.reshape(t.shape)
    try:
        if t.dtype == "BF16":
            out = raw.astype(np.uint32)
            out <<= 16
            return out.view(np.float32).reshape(t.shape)
        if dtype.kind == "f":
            return np.array(raw, dtype=np.float32).reshape(t.shape)
        return np.array(raw).reshape(t.shape)
    finally:
        del raw
