"""GGUF files: a fast metadata view and memory-mapped tensor data.

The `gguf` package is used for its type tables and for *writing* files (tests build tiny models
with it); reading is done here because its reader takes tens of seconds on a 262k-token
vocabulary and reports damaged files with tracebacks instead of sentences.

Everything that can go wrong with a file raises `GGUFError`, whose message is one sentence a
user can act on (it names the file and the problem).
"""

from __future__ import annotations

import contextlib
import mmap
import os
import struct
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeAlias

import numpy as np
from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType

__all__ = ["GGUFError", "GGUFFile", "Metadata", "TensorInfo", "dtype_name"]

_MAGIC = b"GGUF"
_DEFAULT_ALIGNMENT = 32

# GGUF metadata value types.
_UINT8, _INT8, _UINT16, _INT16, _UINT32, _INT32, _FLOAT32, _BOOL = range(8)
_STRING, _ARRAY, _UINT64, _INT64, _FLOAT64 = 8, 9, 10, 11, 12

_SCALAR_FORMATS = {
    _UINT8: "<B",
    _INT8: "<b",
    _UINT16: "<H",
    _INT16: "<h",
    _UINT32: "<I",
    _INT32: "<i",
    _FLOAT32: "<f",
    _BOOL: "<?",
    _UINT64: "<Q",
    _INT64: "<q",
    _FLOAT64: "<d",
}
_NUMPY_DTYPES = {
    _UINT8: np.uint8,
    _INT8: np.int8,
    _UINT16: np.uint16,
    _INT16: np.int16,
    _UINT32: np.uint32,
    _INT32: np.int32,
    _FLOAT32: np.float32,
    _BOOL: np.bool_,
    _UINT64: np.uint64,
    _INT64: np.int64,
    _FLOAT64: np.float64,
}


class GGUFError(ValueError):
    """A GGUF file is missing, damaged or not something Hearth can run; the message says which."""


def dtype_name(type_id: int) -> str:
    try:
        return GGMLQuantizationType(type_id).name
    except ValueError:
        return f"type #{type_id}"


@dataclass(frozen=True)
class TensorInfo:
    """One tensor's entry in the file: `shape` is in ggml order (dimension 0 fastest)."""

    name: str
    shape: tuple[int, ...]
    type_id: int
    offset: int  # absolute byte offset in the file
    nbytes: int

    @property
    def type_name(self) -> str:
        return dtype_name(self.type_id)

    @property
    def n_elements(self) -> int:
        n = 1
        for d in self.shape:
            n *= d
        return n


class _Cursor:
    """Little-endian reader over a buffer that turns running off the end into a GGUFError."""

    def __init__(self, buf: memoryview, path: Path) -> None:
        self.buf = buf
        self.pos = 0
        self.path = path

    def _need(self, n: int, what: str) -> None:
        if n < 0 or self.pos + n > len(self.buf):
            raise GGUFError(
                f"{self.path.name} is truncated or corrupt: it ends while reading {what} "
                f"(byte {self.pos} of {len(self.buf)}); the download may be incomplete"
            )

    def scalar(self, vtype: int, what: str) -> Any:
        fmt = _SCALAR_FORMATS[vtype]
        size = struct.calcsize(fmt)
        self._need(size, what)
        (value,) = struct.unpack_from(fmt, self.buf, self.pos)
        self.pos += size
        return value

    def u32(self, what: str) -> int:
        return int(self.scalar(_UINT32, what))

    def u64(self, what: str) -> int:
        return int(self.scalar(_UINT64, what))

    def string(self, what: str) -> str:
        n = self.u64(what)
        self._need(n, what)
        raw = bytes(self.buf[self.pos : self.pos + n])
        self.pos += n
        return raw.decode("utf-8", errors="replace")

    def value(self, vtype: int, key: str) -> Any:
        if vtype in _SCALAR_FORMATS:
            return self.scalar(vtype, f"the value of '{key}'")
        if vtype == _STRING:
            return self.string(f"the value of '{key}'")
        if vtype == _ARRAY:
            item_type = self.u32(f"the array type of '{key}'")
            count = self.u64(f"the array length of '{key}'")
            return self.array(item_type, count, key)
        raise GGUFError(f"{self.path.name} is corrupt: '{key}' has unknown value type {vtype}")

    def array(self, item_type: int, count: int, key: str) -> Any:
        if item_type in _NUMPY_DTYPES:
            dt = np.dtype(_NUMPY_DTYPES[item_type]).newbyteorder("<")
            nbytes = count * dt.itemsize
            self._need(nbytes, f"the array '{key}'")
            arr = np.frombuffer(self.buf, dtype=dt, count=count, offset=self.pos).copy()
            self.pos += nbytes
            return arr
        if item_type == _STRING:
            return self._string_array(count, key)
        if item_type == _ARRAY:
            return [self.value(_ARRAY, key) for _ in range(count)]
        raise GGUFError(f"{self.path.name} is corrupt: '{key}' has unknown item type {item_type}")

    def _string_array(self, count: int, key: str) -> list[str]:
        buf, pos, end = self.buf, self.pos, len(self.buf)
        out: list[str] = []
        append = out.append
        unpack = struct.unpack_from
        for _ in range(count):
            if pos + 8 > end:
                self.pos = pos
                self._need(8, f"the array '{key}'")
            (n,) = unpack("<Q", buf, pos)
            pos += 8
            if pos + n > end:
                self.pos = pos
                self._need(n, f"the array '{key}'")
            append(str(buf[pos : pos + n], "utf-8", "replace"))
            pos += n
        self.pos = pos
        return out


