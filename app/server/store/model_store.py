"""The model store: content-addressed blobs plus one manifest per `name:tag`.

Layout under the models folder (`hearth.paths.models_dir()`, `HEARTH_MODELS` overrides)::

    blobs/sha256-<hex>                    model files, templates, parameters... by content
    manifests/<namespace>/<model>/<tag>   Ollama's manifest JSON: {"layers": [{mediaType,
                                          digest, size}, ...]}

A model file can be copied in, hard-linked, or (across file systems) symlinked, so importing
a large GGUF need not double the disk space. Manifests are plain files read on every call, so
a CLI command that edits the store (`hearth import-ollama`) is seen by a running service.
Names go through `ModelName`, which refuses anything that could leave the store.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import shutil
import tempfile
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .names import ModelName

__all__ = [
    "MEDIA_TYPES",
    "Layer",
    "ModelRecord",
    "ModelStore",
    "ModelNotFound",
    "BlobError",
    "BlobWriter",
    "normalize_digest",
]

_PREFIX = "application/vnd.ollama.image."
MEDIA_TYPES = {
    kind: _PREFIX + kind
    for kind in ("model", "projector", "adapter", "template", "system", "params", "license")
} | {"messages": _PREFIX + "messages"}
_DIGEST = re.compile(r"sha256[:-]([0-9a-f]{64})")
_CHUNK = 1 << 20

Progress = Callable[[int, int], None]  # (completed bytes, total bytes)


class ModelNotFound(LookupError):
    def __init__(self, name: str) -> None:
        super().__init__(f"model '{name}' not found")
        self.message = f"model '{name}' not found"

    def __str__(self) -> str:
        return self.message


class BlobError(ValueError):
    """A blob digest is malformed, missing or does not match its content."""


def normalize_digest(digest: str) -> str:
    """`sha256:<hex>` (also accepts `sha256-<hex>`); BlobError otherwise."""
    m = _DIGEST.fullmatch(digest.strip().lower()) if isinstance(digest, str) else None
    if m is None:
        raise BlobError(f"'{digest}' is not a blob digest (expected sha256:<64 hex digits>)")
    return f"sha256:{m.group(1)}"


@dataclass(frozen=True)
class Layer:
    media_type: str
    digest: str
    size: int

    @property
    def kind(self) -> str:
        return self.media_type.removeprefix(_PREFIX)

    def to_json(self) -> dict[str, Any]:
        return {"mediaType": self.media_type, "digest": self.digest, "size": self.size}


@dataclass(frozen=True)
class ModelRecord:
    """One manifest: a named model and its layers."""

    name: ModelName
    digest: str  # sha256 hex of the manifest file (what /api/tags calls the digest)
    layers: tuple[Layer, ...]
    modified: float  # the manifest's mtime, seconds since the epoch

    def layer(self, kind: str) -> Layer | None:
        return next((x for x in self.layers if x.kind == kind), None)

    @property
    def size(self) -> int:
        return sum(x.size for x in self.layers)


class BlobWriter:
    """Receives a blob's bytes (e.g. an upload), hashing as it goes; `commit()` checks the
    digest and moves the file into place, `abort()` throws it away."""

    def __init__(self, store: ModelStore, digest: str) -> None:
        self.digest = normalize_digest(digest)
        self._store = store
        self._hash = hashlib.sha256()
        fd, name = tempfile.mkstemp(prefix=".upload-", dir=store.blobs)
        self._tmp = Path(name)
        self._file = os.fdopen(fd, "wb")
        self.size = 0

    def write(self, data: bytes) -> None:
        self._hash.update(data)
        self._file.write(data)
        self.size += len(data)

    def commit(self) -> Layer:
        self._file.close()
        actual = "sha256:" + self._hash.hexdigest()
        if actual != self.digest:
            self._tmp.unlink(missing_ok=True)
            raise BlobError(f"the upload's content has digest {actual}, not {self.digest}")
        os.replace(self._tmp, self._store.blob_path(self.digest))
        return Layer(MEDIA_TYPES["model"], self.digest, self.size)

    def abort(self) -> None:
        self._file.close()
        self._tmp.unlink(missing_ok=True)


def _atomic_write(target: Path, data: bytes) -> None:
    """Write through a temporary file of its own, so two writers at once (two pulls of one
    model) each replace the file whole and never share a half-written one."""
    fd, name = tempfile.mkstemp(prefix="." + target.name + ".", suffix=".tmp", dir=target.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(name, target)
    except BaseException:
        Path(name).unlink(missing_ok=True)
        raise


class ModelStore:
    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        self.blobs = self.root / "blobs"
        self.manifests = self.root / "manifests"
        self.blobs.mkdir(parents=True, exist_ok=True)
        self.manifests.mkdir(parents=True, exist_ok=True)

    # -- blobs -----------------------------------------------------------------------------

    def blob_path(self, digest: str) -> Path:
        return self.blobs / normalize_digest(digest).replace(":", "-")

    def has_blob(self, digest: str) -> bool:
        return self.blob_path(digest).is_file()  # follows symlinks: a dangling link is absent

    def put_bytes(self, data: bytes, kind: str) -> Layer:
        """Store a small blob (template, system prompt, parameters) and describe it as a layer."""
        digest = "sha256:" + hashlib.sha256(data).hexdigest()
        path = self.blob_path(digest)
        if not path.is_file():
            _atomic_write(path, data)
        return Layer(MEDIA_TYPES[kind], digest, len(data))

    def read_text(self, layer: Layer | None) -> str | None:
        if layer is None:
            return None
        try:
            return self.blob_path(layer.digest).read_text("utf-8")
        except (OSError, UnicodeDecodeError):
            return None

    def add_file(
        self,
        source: Path,
        link: bool = False,
        progress: Progress | None = None,
        kind: str = "model",
    ) -> Layer:
        """Bring a local file into the store: hard link (or symlink across file systems) when
        `link`, else copy. Hashing reports progress; a known file is not hashed twice."""
        source = Path(source).resolve()
        size = source.stat().st_size
        digest = self._cached_digest(source) or self._hash_file(source, progress)
        target = self.blob_path(digest)
        if not target.is_file():
            target.unlink(missing_ok=True)  # a dangling symlink from an earlier link
            if link:
                try:
                    os.link(source, target)
                except OSError:
                    os.symlink(source, target)
            else:
                self._copy(source, target, progress)
        self._remember_digest(source, digest)
        return Layer(MEDIA_TYPES[kind], digest, size)

    def temp_blob(self, prefix: str = ".convert-") -> Path:
        """A new empty file in the blob folder, for a blob being written (`commit_blob`)."""
        fd, name = tempfile.mkstemp(prefix=prefix, suffix=".partial", dir=self.blobs)
        os.close(fd)
        return Path(name)

    def commit_blob(
        self, tmp: Path, kind: str = "model", progress: Progress | None = None
    ) -> Layer:
        """Hash a finished `temp_blob` file and move it into place as a blob; returns its
        layer. The file is removed when that fails."""
        try:
            digest = self._hash_file(tmp, progress)
            size = tmp.stat().st_size
            os.replace(tmp, self.blob_path(digest))
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
        return Layer(MEDIA_TYPES[kind], digest, size)

    def adopt(self, source: Path, digest: str, copy: bool = False) -> int:
        """Bring in a file whose digest is already known (another content-addressed store):
        hard link, else symlink, or copy. Returns its size."""
        target = self.blob_path(digest)
        if not target.is_file():
            target.unlink(missing_ok=True)
            if copy:
                self._copy(Path(source), target, None)
            else:
                try:
                    os.link(source, target)
                except OSError:
                    os.symlink(Path(source).resolve(), target)
        return target.stat().st_size

    def _hash_file(self, path: Path, progress: Progress | None) -> str:
        h = hashlib.sha256()
        total, done = path.stat().st_size, 0
        with open(path, "rb") as f:
            while block := f.read(_CHUNK):
                h.update(block)
                done += len(block)
                if progress is not None:
                    progress(done, total)
        return "sha256:" + h.hexdigest()

    def _copy(self, source: Path, target: Path, progress: Progress | None) -> None:
        tmp = target.with_name(target.name + ".partial")
        total, done = source.stat().st_size, 0
        with open(source, "rb") as src, open(tmp, "wb") as dst:
            while block := src.read(_CHUNK):
                dst.write(block)
                done += len(block)
                if progress is not None:
                    progress(done, total)
        os.replace(tmp, target)

    # Digests of files brought in by path, keyed by (size, mtime) so edits are noticed.
    def _digest_index(self) -> Path:
        return self.root / ".path-digests.json"

    def _cached_digest(self, path: Path) -> str | None:
        try:
            index = json.loads(self._digest_index().read_text())
            size, mtime, digest = index[str(path)]
        except (OSError, ValueError, KeyError, TypeError):
            return None
        st = path.stat()
        if (size, mtime) == (st.st_size, st.st_mtime_ns) and self.has_blob(digest):
            return str(digest)
        return None

    def _remember_digest(self, path: Path, digest: str) -> None:
        try:
            index = json.loads(self._digest_index().read_text())
            if not isinstance(index, dict):
                index = {}
        except (OSError, ValueError):
            index = {}
        st = path.stat()
        index[str(path)] = [st.st_size, st.st_mtime_ns, digest]
        tmp = self._digest_index().with_suffix(".tmp")
        tmp.write_text(json.dumps(index))
        os.replace(tmp, self._digest_index())

    # -- manifests -------------------------------------------------------------------------

    def _manifest_path(self, name: ModelName) -> Path:
        return self.manifests.joinpath(*name.parts)

    def _find(self, name: ModelName) -> Path | None:
        exact = self._manifest_path(name)
        if exact.is_file():
            return exact
        for path in self._manifest_files():  # names are case-insensitive
            if self._name_of(path).same_as(name):
                return path
        return None

    def _manifest_files(self) -> Iterable[Path]:
        for pattern in ("*/*/*", "*/*/*/*"):  # namespace/model/tag, host/namespace/model/tag
            yield from (
                p for p in self.manifests.glob(pattern) if p.is_file() and "." not in p.name[:1]
            )

    def _name_of(self, path: Path) -> ModelName:
        rel = path.relative_to(self.manifests).parts
        host = rel[0].replace("+", ":") if len(rel) == 4 else ""
        return ModelName(rel[-3], rel[-2], rel[-1], host)

    def _load(self, path: Path) -> ModelRecord | None:
        try:
            raw = path.read_bytes()
            data = json.loads(raw)
            layers = tuple(
                Layer(str(x["mediaType"]), normalize_digest(x["digest"]), int(x["size"]))
                for x in data["layers"]
            )
            name = self._name_of(path)
            ModelName.parse(name.display)  # a hand-made folder with an odd name is skipped
        except (OSError, ValueError, KeyError, TypeError):
            return None
        digest = hashlib.sha256(raw).hexdigest()
        return ModelRecord(name, digest, layers, path.stat().st_mtime)

    def resolve(self, name: str | ModelName) -> ModelRecord:
        """The model called `name`; ModelNotFound (its message names it) when absent."""
        parsed = name if isinstance(name, ModelName) else ModelName.parse(name)
        path = self._find(parsed)
        record = self._load(path) if path is not None else None
        if record is None:
            raise ModelNotFound(parsed.display if isinstance(name, ModelName) else str(name))
        return record

    def list(self) -> list[ModelRecord]:
        records = [r for p in self._manifest_files() if (r := self._load(p)) is not None]
        return sorted(records, key=lambda r: -r.modified)

    def write_manifest(self, name: str | ModelName, layers: Iterable[Layer]) -> ModelRecord:
        parsed = name if isinstance(name, ModelName) else ModelName.parse(name)
        layers = list(layers)
        for layer in layers:
            if not self.has_blob(layer.digest):
                raise BlobError(f"blob {layer.digest} is missing from the store")
        old = self._find(parsed)
        target = self._manifest_path(parsed)
        target.parent.mkdir(parents=True, exist_ok=True)
        data = {
            "schemaVersion": 2,
            "mediaType": "application/vnd.docker.distribution.manifest.v2+json",
            "layers": [x.to_json() for x in layers],
        }
        _atomic_write(target, json.dumps(data, indent=1).encode())
        if old is not None and old != target:
            old.unlink(missing_ok=True)
            self._prune_dirs(old.parent)
        record = self._load(target)
        assert record is not None
        return record

    def copy(self, source: str, destination: str) -> ModelRecord:
        src = self.resolve(source)
        return self.write_manifest(destination, src.layers)

    def delete(self, name: str) -> None:
        """Remove the manifest, then every blob that no other manifest uses."""
        record = self.resolve(name)
        path = self._find(record.name)
        assert path is not None
        path.unlink()
        self._prune_dirs(path.parent)
        used = {x.digest for r in self.list() for x in r.layers}
        for layer in record.layers:
            if layer.digest not in used:
                with contextlib.suppress(OSError):
                    self.blob_path(layer.digest).unlink()

    def _prune_dirs(self, folder: Path) -> None:
        while folder != self.manifests and folder.is_relative_to(self.manifests):
            try:
                folder.rmdir()
            except OSError:
                return
            folder = folder.parent

    # -- the built-in default model ------------------------------------------------------------

    def register_default(self, name: str, locate: Callable[[], Path], sha256: str) -> bool:
        """Register the built-in model once (first start); a later `rm` sticks. Returns True
        when it was registered now. `locate` assembles the file on first use."""
        marker = self.root / ".default-registered"
        if marker.exists():
            return False
        with contextlib.suppress(ModelNotFound):
            self.resolve(name)
            marker.write_text(name)
            return False
        path = locate()
        digest = normalize_digest("sha256:" + sha256)
        target = self.blob_path(digest)
        if not target.is_file():
            try:
                os.link(path, target)  # same inode: no second copy of the file
            except OSError:
                shutil.copyfile(path, target)
        layer = Layer(MEDIA_TYPES["model"], digest, target.stat().st_size)
        self._remember_digest(Path(path).resolve(), digest)
        # The built-in model is a base model: it rarely ends a turn by itself, so replies are
        # capped by default (requests and Modelfiles can still set num_predict).
        params = self.put_bytes(json.dumps({"num_predict": 384}).encode(), "params")
        self.write_manifest(name, [layer, params])
        marker.write_text(f"{name} {time.time():.0f}")
        return True
