"""The desktop app's requests to `hearth serve`: hearth.client (the one client of the service)
run on a worker thread per request, its results delivered as Qt signals on the GUI thread.

Each request runs on a thread of its own, so no request ever blocks the window; a streamed
reply's NDJSON objects arrive as `chunk` signals in order, and `Call.cancel()` shuts the
request's connection (hearth.client's `Cancel`), which is how the service learns to stop
generating. Everything about speaking to the service (the API key's header, the NDJSON lines,
the error sentences) is hearth.client's; this module only moves its results across threads.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable
from typing import Any

from PySide6.QtCore import QObject, Signal

from ..client import Cancel, HearthClient, ServiceError

__all__ = ["ApiClient", "ApiError", "Call"]

# A failed request (hearth.client's error). kind: 'connection', 'http', 'stream' (an error
# line mid-stream), 'cancelled' (Call.cancel), or 'timeout'.
ApiError = ServiceError

# What a request's worker does: given its Cancel and a way to hand over each streamed
# object, it returns the answer (for a stream, its last object) or raises ServiceError.
Work = Callable[[Cancel, Callable[[dict[str, Any]], None]], Any]


class Call(QObject):
    """One request in flight. Exactly one of `done` or `failed` is emitted, once (`failed`
    with kind 'cancelled' at once when `cancel()` comes first)."""

    chunk = Signal(dict)  # each NDJSON object of a streamed reply
    done = Signal(object)  # the JSON body (or, for a stream, its last object; text if not JSON)
    failed = Signal(object)  # ApiError

    # from the worker thread to this object's slots (queued to the GUI thread, in order)
    _w_chunk = Signal(dict)
    _w_end = Signal(object, object)  # the answer, or None; the ApiError, or None

    def __init__(self, work: Work, parent: QObject) -> None:
        super().__init__(parent)
        self._cancel = Cancel()
        self.finished = False
        self._w_chunk.connect(self._on_chunk)
        self._w_end.connect(self._on_end)
        threading.Thread(target=self._run, args=(work,), name="hearth-api", daemon=True).start()

    def cancel(self) -> None:
        if not self.finished:
            self.finished = True
            self._cancel.cancel()
            self.failed.emit(ApiError("cancelled", kind="cancelled"))

    # -- the worker thread --------------------------------------------------------------------

    def _run(self, work: Work) -> None:
        answer: Any = None
        error: ApiError | None = None
        try:
            answer = work(self._cancel, self._w_chunk.emit)
        except ServiceError as e:
            error = e
        except Exception as e:  # a request's failure must end the call, never hang it
            error = ApiError(str(e) or type(e).__name__, kind="connection")
        with contextlib.suppress(RuntimeError):  # the app quit and took this object with it
            self._w_end.emit(answer, error)

    # -- the GUI thread -----------------------------------------------------------------------

    def _on_chunk(self, obj: dict[str, Any]) -> None:
        if not self.finished:
            self.chunk.emit(obj)

    def _on_end(self, answer: Any, error: ApiError | None) -> None:
        if not self.finished:
            self.finished = True
            if error is not None:
                self.failed.emit(error)
            else:
                self.done.emit(answer)
        self.deleteLater()  # the worker has emitted its last signal


class ApiClient(QObject):
    """Sends requests to one service endpoint; `set_endpoint` switches it (service restarts)."""

    def __init__(self, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.base_url = ""
        self._token = ""

    def set_endpoint(self, base_url: str, token: str = "") -> None:
        self.base_url = base_url.rstrip("/")
        self._token = token

    @property
    def token(self) -> str:
        """The API key sent with each request ('' when none), for other clients of the same
        service (document embeddings)."""
        return self._token

    def client(self, timeout: float | None = None) -> HearthClient:
        """hearth.client for the current endpoint (for work on the app's own worker threads:
        the agent loop's model turns, compaction); `timeout` bounds each read (None: none)."""
        return HearthClient(self.base_url, self._token, timeout)

    def get(self, path: str, timeout_ms: int = 15000) -> Call:
        client = self.client(timeout_ms / 1000 or None)
        return Call(lambda cancel, _: client.request("GET", path, cancel=cancel), self)

    def post(
        self, path: str, body: dict[str, Any], stream: bool = False, timeout_ms: int = 0
    ) -> Call:
        # A model load can take minutes before the first byte: streams wait as long as needed
        # (for a stream the timeout bounds the silence between bytes, not the whole reply).
        client = self.client((timeout_ms or (0 if stream else 120000)) / 1000 or None)
        if not stream:
            return Call(lambda cancel, _: client.request("POST", path, body, cancel=cancel), self)

        def read(cancel: Cancel, chunk: Callable[[dict[str, Any]], None]) -> dict[str, Any]:
            last: dict[str, Any] = {}
            for obj in client.stream(path, body, cancel):
                last = obj
                chunk(obj)
            return last

        return Call(read, self)

    def delete(self, path: str, body: dict[str, Any]) -> Call:
        client = self.client(60.0)
        return Call(lambda cancel, _: client.request("DELETE", path, body, cancel=cancel), self)
