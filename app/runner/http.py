"""The runner's HTTP side (see protocol/): a small threaded server, one thread per request.

Streaming answers are NDJSON written as events arrive. A client that goes away cancels its
sequence so the batching loop stops generating for it and frees its slot: seen when a write
fails, and while no event comes (a long prompt, an embedding waiting its turn) by the
connection's end of file, checked every `PEER_POLL_S`.
"""

from __future__ import annotations

import hmac
import json
import logging
import queue
import select
import socket
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from .core import RequestError, Runner
from .faults import fault
from .protocol import CompletionError, CompletionRequest, ProtocolError, from_wire, to_wire
from .sequence import Event, Sequence

__all__ = ["RunnerState", "make_server"]

_log = logging.getLogger("hearth.runner")
MAX_BODY = 128 * 1024 * 1024  # images travel base64 in completion requests
PEER_POLL_S = 0.1  # how often a request waiting for its sequence checks its client is there


@dataclass
class RunnerState:
    status: str = "loading"  # loading | ready | error
    progress: float = 0.0
    error: str | None = None
    runner: Runner | None = None
    lock: threading.Lock = field(default_factory=threading.Lock)


def make_server(state: RunnerState, token: str, port: int = 0) -> ThreadingHTTPServer:
    class Handler(_Handler):
        pass

    Handler.state = state
    Handler.token = token
    server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
    server.daemon_threads = True
    return server


class _Handler(BaseHTTPRequestHandler):
    state: RunnerState
    token: str
    protocol_version = "HTTP/1.0"  # streaming bodies end when the connection closes

    def log_message(self, format: str, *args: Any) -> None:  # stdlib signature
        _log.debug("%s - %s", self.address_string(), format % args)

    # -- plumbing -------------------------------------------------------------------------
    def _authorised(self) -> bool:
        got = self.headers.get("Authorization", "")
        if hmac.compare_digest(got.encode(), f"Bearer {self.token}".encode()):
            return True
        self._json(401, {"error": "unauthorised"})
        return False

    def _json(self, status: int, body: dict[str, Any]) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _body(self) -> dict[str, Any] | None:
        try:
            n = int(self.headers.get("Content-Length", "0"))
        except ValueError:
            n = -1
        if n < 0 or n > MAX_BODY:
            self._json(413 if n > 0 else 400, {"error": "missing or oversized request body"})
            return None
        try:
            body = json.loads(self.rfile.read(n) or b"{}")
        except ValueError:
            self._json(400, {"error": "the request body is not valid JSON"})
            return None
        if not isinstance(body, dict):
            self._json(400, {"error": "the request body must be a JSON object"})
            return None
        return body

    def _events(self, seq: Sequence) -> Iterator[Event]:
        """`seq`'s events until its end. When the client closes its connection meanwhile the
        sequence is cancelled and the events stop."""
        while True:
            try:
                event = seq.events.get(timeout=PEER_POLL_S)
            except queue.Empty:
                if _closed(self.connection):
                    seq.cancelled.set()
                    return
                continue
            if event is None:
                return
            yield event

    def _runner(self) -> Runner | None:
        runner = self.state.runner
        if runner is None:
            self._json(503, {"error": f"the model is not ready ({self.state.status})"})
        return runner

    # -- routes ---------------------------------------------------------------------------
    def do_GET(self) -> None:  # stdlib naming
        if not self._authorised():
            return
        if self.path == "/health":
            s = self.state
            runner = s.runner
            self._json(
                200,
                {
                    "status": s.status,
                    "progress": s.progress,
                    "error": s.error,
                    "busy_slots": runner.busy_slots() if runner is not None else 0,
                    "passes": runner.passes() if runner is not None else 0,
                },
            )
        elif self.path == "/info":
            if (runner := self._runner()) is not None:
                self._json(200, to_wire(runner.info()))
        else:
            self._json(404, {"error": f"no route {self.path}"})

    def do_POST(self) -> None:  # stdlib naming
        if not self._authorised():
            return
        routes = {
            "/completion": self._completion,
            "/embedding": self._embedding,
            "/tokenize": self._tokenize,
            "/detokenize": self._detokenize,
        }
        route = routes.get(self.path)
        if route is None:
            self._json(404, {"error": f"no route {self.path}"})
            return
        body = self._body()
        if body is None or (runner := self._runner()) is None:
            return
        try:
            route(runner, body)
        except RequestError as e:
            self._json(400, {"error": str(e)})
        except ProtocolError as e:  # an unknown field, a value of the wrong type
            self._json(400, to_wire(CompletionError(error=f"the request breaks the protocol: {e}")))
        except (TypeError, ValueError) as e:
            self._json(400, {"error": f"bad request: {e}"})

    def _completion(self, runner: Runner, body: dict[str, Any]) -> None:
        seq = runner.completion(from_wire(CompletionRequest, body))
        self.send_response(200)
        self.send_header("Content-Type", "application/x-ndjson")
        self.end_headers()
        self.wfile.flush()
        fault("prompt", runner.config.model)
        try:
            for sent, event in enumerate(self._events(seq)):
                if sent == 2:
                    fault("stream", runner.config.model)
                self.wfile.write(json.dumps(to_wire(event)).encode() + b"\n")
                self.wfile.flush()
        except OSError:  # the client went away: stop generating for it
            seq.cancelled.set()

    def _embedding(self, runner: Runner, body: dict[str, Any]) -> None:
        text = body.get("input")
        if not isinstance(text, str | list):
            raise RequestError("input must be a string or a list of token ids")
        seq = runner.embedding(text, bool(body.get("truncate", True)))
        result = next(self._events(seq), None)
        if seq.cancelled.is_set():
            return  # the client went away
        if result is None or isinstance(result, CompletionError):
            self._json(500 if result is None else 400, to_wire(result or {"error": "no result"}))
        else:
            self._json(200, to_wire(result))

    def _tokenize(self, runner: Runner, body: dict[str, Any]) -> None:
        content = body.get("content")
        if not isinstance(content, str):
            raise RequestError("content must be a string")
        tokens = runner.tokenize(content, bool(body.get("add_special", True)))
        self._json(200, {"tokens": tokens})

    def _detokenize(self, runner: Runner, body: dict[str, Any]) -> None:
        tokens = body.get("tokens")
        if not isinstance(tokens, list) or not all(isinstance(t, int) for t in tokens):
            raise RequestError("tokens must be a list of integers")
        self._json(200, {"content": runner.detokenize(tokens)})


def _closed(conn: socket.socket) -> bool:
    """Whether the peer has closed `conn` (its request was read whole: anything readable now
    is the end of file, or an error)."""
    poll = select.poll()  # not select(): no limit on the descriptor's number
    poll.register(conn, select.POLLIN)
    if not poll.poll(0):
        return False
    try:
        return conn.recv(1, socket.MSG_PEEK) == b""
    except OSError:
        return True
