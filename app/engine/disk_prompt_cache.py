"""The prompt cache on disk: sequences' KV state kept in files, so that a prompt seen before
(a long chat reopened after a restart) is loaded instead of evaluated again.

One folder per cache key under the root: the key is a digest of `settings` (the model file's
digest, the engine and everything that changes the cached bits or their layout: K/V type, flash
attention, context and batch size, threads, devices; see the runner's `disk_cache.py`), the
format version and the software that computed the bits (`software_versions()`: Hearth's
version, ggml-python's, and the ggml library's own version and commit), so a file is only ever
read by a runner that would have computed the same bits: after an upgrade of Hearth or ggml the
old files are foreign (left to the size cap). One file per saved sequence, named by a digest of
its tokens.

File format (version `FORMAT_VERSION`, little-endian):

    8 bytes   b"HEARTHKV"
    u32       format version
    u32       header length H
    H bytes   header, JSON: {"key", "settings", "tokens" (count), "resume_from",
              "payload_bytes", "crc32" (of the payload), "arrays": [[name, dtype, shape], ...]}
    payload   the arrays' bytes in header order, the first being "tokens" (int32)

The other arrays are the cache's `SequenceState` (kvcache/base.py), as the cache made them.

Writes never hold up generation: `save` only queues a host copy; a background thread writes
it to a temporary file and renames it into place (a crash leaves no half file under a
final name). Reads (`load`) happen where the caller decides a load is cheaper than
evaluating. Size: after every write the whole root (every key's folder) is cut back to
`cap_bytes`, least recently used file first (a file's modification time is its last use:
loading or saving it again touches it). A damaged file (truncated, checksum wrong) is
ignored with a log line and removed; a foreign one (another key, another format version) is
ignored with a log line.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import io
import json
import logging
import os
import queue
import struct
import threading
import time
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np

from .kvcache import SequenceState
from .prompt_cache import common_prefix

__all__ = [
    "DiskPromptCache",
    "DiskEntry",
    "FORMAT_VERSION",
    "DamagedFileError",
    "software_versions",
]

_log = logging.getLogger("hearth.prompt_cache")

FORMAT_VERSION = 1
MAGIC = b"HEARTHKV"
SUFFIX = ".kv"
_FIXED = struct.Struct("<8sII")  # magic, version, header length
_MAX_HEADER = 1 << 24
_MAX_PENDING = 1 << 30  # bytes of host copies waiting to be written; more are dropped
_STALE_TEMP_SECONDS = 3600


@functools.cache
def software_versions() -> dict[str, str]:
    """The versions of what computes the cached bits, part of every cache key: Hearth's
    (`hearth.__version__`), ggml-python's package version and, where the library says them,
    ggml's own version and build commit ("" for one it does not say)."""
    import ggml

    from .. import __version__

    def said(name: str) -> str:
        try:
            return str(getattr(ggml, name)().decode())
        except (AttributeError, OSError, UnicodeDecodeError):
            return ""

    return {
        "hearth": __version__,
        "ggml_python": str(getattr(ggml, "__version__", "")),
        "ggml": said("ggml_version"),
        "ggml_commit": said("ggml_commit"),
    }


class DamagedFileError(ValueError):
    """A cache file that cannot be used; the message says why."""


@dataclass(frozen=True)
class DiskEntry:
    """One saved sequence: its file, tokens, first resumable position and size."""

    path: Path
    tokens: np.ndarray  # int32
    resume_from: int
    size: int


@dataclass(frozen=True)
class _Header:
    fields: dict[str, Any]
    payload_offset: int


