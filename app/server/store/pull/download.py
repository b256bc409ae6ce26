"""Downloading one blob into the store: in parallel parts, resumable, verified.

The bytes go to `blobs/sha256-<hex>-partial`, a file as long as the blob, written by several
threads at once, each fetching its own byte range (HTTP `Range`), as Ollama's
`server/download.go` does. Next to it, `sha256-<hex>-partial.json` records how much of each
part is on disk (written only after those bytes were handed to the OS), so a pull that was
cancelled, lost its connection or was killed resumes where it stopped. A dropped
connection is retried (with a pause) from where that part stopped. When every part is in,
the whole file is hashed; only a file with the expected sha256 is renamed into place as the
blob, a wrong one is deleted. A lock per blob (a locked file under `.pull-locks/`) makes a
second pull of the same blob wait for the first and then find the blob there.

A full disk (ENOSPC) deletes the partial file, giving the space back, and is a sentence.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
import shutil
import sys
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import FIRST_EXCEPTION, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from typing import IO, Any

import httpx

from ..model_store import ModelStore, normalize_digest
from .errors import DiskFull, PullCancelled, PullError

__all__ = ["BlobSource", "fetch_blob", "blob_lock", "http_failure"]

CHUNK = 1 << 20
MAX_PARTS = 16  # as Ollama: up to 16 parts...
MIN_PART = 16 << 20  # ...of at least this many bytes (Ollama: 100 MB; smaller here so a
MAX_PART = 1 << 30  # few hundred MB still comes in parallel)
WORKERS = 4  # parts fetched at once
RETRIES = 6  # tries per part before the pull fails
BACKOFF = 1.0  # seconds before the first retry, doubled each time (at most 10 s)
_TICK = 0.25  # how often progress is reported and the part state saved

Progress = Callable[[int, int], None]  # (completed bytes, total bytes)


class _Retry(Exception):
    """A failure worth another try (a server error, a dropped connection)."""


@dataclass(frozen=True)
class BlobSource:
    """Where a blob comes from: its URL (redirects are followed) and what it must be."""

    url: str
    digest: str  # sha256:<hex>
    size: int
    headers: dict[str, str] = field(default_factory=dict)


@dataclass
class _Part:
    start: int
    end: int  # exclusive
    done: int = 0

    @property
    def offset(self) -> int:
        return self.start + self.done

    @property
    def left(self) -> int:
        return self.end - self.offset


def _plan(size: int) -> list[_Part]:
    part = min(max(-(-size // MAX_PARTS), MIN_PART), MAX_PART)
    return [_Part(s, min(s + part, size)) for s in range(0, size, part)] or [_Part(0, 0)]


def http_failure(response: httpx.Response, what: str) -> PullError:
    """A sentence for a failed HTTP answer (404: not found; 401/403: not allowed)."""
    code = response.status_code
    if code == 404:
        return PullError(f"{what} was not found (404 from {response.url.host})", 404)
    if code in (401, 403):
        return PullError(
            f"{response.url.host} refused access to {what} ({code}): the model may be private "
            "or gated (accept its licence on the website and set HF_TOKEN)",
            403,
        )
    return PullError(f"{response.url.host} answered {code} for {what}", 502)


@contextlib.contextmanager
def blob_lock(store: ModelStore, digest: str, cancel: threading.Event) -> Iterator[None]:
    """Hold the lock of one blob (other processes and threads wait); PullCancelled when
    `cancel` is set while waiting."""
    folder = store.root / ".pull-locks"
    folder.mkdir(exist_ok=True)
    with open(folder / normalize_digest(digest).replace(":", "-"), "a+b") as f:
        while not _try_lock(f):
            if cancel.wait(0.2):
                raise PullCancelled()
        try:
            yield
        finally:
            _unlock(f)


def _try_lock(f: IO[bytes]) -> bool:
    try:
        if sys.platform == "win32":
            import msvcrt

            msvcrt.locking(f.fileno(), msvcrt.LK_NBLCK, 1)
        else:
            import fcntl

            fcntl.flock(f.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return False
    return True


def _unlock(f: IO[bytes]) -> None:
    if sys.platform == "win32":
        import msvcrt

        f.seek(0)
        msvcrt.locking(f.fileno(), msvcrt.LK_UNLCK, 1)
    else:
        import fcntl

        fcntl.flock(f.fileno(), fcntl.LOCK_UN)


class _Download:
    """One blob's transfer into its partial file; `run()` returns when every part is in."""

    def __init__(
        self, store: ModelStore, source: BlobSource, client: httpx.Client, cancel: threading.Event
    ) -> None:
        self.source, self.client, self.cancel = source, client, cancel
        self.target = store.blob_path(source.digest)
        self.partial = self.target.with_name(self.target.name + "-partial")
        self.state = self.target.with_name(self.target.name + "-partial.json")
        self.stop = threading.Event()
        self.parts = self._resume() or _plan(source.size)
        self._state_lock = threading.Lock()

    @property
    def completed(self) -> int:
        return sum(p.done for p in self.parts)

    def _resume(self) -> list[_Part] | None:
        """The parts recorded by an earlier try, when they fit this blob and its file."""
        try:
            data = json.loads(self.state.read_text())
            parts = [_Part(int(a), int(b), int(c)) for a, b, c in data["parts"]]
            ok = (
                data["size"] == self.source.size
                and self.partial.stat().st_size == self.source.size
                and all(0 <= p.done <= p.end - p.start for p in parts)
            )
        except (OSError, ValueError, KeyError, TypeError):
            return None
        return parts if ok else None

    def _save(self) -> None:
        with self._state_lock:
            parts = [[p.start, p.end, p.done] for p in self.parts]
        data = {"size": self.source.size, "parts": parts}
        tmp = self.state.with_name(self.state.name + ".tmp")
        tmp.write_text(json.dumps(data))
        os.replace(tmp, self.state)

    def discard(self) -> None:
        for path in (self.partial, self.state):
            path.unlink(missing_ok=True)

    def run(self, progress: Progress) -> None:
        left = sum(p.left for p in self.parts)
        free = shutil.disk_usage(self.target.parent).free
        fresh = not self.partial.exists()
        if fresh and left > free:
            raise DiskFull(
                f"not enough disk space for this model: it needs {_gb(left)} more and "
                f"{self.target.parent} has {_gb(free)} free",
            )
        if fresh:
            with open(self.partial, "wb") as f:
                f.truncate(self.source.size)
            self._save()
        todo = [p for p in self.parts if p.left > 0]
        with ThreadPoolExecutor(max_workers=WORKERS, thread_name_prefix="pull") as pool:
            futures: list[Future[None]] = [pool.submit(self._fetch_part, p) for p in todo]
            try:
                while True:
                    done, pending = wait(futures, timeout=_TICK, return_when=FIRST_EXCEPTION)
                    progress(self.completed, self.source.size)
                    self._save()
                    failed = [f for f in done if f.exception() is not None]
                    if failed:
                        raise failed[0].exception()  # type: ignore[misc]
                    if not pending:
                        break
                    if self.cancel.is_set():
                        raise PullCancelled()
            except BaseException as e:
                self.stop.set()
                wait(futures)
                self._save()
                if isinstance(e, DiskFull):
                    self.discard()
                raise

    def _fetch_part(self, part: _Part) -> None:
        delay, last = BACKOFF, ""
        for _ in range(RETRIES):
            if self.stop.is_set():
                return
            before = part.done
            try:
                self._stream_part(part)
                if part.left == 0:
                    return
                last = "the connection closed early"
            except (httpx.TransportError, _Retry) as e:
                last = str(e) or type(e).__name__
            if part.done > before:
                delay = BACKOFF  # progress was made: start the pauses over
            if self.stop.wait(delay):
                return
            delay = min(delay * 2, 10.0)
        raise PullError(
            f"downloading {self.source.digest[7:19]} failed after {RETRIES} tries ({last}); "
            "pull again to resume",
            502,
        )

    def _stream_part(self, part: _Part) -> None:
        headers = {**self.source.headers, "Range": f"bytes={part.offset}-{part.end - 1}"}
        with self.client.stream("GET", self.source.url, headers=headers) as r:
            whole = r.status_code == 200 and part.offset == 0 and part.end == self.source.size
            if r.status_code >= 500 or r.status_code == 429:
                raise _Retry(f"{r.url.host} answered {r.status_code}")
            if r.status_code != 206 and not whole:
                if r.status_code == 200:
                    raise PullError(
                        f"{r.url.host} does not answer HTTP Range requests, so the download "
                        "cannot be split or resumed",
                        502,
                    )
                raise http_failure(r, f"blob {self.source.digest}")
            with open(self.partial, "r+b", buffering=0) as f:
                f.seek(part.offset)
                for chunk in r.iter_bytes(CHUNK):
                    if self.stop.is_set():
                        return
                    chunk = chunk[: part.left]
                    self._write(f, chunk)
                    with self._state_lock:
                        part.done += len(chunk)
                    if part.left == 0:
                        return

    def _write(self, f: Any, data: bytes) -> None:
        view = memoryview(data)
        try:
            while view:
                view = view[os.write(f.fileno(), view) :]
        except OSError as e:
            if e.errno in (errno.ENOSPC, errno.EDQUOT):
                raise DiskFull(
                    f"the disk holding {self.target.parent} is full: the download of "
                    f"{self.source.digest[7:19]} stopped and its partial file was removed; "
                    "free some space and pull again",
                ) from None
            raise

    def verify_and_commit(self) -> None:
        """Hash the finished file; rename it into place, or delete it when it is wrong."""
        h = hashlib.sha256()
        with open(self.partial, "rb") as f:
            while block := f.read(CHUNK):
                h.update(block)
        actual = "sha256:" + h.hexdigest()
        if actual != self.source.digest:
            self.discard()
            raise PullError(
                f"the downloaded file has digest {actual}, not the expected "
                f"{self.source.digest}: it was damaged or tampered with, so it was deleted "
                "and nothing was registered",
                502,
            )
        os.replace(self.partial, self.target)
        self.state.unlink(missing_ok=True)


def _gb(n: int) -> str:
    return f"{n / 1e9:.1f} GB" if n >= 1e8 else f"{n / 1e6:.1f} MB"


def fetch_blob(
    store: ModelStore,
    source: BlobSource,
    client: httpx.Client,
    progress: Progress,
    cancel: threading.Event,
    verifying: Callable[[], None] = lambda: None,
) -> None:
    """Bring the blob `source.digest` into the store (nothing to do when it is there);
    `verifying()` is called before its digest is checked. PullError, DiskFull or
    PullCancelled otherwise, and no blob is added."""
    with blob_lock(store, source.digest, cancel):
        if store.has_blob(source.digest):
            progress(source.size, source.size)
            return
        download = _Download(store, source, client, cancel)
        download.run(progress)
        progress(source.size, source.size)
        verifying()
        download.verify_and_commit()
