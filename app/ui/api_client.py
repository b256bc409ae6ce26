"""The HTTP client of `hearth serve` (the Ollama API), built on QNetworkAccessManager.

QNetworkAccessManager does its socket work on Qt's own network thread and reports back through
signals on the GUI thread, so no request ever blocks the window; a streamed reply is parsed line
by line (NDJSON) as bytes arrive, and `Call.cancel()` aborts the connection, which is how the
service learns to stop generating.
"""

from __future__ import annotations

import json
from typing import Any

from PySide6.QtCore import QByteArray, QObject, QUrl, Signal
from PySide6.QtNetwork import QNetworkAccessManager, QNetworkReply, QNetworkRequest

__all__ = ["ApiClient", "ApiError", "Call", "error_text"]


class ApiError(Exception):
    """A failed request. kind: 'connection', 'http', 'stream' (an error line mid-stream),
    'cancelled' (Call.cancel), or 'timeout'."""

    def __init__(self, message: str, kind: str = "http", status: int = 0) -> None:
        super().__init__(message)
        self.message = message
        self.kind = kind
        self.status = status

    def __repr__(self) -> str:
        return f"ApiError({self.message!r}, kind={self.kind!r}, status={self.status})"


class Call(QObject):
    """One request in flight. Exactly one of `done` or `failed` is emitted, once."""

    chunk = Signal(dict)  # each NDJSON line of a streamed reply
    done = Signal(object)  # the JSON body (or, for a stream, its last line; text if not JSON)
    failed = Signal(object)  # ApiError

    def __init__(self, reply: QNetworkReply, stream: bool, parent: QObject) -> None:
        super().__init__(parent)
        self._reply = reply
        self._stream = stream
        self._buffer = b""
        self._last: dict[str, Any] | None = None
        self._cancelled = False
        self._error: ApiError | None = None
        self.finished = False
        reply.readyRead.connect(self._on_ready_read)
        reply.finished.connect(self._on_finished)

    def cancel(self) -> None:
        if not self.finished:
            self._cancelled = True
            self._reply.abort()

    def _status(self) -> int:
        code = self._reply.attribute(QNetworkRequest.Attribute.HttpStatusCodeAttribute)
        return int(code) if code else 0

    def _on_ready_read(self) -> None:
        if not self._stream or self._error is not None or self._status() >= 400:
            return  # whole bodies (and error bodies) are read once, at the end
        self._buffer += bytes(self._reply.readAll().data())
        *lines, self._buffer = self._buffer.split(b"\n")
        for line in lines:
            self._line(line)

    def _line(self, line: bytes) -> None:
        if not line.strip() or self._error is not None:
            return
        try:
            obj = json.loads(line)
        except ValueError:
            self._error = ApiError(f"the service sent a line that is not JSON: {line[:80]!r}")
            self._reply.abort()
            return
        if isinstance(obj, dict) and obj.get("error"):
            self._error = ApiError(str(obj["error"]), kind="stream", status=self._status())
            return
        if isinstance(obj, dict):
            self._last = obj
            self.chunk.emit(obj)

    def _on_finished(self) -> None:
        if self.finished:
            return
        self.finished = True
        reply = self._reply
        status = self._status()
        readable = reply.isOpen() and not self._cancelled  # an aborted reply has no body
        if readable and self._stream and status < 400 and self._error is None:
            self._buffer += bytes(reply.readAll().data())
            self._line(self._buffer)
            self._buffer = b""
        whole = readable and (not self._stream or status >= 400)
        body = bytes(reply.readAll().data()) if whole else b""
        net_error = reply.error()
        reply.deleteLater()
        if self._cancelled:
            self.failed.emit(ApiError("cancelled", kind="cancelled"))
        elif self._error is not None:
            self.failed.emit(self._error)
        elif status >= 400:
            self.failed.emit(ApiError(error_text(body, status), kind="http", status=status))
        elif net_error != QNetworkReply.NetworkError.NoError:
            kind = (
                "timeout"
                if net_error == QNetworkReply.NetworkError.OperationCanceledError
                else "connection"
            )
            self.failed.emit(ApiError(reply.errorString(), kind=kind))
        elif self._stream:
            self.done.emit(self._last or {})
        else:
            self.done.emit(_parse(body))
        self.deleteLater()


def _parse(body: bytes) -> Any:
    try:
        return json.loads(body) if body.strip() else {}
    except ValueError:
        return body.decode("utf-8", "replace")


def error_text(body: bytes, status: int) -> str:
    parsed = _parse(body)
    if isinstance(parsed, dict):
        err = parsed.get("error") or parsed.get("detail")
        if isinstance(err, dict):
            err = err.get("message")
        if err:
            return str(err)
    text = parsed if isinstance(parsed, str) else ""
    return text.strip()[:300] or f"HTTP {status}"


class ApiClient(QObject):
    """Sends requests to one service endpoint; `set_endpoint` switches it (service restarts)."""

    def __init__(self, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self._nam = QNetworkAccessManager(self)
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

    def _request(self, path: str, timeout_ms: int) -> QNetworkRequest:
        req = QNetworkRequest(QUrl(self.base_url + path))
        req.setHeader(QNetworkRequest.KnownHeaders.ContentTypeHeader, "application/json")
        if self._token:
            req.setRawHeader(b"Authorization", f"Bearer {self._token}".encode())
        # For streams this bounds the silence between bytes, not the whole reply.
        req.setTransferTimeout(timeout_ms)
        return req

    def get(self, path: str, timeout_ms: int = 15000) -> Call:
        return Call(self._nam.get(self._request(path, timeout_ms)), False, self)

    def post(
        self, path: str, body: dict[str, Any], stream: bool = False, timeout_ms: int = 0
    ) -> Call:
        # A model load can take minutes before the first byte: streams wait as long as needed.
        timeout = timeout_ms or (0 if stream else 120000)
        data = QByteArray(json.dumps(body).encode())
        return Call(self._nam.post(self._request(path, timeout), data), stream, self)

    def delete(self, path: str, body: dict[str, Any]) -> Call:
        data = QByteArray(json.dumps(body).encode())
        reply = self._nam.sendCustomRequest(self._request(path, 60000), b"DELETE", data)
        return Call(reply, False, self)