def _read_header(f: BinaryIO, size: int) -> _Header:
    fixed = f.read(_FIXED.size)
    if len(fixed) < _FIXED.size:
        raise DamagedFileError(f"truncated ({size} bytes)")
    magic, version, length = _FIXED.unpack(fixed)
    if magic != MAGIC:
        raise DamagedFileError("not a Hearth prompt-cache file")
    if version != FORMAT_VERSION:
        raise DamagedFileError(f"format version {version}, this Hearth reads {FORMAT_VERSION}")
    if length > _MAX_HEADER:
        raise DamagedFileError("header too large")
    raw = f.read(length)
    if len(raw) < length:
        raise DamagedFileError(f"truncated ({size} bytes)")
    try:
        fields = json.loads(raw)
        payload = _FIXED.size + length + int(fields["payload_bytes"])
    except (ValueError, KeyError, TypeError):
        raise DamagedFileError("unreadable header") from None
    if size != payload:
        raise DamagedFileError(f"truncated ({size} bytes, the header says {payload})")
    return _Header(fields, _FIXED.size + length)


def _raw(a: np.ndarray) -> memoryview:
    """A C-contiguous array's bytes."""
    return a.reshape(-1).view(np.uint8).data


def _array_layout(fields: Mapping[str, Any]) -> list[tuple[str, np.dtype, tuple[int, ...]]]:
    try:
        layout = [(str(n), np.dtype(d), tuple(int(x) for x in s)) for n, d, s in fields["arrays"]]
    except (KeyError, TypeError, ValueError):
        raise DamagedFileError("unreadable array list") from None
    if any(dtype.kind not in "iu" or min(shape, default=0) < 0 for _, dtype, shape in layout):
        raise DamagedFileError("an array of a type this format does not hold")
    return layout