# The typed getters below are named after the builtins; keep handles on the builtins themselves.
_int: TypeAlias = int
_float: TypeAlias = float
_bool: TypeAlias = bool


class Metadata(Mapping[str, Any]):
    """Key/value metadata with typed getters.

    Getters take a key without the architecture prefix: `meta.uint("block_count")` reads
    `<arch>.block_count`. Keys that start with `general.` or `tokenizer.` are used as given.
    Each getter returns `default` when the key is absent.

    `projector`: the metadata of a model's separate projector file (llama.cpp's
    `mmproj-*.gguf`, architecture `clip`, or another, such as Ollama's `mllama` projector)
    when it was loaded with one, else None; its getters read the projector's own architecture
    prefix (`meta.projector.uint("vision.image_size")` reads `clip.vision.image_size` in a
    `clip` file). The two files' keys stay apart (both have `general.*` keys).
    """

    def __init__(self, values: dict[str, Any], projector: Metadata | None = None) -> None:
        self._values = values
        self.architecture: str = str(values.get("general.architecture", ""))
        self.projector = projector

    def with_projector(self, projector: Metadata | None) -> Metadata:
        """The same keys (shared, not copied) with `projector` attached."""
        return Metadata(self._values, projector)

    # Mapping protocol over the raw, fully-qualified keys.
    def __getitem__(self, key: str) -> Any:
        return self._values[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._values)

    def __len__(self) -> _int:
        return len(self._values)

    def key(self, name: str) -> str:
        if name.startswith(("general.", "tokenizer.")) or not self.architecture:
            return name
        return f"{self.architecture}.{name}"

    def has(self, name: str) -> _bool:
        return self.key(name) in self._values

    def raw(self, name: str, default: Any = None) -> Any:
        return self._values.get(self.key(name), default)

    def uint(self, name: str, default: _int = 0) -> _int:
        v = self.raw(name)
        return default if v is None else _int(v)

    def int(self, name: str, default: _int = 0) -> _int:
        return self.uint(name, default)

    def float(self, name: str, default: _float = 0.0) -> _float:
        v = self.raw(name)
        return default if v is None else _float(v)

    def bool(self, name: str, default: _bool = False) -> _bool:
        v = self.raw(name)
        return default if v is None else _bool(v)

    def string(self, name: str, default: str = "") -> str:
        v = self.raw(name)
        return default if v is None else str(v)

    def strings(self, name: str, default: list[str] | None = None) -> list[str]:
        v = self.raw(name)
        return list(default or []) if v is None else list(v)

    def ints(self, name: str, default: list[_int] | None = None) -> list[_int]:
        v = self.raw(name)
        if v is None:
            return list(default or [])
        if not isinstance(v, list | np.ndarray):  # a scalar where a per-layer array is allowed
            return [_int(v)]
        return [_int(x) for x in v]

    def floats(self, name: str, default: list[_float] | None = None) -> list[_float]:
        v = self.raw(name)
        if v is None:
            return list(default or [])
        if not isinstance(v, list | np.ndarray):
            return [_float(v)]
        return [_float(x) for x in v]

    def array(self, name: str) -> np.ndarray | None:
        """A numeric array as numpy, or None when absent."""
        v = self.raw(name)
        return None if v is None else np.asarray(v)

    def bools(self, name: str, default: list[_bool] | None = None) -> list[_bool]:
        v = self.raw(name)
        if v is None:
            return list(default or [])
        if not isinstance(v, list | np.ndarray):
            return [_bool(v)]
        return [_bool(x) for x in v]


