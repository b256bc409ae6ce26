"""The one client of Hearth's own service (`hearth serve`), without Qt: the CLI, the desktop
app (which wraps it for its threads and signals, ui/api_client.py), the agent's model turns
and hearth.documents all speak to the service through it.

One rule each for what every client needs: the API key goes as `Authorization: Bearer <key>`;
a streamed reply is NDJSON, one object a line; an error is one sentence, the service's own
(`{"error": "..."}`, OpenAI's `{"error": {"message": ...}}`, FastAPI's `{"detail": ...}`), else
the body's text, else the HTTP status: `ServiceError` carries it, also for an error line in the
middle of a stream. A request can be cancelled from any thread (`Cancel`): it shuts the
request's socket, which wakes a blocked read at once and tells the service to stop generating.

Each request has a connection of its own (the stdlib's http.client), so one client may be used
from several threads at once.
"""

from __future__ import annotations

import contextlib
import hashlib
import http.client
import json
import os
import socket
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any
from urllib.parse import urlsplit

__all__ = [
    "Cancel",
    "HearthClient",
    "ServiceError",
    "ServiceUnreachable",
    "auth_headers",
    "error_text",
    "parse_line",
    "reported_num_ctx",
]


class ServiceError(RuntimeError):
    """A failed request; `message` is the sentence to show. `kind`: 'http' (an error status),
    'stream' (an error line mid-stream, or a line that is not JSON), 'connection' (nothing
    answers, or the connection broke), 'timeout', or 'cancelled' (`Cancel.cancel()`)."""

    def __init__(self, message: str, kind: str = "http", status: int = 0) -> None:
        super().__init__(message)
        self.message = message
        self.kind = kind
        self.status = status

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.message!r}, kind={self.kind!r}, status={self.status})"


class ServiceUnreachable(ServiceError):
    """Nothing answers at the address."""

    def __init__(self, message: str) -> None:
        super().__init__(message, kind="connection")


def auth_headers(api_key: str | None) -> dict[str, str]:
    """The header that carries the service's API key (none without a key)."""
    return {"Authorization": f"Bearer {api_key}"} if api_key else {}


def _parse(body: bytes) -> Any:
    try:
        return json.loads(body) if body.strip() else {}
    except ValueError:
        return body.decode("utf-8", "replace")


def error_text(body: bytes, status: int) -> str:
    """The sentence of an error answer: the service's own message, else the body's text (at
    most 300 characters), else 'the service answered HTTP <status>'."""
    parsed = _parse(body)
    if isinstance(parsed, dict):
        err = parsed.get("error") or parsed.get("detail")
        if isinstance(err, dict):
            err = err.get("message")
        if err:
            return str(err)
    text = parsed.strip()[:300] if isinstance(parsed, str) else ""
    return text or f"the service answered HTTP {status}"


def parse_line(raw: bytes, status: int = 200) -> dict[str, Any] | None:
    """One NDJSON line of a streamed reply: its object, None for a blank line (or a value that
    is not an object); an `{"error"}` line or a line that is not JSON raises ServiceError."""
    if not raw.strip():
        return None
    try:
        obj = json.loads(raw)
    except ValueError:
        raise ServiceError(
            f"the service sent a line that is not JSON: {raw[:80]!r}", kind="stream"
        ) from None
    if not isinstance(obj, dict):
        return None
    if obj.get("error"):
        err = obj["error"]
        if isinstance(err, dict):
            err = err.get("message") or err
        raise ServiceError(str(err), kind="stream", status=status)
    return obj


def reported_num_ctx(final: dict[str, Any]) -> int:
    """The context length the service fitted a reply's prompt to, from the reply's final record
    (`"hearth": {"num_ctx"}`); 0 from a service that does not say (not Hearth)."""
    extra = final.get("hearth")
    return int(extra.get("num_ctx") or 0) if isinstance(extra, dict) else 0


