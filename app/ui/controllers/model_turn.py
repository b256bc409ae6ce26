"""One streamed /api/chat turn, read on a worker thread (the agent loop's model step).

The GUI's own requests go through QNetworkAccessManager (api_client.py), which reports on the
GUI thread; the agent loop runs on a thread of its own and blocks on each turn, so its turns
are read here with the standard library, line by line (NDJSON), and `abort()` from any thread
ends a turn at once (it shuts the socket, which wakes the blocked read).
"""

from __future__ import annotations

import contextlib
import http.client
import json
import socket
import threading
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

from ..api_client import ApiError, error_text

__all__ = ["ModelTurn"]

# on_piece(content, thinking): a piece of the answer and/or of its reasoning
OnPiece = Callable[[str, str], None]


class ModelTurn:
    """Streams turns from the service at `base_url` (bearer `token`); thread-safe `abort()`."""

    def __init__(self, base_url: str, token: str = "") -> None:
        parts = urlsplit(base_url)
        self._https = parts.scheme == "https"
        self._host = parts.hostname or "127.0.0.1"
        self._port = parts.port or (443 if self._https else 80)
        self._prefix = parts.path.rstrip("/")
        self._token = token
        self._lock = threading.Lock()
        self._conn: http.client.HTTPConnection | None = None
        self._aborted = False

    def abort(self) -> None:
        """End the turn in progress (and any later one): it raises ApiError kind 'cancelled'."""
        with self._lock:
            self._aborted = True
            conn = self._conn
        if conn is not None and conn.sock is not None:
            with contextlib.suppress(OSError):
                conn.sock.shutdown(socket.SHUT_RDWR)

    def run(self, body: dict[str, Any], on_piece: OnPiece) -> list[dict[str, Any]]:
        """POST `body` (stream on) to /api/chat and read the reply: its NDJSON objects (for
        `hearth.agent.loop.StepReply.from_chunks`), each piece shown through `on_piece` as it
        comes. Raises ApiError (kind 'cancelled' after `abort()`)."""
        cls = http.client.HTTPSConnection if self._https else http.client.HTTPConnection
        conn = cls(self._host, self._port, timeout=None)
        with self._lock:
            if self._aborted:
                raise ApiError("cancelled", kind="cancelled")
            self._conn = conn
        headers = {"Content-Type": "application/json"}
        if self._token:
            headers["Authorization"] = f"Bearer {self._token}"
        try:
            conn.request("POST", self._prefix + "/api/chat", json.dumps(body), headers)
            resp = conn.getresponse()
            if resp.status >= 400:
                raise ApiError(error_text(resp.read(), resp.status), "http", resp.status)
            return self._read(resp, on_piece)
        except (OSError, http.client.HTTPException) as e:
            if self._aborted:
                raise ApiError("cancelled", kind="cancelled") from None
            raise ApiError(str(e) or type(e).__name__, kind="connection") from None
        finally:
            with self._lock:
                self._conn = None
            conn.close()

    def _read(self, resp: http.client.HTTPResponse, on_piece: OnPiece) -> list[dict[str, Any]]:
        chunks: list[dict[str, Any]] = []
        for raw in resp:
            if self._aborted:
                raise ApiError("cancelled", kind="cancelled")
            if not raw.strip():
                continue
            try:
                chunk = json.loads(raw)
            except ValueError:
                raise ApiError(
                    f"the service sent a line that is not JSON: {raw[:80]!r}", kind="stream"
                ) from None
            if not isinstance(chunk, dict):
                continue
            if chunk.get("error"):
                raise ApiError(str(chunk["error"]), kind="stream", status=resp.status)
            chunks.append(chunk)
            msg = chunk.get("message") or {}
            piece, thought = str(msg.get("content") or ""), str(msg.get("thinking") or "")
            if piece or thought:
                on_piece(piece, thought)
        if self._aborted:
            raise ApiError("cancelled", kind="cancelled")
        return chunks
