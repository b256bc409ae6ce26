"""Who may talk to the service, and how much they may send.

* Loopback by default. Listening anywhere else requires `HEARTH_API_KEY` (checked at start,
  see `ServerConfig.check_exposure`); when a key is set every request but `GET /` and CORS
  preflights must carry `Authorization: Bearer <key>`, even on loopback (the GUI runs its
  private service that way). `x-api-key: <key>` (how Anthropic's clients send it) is
  accepted too.
* While bound to loopback, the Host header must name this machine (localhost, a loopback
  address or the host name): a web page cannot reach the API through DNS rebinding.
* CORS: localhost / 127.0.0.1 / 0.0.0.0 pages and app schemes (app://, file://, tauri://,
  vscode-webview://) by default, plus `HEARTH_ORIGINS` (comma-separated, `*` wildcards).
  A request from any other web page (an `Origin` header not allowed) is refused with 403,
  as Ollama does: a page cannot pull, delete or generate through the user's browser.
* Bodies are JSON whatever their Content-Type says, as Ollama reads them: `curl -d '{...}'`
  (which sends `application/x-www-form-urlencoded`) works as in Ollama's documentation.
  The Origin check above is what keeps cross-site form posts out.
* JSON bodies are limited to `max_body_bytes` (413); blob uploads stream to disk unlimited.
"""

from __future__ import annotations

import ipaddress
import json
import re
import secrets
import socket
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from fastapi import FastAPI
from starlette.datastructures import Headers
from starlette.middleware.cors import CORSMiddleware

from ...config import ServerConfig
from .errors import error_answer

__all__ = ["install_security", "origin_regex", "DEFAULT_ORIGINS"]

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

DEFAULT_ORIGINS = tuple(
    f"{scheme}://{host}{port}"
    for scheme in ("http", "https")
    for host in ("localhost", "127.0.0.1", "[::1]", "0.0.0.0")
    for port in ("", ":*")
) + ("app://*", "file://*", "tauri://*", "vscode-webview://*", "vscode-file://*")


def origin_regex(extra: tuple[str, ...]) -> str:
    """One regex for the allowed origins (fnmatch-style patterns)."""
    patterns = [
        ".*".join(re.escape(part) for part in p.split("*")) for p in (*DEFAULT_ORIGINS, *extra)
    ]
    return "^(?:" + "|".join(f"(?:{p})" for p in patterns) + ")$"


def _allowed_origins(config: ServerConfig) -> str:
    """The regex of the origins allowed, for the CORS headers and the refusal alike."""
    return ".*" if "*" in config.origins else origin_regex(config.origins)


def _loopback_host(host: str, own: set[str]) -> bool:
    name = host.strip().lower()
    if name.startswith("["):
        name = name[1 : name.find("]")] if "]" in name else name
    elif name.count(":") == 1:
        name = name.split(":")[0]
    if not name or name == "localhost" or name.endswith(".localhost") or name in own:
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


class SecurityMiddleware:
    def __init__(self, app: ASGIApp, config: ServerConfig) -> None:
        self.app = app
        self.config = config
        self._own = {config.host.lower(), socket.gethostname().lower()}
        self._origins = re.compile(_allowed_origins(config))

    async def _refuse(
        self,
        scope: Scope,
        send: Send,
        status: int,
        message: str,
        headers: dict[str, str] | None = None,
    ) -> None:
        status, answer = error_answer(scope["path"], status, message)
        body = json.dumps(answer).encode()
        raw = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
        raw += [(k.encode(), v.encode()) for k, v in (headers or {}).items()]
        await send({"type": "http.response.start", "status": status, "headers": raw})
        await send({"type": "http.response.body", "body": body})

    async def _too_large(self, scope: Scope, send: Send, limit: int) -> None:
        await self._refuse(
            scope,
            send,
            413,
            f"the request body is larger than the {limit} byte limit (HEARTH_MAX_BODY_BYTES)",
        )

    def _authorized(self, headers: Headers) -> bool:
        key = self.config.api_key
        if not key:
            return True
        given = headers.get("x-api-key")  # Anthropic's clients send the key this way
        if given is not None:
            return secrets.compare_digest(given.strip(), key)
        auth = headers.get("authorization", "")
        scheme, _, token = auth.partition(" ")
        return scheme.lower() == "bearer" and secrets.compare_digest(token.strip(), key)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = Headers(scope=scope)
        path, method = scope["path"], scope["method"]
        if self.config.loopback and not _loopback_host(headers.get("host", ""), self._own):
            await self._refuse(
                scope,
                send,
                403,
                "this service answers only requests addressed "
                "to localhost (the Host header names another machine)",
            )
            return
        origin = headers.get("origin")
        if origin is not None and not self._origins.match(origin):
            await self._refuse(
                scope,
                send,
                403,
                f"requests from the web page at {origin} are not allowed; "
                "add it to HEARTH_ORIGINS to allow them",
            )
            return
        if not (path == "/" and method in ("GET", "HEAD")) and not self._authorized(headers):
            await self._refuse(
                scope,
                send,
                401,
                "missing or wrong API key: send 'Authorization: Bearer <HEARTH_API_KEY>' "
                "(or 'x-api-key: <HEARTH_API_KEY>')",
                {"www-authenticate": "Bearer"},
            )
            return
        if path.startswith("/api/blobs/"):
            await self.app(scope, receive, send)
            return
        _read_body_as_json(scope, headers)
        limit = self.config.max_body_bytes
        length = headers.get("content-length")
        if length is not None:
            if not length.isdigit() or int(length) > limit:
                await self._too_large(scope, send, limit)
                return
            await self.app(scope, receive, send)
            return
        # No length given (chunked): read it all, within the limit, then replay it.
        chunks, size = [], 0
        while True:
            message = await receive()
            if message["type"] != "http.request":
                await self.app(scope, receive, send)
                return
            chunks.append(message.get("body", b""))
            size += len(chunks[-1])
            if size > limit:
                await self._too_large(scope, send, limit)
                return
            if not message.get("more_body", False):
                break
        body = b"".join(chunks)
        sent = False

        async def replay() -> Message:
            nonlocal sent
            if not sent:
                sent = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        await self.app(scope, replay, send)


def _read_body_as_json(scope: Scope, headers: Headers) -> None:
    """Every API body is JSON: a request that says otherwise (none, form-encoded, plain
    text) is passed on as `application/json`, which is how Ollama reads it."""
    kind = headers.get("content-type", "").split(";")[0].strip().lower()
    if kind == "application/json" or kind.endswith("+json"):
        return
    raw = [(k, v) for k, v in scope["headers"] if k.lower() != b"content-type"]
    scope["headers"] = [*raw, (b"content-type", b"application/json")]


def install_security(app: FastAPI, config: ServerConfig) -> None:
    """Add the middleware (CORS outermost, so preflights are answered before the key check)."""
    app.add_middleware(SecurityMiddleware, config=config)
    app.add_middleware(
        CORSMiddleware,
        allow_origin_regex=_allowed_origins(config),
        allow_methods=["*"],
        allow_headers=["*"],
        allow_credentials=False,
    )