class Cancel:
    """Ends a request from any thread: `cancel()` shuts the socket of the request it guards
    (and of any later one), whose reading then raises ServiceError kind 'cancelled'."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._conn: http.client.HTTPConnection | None = None
        self.cancelled = False

    def cancel(self) -> None:
        with self._lock:
            self.cancelled = True
            conn = self._conn
        if conn is not None and conn.sock is not None:
            with contextlib.suppress(OSError):
                conn.sock.shutdown(socket.SHUT_RDWR)

    def _attach(self, conn: http.client.HTTPConnection | None) -> None:
        with self._lock:
            if self.cancelled and conn is not None:
                raise ServiceError("cancelled", kind="cancelled")
            self._conn = conn

    def check(self) -> None:
        if self.cancelled:
            raise ServiceError("cancelled", kind="cancelled")


class HearthClient:
    """The service at `base_url`, with its API key (if any). `timeout`: seconds a read may wait
    for the service (None: as long as it takes, e.g. a model loading); connecting waits at
    most `connect_timeout`."""

    def __init__(
        self,
        base_url: str,
        api_key: str | None = None,
        timeout: float | None = None,
        connect_timeout: float = 5.0,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.api_key = api_key or ""
        self.timeout = timeout
        self.connect_timeout = connect_timeout
        parts = urlsplit(self.base_url)
        self._https = parts.scheme == "https"
        self._host = parts.hostname or "127.0.0.1"
        self._port = parts.port or (443 if self._https else 80)
        self._prefix = parts.path.rstrip("/")

    # kept for the callers that used a pooled client: there is nothing to close
    def close(self) -> None:
        pass

    def __enter__(self) -> HearthClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- the transport --------------------------------------------------------------------

    def _open(
        self,
        method: str,
        path: str,
        body: bytes | IO[bytes] | None,
        headers: dict[str, str],
        timeout: float | None,
        cancel: Cancel | None,
    ) -> tuple[http.client.HTTPConnection, http.client.HTTPResponse]:
        cls = http.client.HTTPSConnection if self._https else http.client.HTTPConnection
        conn = cls(self._host, self._port, timeout=self.connect_timeout)
        if cancel is not None:
            cancel._attach(conn)
        try:
            conn.connect()
            conn.sock.settimeout(timeout)
            conn.request(
                method, self._prefix + path, body, {**headers, **auth_headers(self.api_key)}
            )
            return conn, conn.getresponse()
        except BaseException as e:
            _release(conn, cancel)
            raise self._failure(e, cancel) from None

    def _failure(self, e: BaseException, cancel: Cancel | None) -> BaseException:
        if isinstance(e, ServiceError) or not isinstance(e, OSError | http.client.HTTPException):
            return e
        if cancel is not None and cancel.cancelled:
            return ServiceError("cancelled", kind="cancelled")
        if isinstance(e, ConnectionRefusedError | socket.gaierror):
            return ServiceUnreachable(f"no Hearth service answers at {self.base_url}")
        if isinstance(e, TimeoutError):
            return ServiceError(f"the service at {self.base_url} did not answer in time", "timeout")
        return ServiceError(f"the connection to the service broke: {e}", kind="connection")

    def request(
        self,
        method: str,
        path: str,
        body: dict[str, Any] | None = None,
        *,
        timeout: float | None = -1.0,
        cancel: Cancel | None = None,
    ) -> Any:
        """Send `body` as JSON (if any); the JSON answer ({} for an empty one, the text for
        one that is not JSON). An error status raises ServiceError with its sentence.
        `timeout` (seconds a read may wait; None: no limit) is the client's when negative."""
        data = json.dumps(body).encode() if body is not None else None
        headers = {"Content-Type": "application/json"} if data is not None else {}
        wait = self.timeout if timeout is not None and timeout < 0 else timeout
        return self._call(method, path, data, headers, wait, cancel)

    def _call(
        self,
        method: str,
        path: str,
        data: bytes | IO[bytes] | None,
        headers: dict[str, str],
        timeout: float | None,
        cancel: Cancel | None,
    ) -> Any:
        conn, resp = self._open(method, path, data, headers, timeout, cancel)
        try:
            raw = resp.read()
        except (OSError, http.client.HTTPException) as e:
            raise self._failure(e, cancel) from None
        finally:
            _release(conn, cancel)
        if resp.status >= 400:
            raise ServiceError(error_text(raw, resp.status), kind="http", status=resp.status)
        return _parse(raw)

    def stream(
        self, path: str, body: dict[str, Any], cancel: Cancel | None = None
    ) -> Iterator[dict[str, Any]]:
        """POST `body` and yield the reply's NDJSON objects as they come; an error line raises
        ServiceError, and so does `cancel.cancel()` (kind 'cancelled')."""
        data = json.dumps(body).encode()
        headers = {"Content-Type": "application/json"}
        conn, resp = self._open("POST", path, data, headers, self.timeout, cancel)
        try:
            if resp.status >= 400:
                raise ServiceError(error_text(resp.read(), resp.status), "http", resp.status)
            for raw in resp:
                if cancel is not None:
                    cancel.check()
                obj = parse_line(raw, resp.status)
                if obj is not None:
                    yield obj
            if cancel is not None:
                cancel.check()
        except (OSError, http.client.HTTPException) as e:
            raise self._failure(e, cancel) from None
        finally:
            _release(conn, cancel)

    # -- endpoints ------------------------------------------------------------------------

    def is_hearth(self) -> bool:
        """True when a Hearth service answers here (an Ollama server does not count)."""
        try:
            text = self.request("GET", "/", timeout=2.0)
        except ServiceError:
            return False
        return isinstance(text, str) and text.startswith("Hearth")

    def models(self) -> list[dict[str, Any]]:
        return list(self.request("GET", "/api/tags").get("models", []))

    def show(self, model: str, verbose: bool = False) -> dict[str, Any]:
        return dict(self.request("POST", "/api/show", {"model": model, "verbose": verbose}))

    def num_ctx(self, model: str) -> int:
        """The context length the service runs `model` with when a request sets none (its
        Modelfile's `num_ctx`, else the service's default, capped at the trained length), as
        /api/show reports it; 0 from a service that does not say (not Hearth)."""
        extra = self.show(model).get("hearth") or {}
        return int(extra.get("num_ctx") or 0)

    def ps(self) -> list[dict[str, Any]]:
        return list(self.request("GET", "/api/ps").get("models", []))

    def devices(self) -> dict[str, Any]:
        return dict(self.request("GET", "/api/hearth/devices"))

    def delete(self, model: str) -> None:
        self.request("DELETE", "/api/delete", {"model": model})

    def copy(self, source: str, destination: str) -> None:
        self.request("POST", "/api/copy", {"source": source, "destination": destination})

    def stop(self, model: str) -> None:
        self.request("POST", "/api/generate", {"model": model, "keep_alive": 0})

    def upload_blob(self, path: Path) -> str:
        """Send a file as a blob (when the service runs elsewhere); returns its digest."""
        h = hashlib.sha256()
        with open(path, "rb") as f:
            while block := f.read(1 << 20):
                h.update(block)
        digest = "sha256:" + h.hexdigest()
        size = os.path.getsize(path)
        with open(path, "rb") as f:
            headers = {"Content-Length": str(size), "Content-Type": "application/octet-stream"}
            self._call("POST", f"/api/blobs/{digest}", f, headers, None, None)
        return digest

    def create(self, body: dict[str, Any]) -> Iterator[dict[str, Any]]:
        return self.stream("/api/create", {**body, "stream": True})


def _release(conn: http.client.HTTPConnection, cancel: Cancel | None) -> None:
    """Close a request's connection and detach it from its `cancel`."""
    conn.close()
    if cancel is not None:
        cancel._attach(None)