class DiskPromptCache:
    """See the module docstring. `save` from the runner thread (returns at once); `best` and
    `load` from the runner thread; `close` once, at unload."""

    def __init__(
        self, root: Path, settings: Mapping[str, Any], cap_bytes: int, min_tokens: int = 32
    ) -> None:
        self.root = Path(root)
        self.settings = {"format": FORMAT_VERSION, "software": software_versions(), **settings}
        text = json.dumps(self.settings, sort_keys=True)
        self.key = hashlib.sha256(text.encode()).hexdigest()[:32]
        self.folder = self.root / self.key
        self.cap_bytes = cap_bytes
        self.min_tokens = min_tokens  # shorter prefixes are not worth a file
        self.read_rate = 0.0  # bytes per second of the last load (0: none yet)
        self._lock = threading.Lock()
        self._entries: dict[str, DiskEntry] = {}  # file name -> entry
        self._queue: queue.Queue[tuple[np.ndarray, SequenceState] | None] = queue.Queue()
        self._pending = 0
        self.folder.mkdir(parents=True, exist_ok=True)
        self._scan()
        self._enforce_cap()  # the cap may have been lowered since the last run
        self._writer = threading.Thread(target=self._write_loop, name="prompt-cache", daemon=True)
        self._writer.start()

    # -- the index ------------------------------------------------------------------------
    def _scan(self) -> None:
        now = time.time()
        for path in self.folder.iterdir():
            if path.name.endswith(".tmp"):
                try:
                    if now - path.stat().st_mtime > _STALE_TEMP_SECONDS:
                        path.unlink()
                except OSError:
                    pass
            elif path.suffix == SUFFIX:
                entry = self._index_file(path)
                if entry is not None:
                    self._entries[path.name] = entry

    def _index_file(self, path: Path) -> DiskEntry | None:
        try:
            size = path.stat().st_size
            with open(path, "rb") as f:
                header = _read_header(f, size)
                self._check_key(header.fields)
                name, dtype, shape = _array_layout(header.fields)[0]
                if name != "tokens" or dtype != np.int32 or len(shape) != 1:
                    raise DamagedFileError("no token list")
                tokens = np.frombuffer(f.read(4 * shape[0]), dtype="<i4")
                if len(tokens) != shape[0]:
                    raise DamagedFileError(f"truncated ({size} bytes)")
            return DiskEntry(path, tokens.astype(np.int32), int(header.fields["resume_from"]), size)
        except (DamagedFileError, KeyError, TypeError, ValueError) as e:
            self._ignore(path, str(e))
        except OSError as e:
            _log.warning("prompt cache file %s could not be read: %s", path, e)
        return None

    def _check_key(self, fields: Mapping[str, Any]) -> None:
        if fields.get("key") != self.key or fields.get("settings") != self.settings:
            raise DamagedFileError("written for another model or other cache settings")

    def _ignore(self, path: Path, why: str) -> None:
        """Log a file that cannot be used; a damaged one is removed (a foreign one is left to
        the size cap: it may be another program's)."""
        foreign = why.startswith(("written for another", "format version", "not a Hearth"))
        if not foreign:
            with contextlib.suppress(OSError):
                path.unlink()
        _log.warning(
            "prompt cache file %s ignored%s: %s", path, "" if foreign else " and removed", why
        )

    @property
    def entries(self) -> list[DiskEntry]:
        with self._lock:
            return list(self._entries.values())

    def best(self, prompt: Sequence[int], limit: int) -> tuple[DiskEntry, int] | None:
        """The saved sequence sharing the longest prefix with `prompt` (counting at most
        `limit` tokens) that can continue there, and that prefix's length; None if none
        holds `min_tokens`."""
        head = np.asarray(prompt[:limit], dtype=np.int64)
        found: tuple[DiskEntry, int] | None = None
        for entry in self.entries:
            n = common_prefix(entry.tokens, head)
            if n >= max(entry.resume_from, self.min_tokens) and (found is None or n > found[1]):
                found = (entry, n)
        return found

    # -- reading --------------------------------------------------------------------------
    def load(self, entry: DiskEntry) -> SequenceState | None:
        """The state saved in `entry`'s file (and marks it used), or None, with a log line,
        when the file is gone, damaged or foreign (then it leaves the index)."""
        started = time.perf_counter()
        try:
            with open(entry.path, "rb") as f:
                data = f.read()
        except OSError as e:
            self._forget(entry)
            _log.warning("prompt cache file %s could not be read: %s", entry.path, e)
            return None
        try:
            state = self._decode(memoryview(data), len(data))
        except DamagedFileError as e:
            self._forget(entry)
            self._ignore(entry.path, str(e))
            return None
        elapsed = time.perf_counter() - started
        self.read_rate = len(data) / max(elapsed, 1e-6)
        self._touch(entry.path)
        return state

    def _decode(self, data: memoryview, size: int) -> SequenceState:
        header = _read_header(io.BytesIO(data[: _FIXED.size + _MAX_HEADER]), size)
        fields = header.fields
        self._check_key(fields)
        payload = data[header.payload_offset :]
        if zlib.crc32(payload) != fields.get("crc32"):
            raise DamagedFileError("checksum mismatch")
        arrays: dict[str, np.ndarray] = {}
        offset = 0
        for name, dtype, shape in _array_layout(fields):
            count = int(np.prod(shape, dtype=np.int64))
            nbytes = count * dtype.itemsize
            if offset + nbytes > len(payload):
                raise DamagedFileError("arrays overrun the payload")
            arrays[name] = np.frombuffer(payload, dtype, count, offset).reshape(shape)
            offset += nbytes
        arrays.pop("tokens", None)
        return SequenceState(arrays, int(fields["resume_from"]))

    # -- writing --------------------------------------------------------------------------
    def holds(self, tokens: Sequence[int] | np.ndarray) -> bool:
        """Whether exactly `tokens` are saved already (marking that file used)."""
        ids = np.asarray(tokens, dtype=np.int32)
        with self._lock:
            same = self._entries.get(self._file_name(ids))
        if same is None or not np.array_equal(same.tokens, ids):
            return False
        self._touch(same.path)
        return True

    def save(self, tokens: Sequence[int], state: SequenceState) -> None:
        """Queue `state` (the KV state of `tokens`) for the writer thread; returns at once.
        Already saved (the same tokens): marks that file used instead."""
        ids = np.asarray(tokens, dtype=np.int32)
        if self.holds(ids):
            return
        with self._lock:
            if self._pending + state.nbytes > _MAX_PENDING:
                _log.warning("prompt cache: %d tokens not saved, the writer is behind", len(ids))
                return
            self._pending += state.nbytes
        self._queue.put((ids, state))

    @staticmethod
    def _file_name(tokens: np.ndarray) -> str:
        return hashlib.sha256(tokens.astype("<i4").tobytes()).hexdigest()[:40] + SUFFIX

    def _write_loop(self) -> None:
        while (job := self._queue.get()) is not None:
            tokens, state = job
            try:
                self._write(tokens, state)
            except OSError as e:
                _log.warning("prompt cache: could not write %d tokens: %s", len(tokens), e)
            finally:
                with self._lock:
                    self._pending -= state.nbytes

    def _write(self, tokens: np.ndarray, state: SequenceState) -> None:
        arrays = [("tokens", tokens.astype("<i4"))]
        arrays += [(name, np.ascontiguousarray(a)) for name, a in sorted(state.arrays.items())]
        crc = 0
        for _, a in arrays:
            crc = zlib.crc32(_raw(a), crc)
        payload = sum(a.nbytes for _, a in arrays)
        header = json.dumps(
            {
                "key": self.key,
                "settings": self.settings,
                "tokens": len(tokens),
                "resume_from": state.resume_from,
                "payload_bytes": payload,
                "crc32": crc,
                "arrays": [[n, a.dtype.str, list(a.shape)] for n, a in arrays],
            }
        ).encode()
        size = _FIXED.size + len(header) + payload
        if size > self.cap_bytes:
            _log.info("prompt cache: %d tokens (%d bytes) exceed the cap", len(tokens), size)
            return
        path = self.folder / self._file_name(tokens)
        tmp = self.folder / f".{path.name}.{os.getpid()}.tmp"
        with open(tmp, "wb") as f:
            f.write(_FIXED.pack(MAGIC, FORMAT_VERSION, len(header)))
            f.write(header)
            for _, a in arrays:
                f.write(_raw(a))
        os.replace(tmp, path)
        entry = DiskEntry(path, tokens, state.resume_from, size)
        with self._lock:
            self._entries[path.name] = entry
            superseded = [
                e
                for e in self._entries.values()
                if e is not entry
                and len(e.tokens) < len(tokens)
                and e.resume_from >= entry.resume_from
                and np.array_equal(tokens[: len(e.tokens)], e.tokens)
            ]
        for e in superseded:  # the new file serves every prompt these did
            self._forget(e)
            self._unlink(e.path)
        self._enforce_cap()

    def _enforce_cap(self) -> None:
        """Remove least recently used files (of every key) until the root fits the cap."""
        files = []
        for path in self.root.glob(f"*/*{SUFFIX}"):
            try:
                st = path.stat()
            except OSError:
                continue
            files.append((st.st_mtime_ns, st.st_size, path))
        total = sum(size for _, size, _ in files)
        for _, size, path in sorted(files):
            if total <= self.cap_bytes:
                break
            self._unlink(path)
            total -= size
            if path.parent == self.folder:
                with self._lock:
                    self._entries.pop(path.name, None)
            _log.info("prompt cache: removed %s (the cap: %d bytes)", path, self.cap_bytes)

    # -- helpers --------------------------------------------------------------------------
    def _forget(self, entry: DiskEntry) -> None:
        with self._lock:
            if self._entries.get(entry.path.name) is entry:
                del self._entries[entry.path.name]

    @staticmethod
    def _unlink(path: Path) -> None:
        with contextlib.suppress(OSError):
            path.unlink()

    @staticmethod
    def _touch(path: Path) -> None:
        with contextlib.suppress(OSError):
            os.utime(path)

    def flush(self, timeout: float | None = None) -> bool:
        """Wait until every queued save is written (True) or `timeout` seconds pass."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            with self._lock:
                if self._pending == 0 and self._queue.empty():
                    return True
            if deadline is not None and time.monotonic() > deadline:
                return False
            time.sleep(0.01)

    def close(self, timeout: float = 4.0) -> None:
        """Write what is queued, waiting at most `timeout` seconds (a runner being stopped
        is killed soon after; an unfinished file stays a temporary one)."""
        self._queue.put(None)
        self._writer.join(timeout)
