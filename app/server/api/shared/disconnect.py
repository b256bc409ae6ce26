"""A client that goes away cancels its request, on every route, streamed or not.

`CancelOnDisconnect` is an ASGI middleware. Once a request's body has been read it watches the
connection; when the client disconnects before its response is complete, the route's task is
cancelled. The cancellation unwinds the route where it waits: a completion's runner stream
closes its connection (the runner ends the sequence and frees its slot, see runner/http.py),
an embedding's runner call closes its connection, a lease is released, a load or a queued
request stops waiting. This is what Ollama does with a request's context.

Without it a non-streamed route (the whole answer collected, then sent) went on generating
after its client had gone, and a streamed one noticed only on its next write (none while a
long prompt is evaluated, or while a parser holds text back).

A response that is complete is never cancelled (its background task, e.g. a stream's
`Generation.close`, runs to the end).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

__all__ = ["CancelOnDisconnect"]

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


class CancelOnDisconnect:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        watch = _Watch(receive, send)
        task = asyncio.ensure_future(self.app(scope, watch.receive, watch.send))
        watch.task = task
        try:
            await task
        except asyncio.CancelledError:
            me = asyncio.current_task()
            if not watch.cancelled or (me is not None and me.cancelling()):
                raise  # the server itself cancelled us (shutdown): not the client's going
        finally:
            watch.stop()


class _Watch:
    """The request's receive and send channels, as the app sees them: receive passes the body
    through, then (the connection now watched by `_watch`) waits for the disconnect."""

    def __init__(self, receive: Receive, send: Send) -> None:
        self._receive = receive
        self._send = send
        self.task: asyncio.Future[None] | None = None
        self.complete = False  # the response's last body message was sent
        self.cancelled = False  # the app's task was cancelled because the client went away
        self._gone = asyncio.Event()
        self._watcher: asyncio.Task[None] | None = None

    async def receive(self) -> Message:
        if self._watcher is None:
            message = await self._receive()
            if message["type"] == "http.request" and not message.get("more_body", False):
                self._watcher = asyncio.ensure_future(self._watch())
            elif message["type"] == "http.disconnect":
                self._gone.set()
                self._watcher = asyncio.ensure_future(asyncio.sleep(0))  # nothing to watch
            return message
        await self._gone.wait()
        return {"type": "http.disconnect"}

    async def send(self, message: Message) -> None:
        if message["type"] == "http.response.body" and not message.get("more_body", False):
            self.complete = True
        await self._send(message)

    async def _watch(self) -> None:
        while True:
            message = await self._receive()
            if message["type"] == "http.disconnect":
                break
        self._gone.set()
        if not self.complete and self.task is not None and not self.task.done():
            self.cancelled = True
            self.task.cancel()

    def stop(self) -> None:
        if self._watcher is not None:
            self._watcher.cancel()
