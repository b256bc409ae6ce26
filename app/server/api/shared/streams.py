"""Response helpers shared by the route modules: NDJSON and SSE streams, timestamps."""

from __future__ import annotations

import datetime
import json
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from fastapi.responses import JSONResponse, Response, StreamingResponse
from starlette.background import BackgroundTask

__all__ = ["ndjson", "ndjson_or_last", "sse", "error_message", "now_iso", "iso", "dumps"]

log = logging.getLogger("hearth.server")


def dumps(obj: Any) -> str:
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":"))


def now_iso() -> str:
    """UTC with nanosecond-style precision, as Ollama writes `created_at`."""
    return datetime.datetime.now(datetime.UTC).isoformat().replace("+00:00", "Z")


def iso(timestamp: float) -> str:
    """A local time with its offset (Ollama's `modified_at`, `expires_at`)."""
    try:
        return datetime.datetime.fromtimestamp(timestamp).astimezone().isoformat()
    except (OverflowError, ValueError, OSError):
        return "2318-01-01T00:00:00Z"  # "forever", about where Ollama's own ends up


async def _guard(
    items: AsyncIterator[dict[str, Any]], on_error: Callable[[Exception], dict[str, Any]]
) -> AsyncIterator[dict[str, Any]]:
    try:
        async for item in items:
            yield item
    except Exception as e:  # a stream has begun: the error becomes its last line
        if not _expected(e):
            log.exception("error in a streamed response")
        yield on_error(e)


def _expected(e: Exception) -> bool:
    from ...scheduling.runner_process import RunnerError
    from .errors import APIError

    return isinstance(e, RunnerError | APIError)


def _message(e: Exception) -> str:
    return getattr(e, "message", None) or str(e) or type(e).__name__


def ndjson(
    items: AsyncIterator[dict[str, Any]], close: Callable[[], Awaitable[None]] | None = None
) -> StreamingResponse:
    """An NDJSON stream; an exception mid-stream becomes a final `{"error": ...}` line."""

    async def body() -> AsyncIterator[str]:
        async for item in _guard(items, lambda e: {"error": _message(e)}):
            yield dumps(item) + "\n"

    return StreamingResponse(
        body(),
        media_type="application/x-ndjson",
        background=BackgroundTask(close) if close else None,
    )


async def ndjson_or_last(items: AsyncIterator[dict[str, Any]], stream: bool) -> Response:
    """A progress stream (`stream`), or only its last object (500 when it is an error), as
    Ollama's create and pull answer with `"stream": false`."""
    if stream:
        return ndjson(items)
    last: dict[str, Any] = {}
    async for item in items:
        last = item
    return JSONResponse(last, status_code=500 if "error" in last else 200)


def sse(
    items: AsyncIterator[dict[str, Any]],
    close: Callable[[], Awaitable[None]] | None = None,
    *,
    named: bool = False,
    done: bool = True,
    error: Callable[[Exception], dict[str, Any]] | None = None,
) -> StreamingResponse:
    """Server-sent events, by default as chat completions send them: data lines ending in
    `data: [DONE]`, an error mid-stream as an OpenAI error object. `named`: each event also
    names its `type` in an `event:` line (the Responses API's form); `done`: end with
    `data: [DONE]`; `error`: the event an exception mid-stream becomes."""

    def api_error(e: Exception) -> dict[str, Any]:
        return {"error": {"message": _message(e), "type": "api_error", "param": None, "code": None}}

    async def body() -> AsyncIterator[str]:
        async for item in _guard(items, error or api_error):
            name = f"event: {item.get('type')}\n" if named and "type" in item else ""
            yield f"{name}data: {dumps(item)}\n\n"
        if done:
            yield "data: [DONE]\n\n"

    return StreamingResponse(
        body(),
        media_type="text/event-stream",
        headers={"Cache-Control": "no-cache"},
        background=BackgroundTask(close) if close else None,
    )


def error_message(e: Exception) -> str:
    """An exception as the one sentence an error event carries."""
    return _message(e)