class GGUFFile:
    """An open GGUF file: `metadata`, `tensors` (name -> TensorInfo) and zero-copy tensor bytes.

    The file is memory-mapped read-only; `tensor_bytes()` returns views into that map, valid
    until `close()`. Opening validates the header and that every tensor lies inside the file.
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        try:
            self._fh = open(self.path, "rb")  # noqa: SIM115 - kept open for the mmap's lifetime
        except FileNotFoundError:
            raise GGUFError(f"model file {self.path} does not exist") from None
        except IsADirectoryError:
            raise GGUFError(f"{self.path} is a folder, not a GGUF model file") from None
        except OSError as e:
            raise GGUFError(f"cannot open model file {self.path}: {e.strerror}") from None
        self.size = os.fstat(self._fh.fileno()).st_size
        if self.size < 24:
            self._fh.close()
            raise GGUFError(f"{self.path.name} is not a GGUF model file (only {self.size} bytes)")
        self._mm = mmap.mmap(self._fh.fileno(), 0, access=mmap.ACCESS_READ)
        try:
            self._parse()
        except BaseException:
            self.close()
            raise

    def _parse(self) -> None:
        buf = memoryview(self._mm)
        cur = _Cursor(buf, self.path)
        if bytes(buf[:4]) != _MAGIC:
            raise GGUFError(
                f"{self.path.name} is not a GGUF model file (it starts with {bytes(buf[:4])!r})"
            )
        cur.pos = 4
        version = cur.u32("the version")
        if version not in (2, 3):
            if version & 0xFFFF == 0 and version != 0:
                raise GGUFError(f"{self.path.name} is a big-endian GGUF file, which is unsupported")
            raise GGUFError(f"{self.path.name} has GGUF version {version}; Hearth reads 2 and 3")
        n_tensors = cur.u64("the tensor count")
        n_kv = cur.u64("the metadata count")
        if n_tensors > self.size or n_kv > self.size:
            raise GGUFError(f"{self.path.name} is corrupt: its header counts are impossible")
        values: dict[str, Any] = {}
        for _ in range(n_kv):
            key = cur.string("a metadata key")
            vtype = cur.u32(f"the type of '{key}'")
            values[key] = cur.value(vtype, key)
        self.metadata = Metadata(values)
        self.version = version

        infos: list[tuple[str, tuple[int, ...], int, int]] = []
        for i in range(n_tensors):
            name = cur.string(f"the name of tensor #{i}")
            n_dims = cur.u32(f"the rank of tensor '{name}'")
            if n_dims > 4:
                raise GGUFError(f"{self.path.name} is corrupt: tensor '{name}' has {n_dims} dims")
            shape = tuple(cur.u64(f"the shape of tensor '{name}'") for _ in range(n_dims))
            type_id = cur.u32(f"the type of tensor '{name}'")
            offset = cur.u64(f"the offset of tensor '{name}'")
            infos.append((name, shape, type_id, offset))

        alignment = int(values.get("general.alignment", _DEFAULT_ALIGNMENT) or _DEFAULT_ALIGNMENT)
        self.data_offset = (cur.pos + alignment - 1) // alignment * alignment
        self.tensors: dict[str, TensorInfo] = {}
        for name, shape, type_id, offset in infos:
            nbytes = _tensor_nbytes(self.path, name, shape, type_id)
            start = self.data_offset + offset
            if start + nbytes > self.size:
                raise GGUFError(
                    f"{self.path.name} is truncated: tensor '{name}' needs bytes up to "
                    f"{start + nbytes} but the file has {self.size}; the download may be incomplete"
                )
            if name in self.tensors:
                raise GGUFError(f"{self.path.name} is corrupt: tensor '{name}' appears twice")
            self.tensors[name] = TensorInfo(name, shape, type_id, start, nbytes)

    def tensor_bytes(self, name: str) -> memoryview:
        info = self.tensors[name]
        return memoryview(self._mm)[info.offset : info.offset + info.nbytes]

    def tensor_numpy(self, name: str) -> np.ndarray:
        """F32/F16/I32 tensors as numpy arrays in numpy order (reversed ggml shape); a copy."""
        info = self.tensors[name]
        np_types = {0: np.float32, 1: np.float16, 26: np.int32}
        if info.type_id not in np_types:
            raise GGUFError(f"tensor '{name}' is {info.type_name}; only F32/F16/I32 read as numpy")
        arr = np.frombuffer(self.tensor_bytes(name), dtype=np_types[info.type_id]).copy()
        return arr.reshape(tuple(reversed(info.shape)) or (1,))

    @property
    def architecture(self) -> str:
        return self.metadata.architecture

    def close(self) -> None:
        mm = getattr(self, "_mm", None)
        if mm is not None:
            # A numpy view of a tensor may still be alive; then the map closes when collected.
            with contextlib.suppress(BufferError):
                mm.close()
            self._mm = None  # type: ignore[assignment]
        fh = getattr(self, "_fh", None)
        if fh is not None:
            fh.close()

    def __enter__(self) -> GGUFFile:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _tensor_nbytes(path: Path, name: str, shape: tuple[int, ...], type_id: int) -> int:
    try:
        block, type_size = GGML_QUANT_SIZES[GGMLQuantizationType(type_id)]
    except (ValueError, KeyError):
        raise GGUFError(
            f"{path.name} uses tensor type id {type_id} for '{name}', which this version of "
            "Hearth does not know"
        ) from None
    if not shape or shape[0] % block:
        raise GGUFError(
            f"{path.name} is corrupt: tensor '{name}' has shape {list(shape)}, whose first "
            f"dimension is not a multiple of {dtype_name(type_id)}'s block of {block}"
        )
    n = 1
    for d in shape:
        n *= d
    return n // block * type_size
