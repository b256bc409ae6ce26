"""A small fake of `hearth serve`'s Ollama API, for the failure cases a real service cannot be
made to show on demand (out of memory, a model that vanished, a slow stream), and for the
screenshots. Shapes follow app/server (Hearth extras under "hearth")."""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

__all__ = ["StubServer", "StubModel"]


@dataclass
class StubModel:
    name: str
    capabilities: list[str] = field(default_factory=lambda: ["completion"])
    family: str = "gemma3"
    parameter_size: str = "268.10M"
    quantization: str = "Q4_K_M"
    size: int = 253_000_000
    context_length: int = 32768
    num_ctx: int = 4096  # what the service runs it with when a request sets none (a Modelfile's)
    memory: int = 520_000_000
    engine: str = "hearth"  # /api/show's hearth.engine and engine_reason
    engine_reason: str = "a Hearth plugin runs architecture 'gemma3'"


@dataclass
class StubServer:
    """Behaviour knobs: `reply` (streamed word by word), `delay` between chunks, `thinking`,
    `error` (a message: sent as an error line after `error_after` chunks, or as a 500/404
    before streaming when `error_status` is set), `token` (required bearer key)."""

    models: list[StubModel] = field(default_factory=lambda: [StubModel("gemma3:270m")])
    reply: str = "Hello! This is a **stub** reply with `code`."
    thinking: str = ""
    delay: float = 0.0
    error: str = ""
    error_status: int = 0
    error_after: int = 0
    token: str = ""
    requests: list[dict[str, Any]] = field(default_factory=list)
    layout: str = "CPU only"  # /api/ps's hearth.layout for a model a chat has loaded
    loaded: list[str] = field(default_factory=list)
    # Scripted turns for tool use: each /api/chat takes the first left, {"content": str,
    # "tool_calls": [{"function": {"name", "arguments"}}]}; when none is left, `reply`.
    script: list[dict[str, Any]] = field(default_factory=list)
    # /api/embed (Ollama's shape): a vector per input, each word hashed into one of 8
    # dimensions, answered after `embed_delay` seconds.
    embed_delay: float = 0.0

    def __post_init__(self) -> None:
        stub = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *_a: Any) -> None:
                pass

            def _send(self, status: int, body: Any, ctype: str = "application/json") -> None:
                data = body if isinstance(body, bytes) else json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _authorized(self) -> bool:
                if stub.token and self.headers.get("Authorization") != f"Bearer {stub.token}":
                    self._send(401, {"error": "unauthorized"})
                    return False
                return True

            def _body(self) -> dict[str, Any]:
                n = int(self.headers.get("Content-Length") or 0)
                return json.loads(self.rfile.read(n) or b"{}")

            def do_GET(self) -> None:
                if self.path == "/":
                    self._send(200, b"Hearth is running", "text/plain")
                elif not self._authorized():
                    return
                elif self.path == "/api/version":
                    self._send(200, {"version": "0.0.0-stub"})
                elif self.path == "/api/tags":
                    self._send(200, {"models": [stub._tag(m) for m in stub.models]})
                elif self.path == "/api/ps":
                    self._send(200, {"models": [stub._ps(m) for m in stub.loaded]})
                else:
                    self._send(404, {"error": "not found"})

            def do_DELETE(self) -> None:
                if not self._authorized():
                    return
                body = self._body()
                before = len(stub.models)
                stub.models = [m for m in stub.models if m.name != body.get("model")]
                if len(stub.models) == before:
                    self._send(404, {"error": f"model '{body.get('model')}' not found"})
                else:
                    self._send(200, {})

            def do_POST(self) -> None:
                if not self._authorized():
                    return
                body = self._body()
                stub.requests.append({"path": self.path, **body})
                if self.path == "/api/show":
                    m = stub._find(body.get("model", ""))
                    if m is None:
                        self._send(404, {"error": f"model '{body.get('model')}' not found"})
                    else:
                        self._send(200, stub._show(m))
                elif self.path == "/api/chat":
                    self._chat(body)
                elif self.path == "/api/create":
                    self._create(body)
                elif self.path == "/api/embed":
                    time.sleep(stub.embed_delay)
                    texts = body.get("input") or []
                    texts = [texts] if isinstance(texts, str) else texts
                    self._send(200, {"model": body.get("model"),
                                     "embeddings": [_vector(t) for t in texts]})  # fmt: skip
                else:
                    self._send(404, {"error": "not found"})

            def _stream_start(self) -> None:
                self.send_response(200)
                self.send_header("Content-Type", "application/x-ndjson")
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()

            def _line(self, obj: dict[str, Any]) -> None:
                data = json.dumps(obj).encode() + b"\n"
                self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
                self.wfile.flush()

            def _end(self) -> None:
                self.wfile.write(b"0\r\n\r\n")
                self.wfile.flush()

            def _chat(self, body: dict[str, Any]) -> None:
                m = stub._find(body.get("model", ""))
                if m is None:
                    self._send(404, {"error": f"model '{body.get('model')}' not found"})
                    return
                if stub.error and stub.error_status:
                    self._send(stub.error_status, {"error": stub.error})
                    return
                if m.name not in stub.loaded:
                    stub.loaded.append(m.name)
                images = any(msg.get("images") for msg in body.get("messages") or [])
                if images and "vision" not in m.capabilities:  # as the service refuses them
                    self._send(400, {"error": f"{m.name} does not support images"})
                    return
                turn = stub.script.pop(0) if stub.script else {"content": stub.reply}
                if body.get("stream") is False:  # one object, as the service answers then
                    msg = {"role": "assistant", "content": turn.get("content", "")}
                    self._send(200, {"model": m.name, "message": msg, "done": True})
                    return
                self._stream_start()
                pieces = [("thinking", w) for w in _words(stub.thinking)]
                pieces += [("content", w) for w in _words(turn.get("content", ""))]
                try:
                    for n, (kind, word) in enumerate(pieces):
                        if stub.error and n == stub.error_after:
                            self._line({"error": stub.error})
                            self._end()
                            return
                        msg = {"role": "assistant", "content": "", kind: word}
                        self._line({"model": m.name, "message": msg, "done": False})
                        time.sleep(stub.delay)
                    if turn.get("tool_calls"):
                        msg = {"role": "assistant", "content": "", "tool_calls": turn["tool_calls"]}
                        self._line({"model": m.name, "message": msg, "done": False})
                    n = len(_words(turn.get("content", "")))
                    self._line(
                        {
                            "model": m.name,
                            "message": {"role": "assistant", "content": ""},
                            "done": True,
                            "done_reason": "stop",
                            "total_duration": 900_000_000,
                            "load_duration": 100_000_000,
                            "prompt_eval_count": 42,
                            "prompt_eval_duration": 120_000_000,
                            "eval_count": n,
                            "eval_duration": max(1, n) * 25_000_000,
                            "hearth": {
                                "prompt_tokens": 42,
                                "prompt_cached": 0,
                                "truncated": False,
                                "shifted": False,
                                "num_ctx": stub._num_ctx(body),
                            },
                        }
                    )
                    self._end()
                except (BrokenPipeError, ConnectionResetError):
                    return  # the client stopped the reply

            def _create(self, body: dict[str, Any]) -> None:
                name = str(body.get("model") or "")
                if not str(body.get("from", "")).endswith(".gguf"):
                    self._send(400, {"error": "from must be a .gguf path"})
                    return
                self._stream_start()
                self._line({"status": "parsing GGUF"})
                for done in (0, 50, 100):
                    self._line({"status": "copying model", "total": 100, "completed": done})
                    time.sleep(stub.delay)
                stub.models.append(StubModel(name))
                self._line({"status": "success"})
                self._end()

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.port = self.httpd.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self._thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self._thread.start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    def _num_ctx(self, body: dict[str, Any]) -> int:
        """The context a chat is answered with, as the service decides it: the request's
        num_ctx, else the model's own, at most its trained length."""
        m = self._find(body.get("model", ""))
        asked = int((body.get("options") or {}).get("num_ctx") or 0)
        n = asked or (m.num_ctx if m else 4096)
        return min(n, m.context_length) if m else n

    def _find(self, name: str) -> StubModel | None:
        full = name if ":" in name else name + ":latest"
        return next((m for m in self.models if m.name in (name, full)), None)

    def _tag(self, m: StubModel) -> dict[str, Any]:
        return {
            "name": m.name,
            "model": m.name,
            "modified_at": "2026-11-20T10:00:00Z",
            "size": m.size,
            "digest": "0" * 64,
            "details": {
                "format": "gguf",
                "family": m.family,
                "families": [m.family],
                "parameter_size": m.parameter_size,
                "quantization_level": m.quantization,
            },
        }

    def _ps(self, name: str) -> dict[str, Any]:
        m = self._find(name)
        size = m.memory if m else 0
        return {"name": name, "model": name, "size": size, "size_vram": 0,
                "hearth": {"layout": self.layout, "devices": []}}  # fmt: skip

    def _show(self, m: StubModel) -> dict[str, Any]:
        return {
            "parameters": "temperature 1\ntop_k 64\ntop_p 0.95",
            "details": self._tag(m)["details"],
            "model_info": {
                "general.architecture": m.family,
                f"{m.family}.context_length": m.context_length,
            },
            "capabilities": m.capabilities,
            "hearth": {"estimated_memory": m.memory, "memory": {"total": m.memory},
                       "engine": m.engine, "engine_reason": m.engine_reason,
                       "num_ctx": m.num_ctx},
        }  # fmt: skip


def _vector(text: str) -> list[float]:
    v = [0.0] * 8
    for word in text.lower().split():
        v[sum(word.encode()) % 8] += 1.0
    return v


def _words(text: str) -> list[str]:
    out, word = [], ""
    for ch in text:
        word += ch
        if ch in " \n":
            out.append(word)
            word = ""
    if word:
        out.append(word)
    return out
