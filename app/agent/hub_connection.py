"""Starting, holding and stopping one MCP server's connection (`HubConnections`, on the hub's
loop; `hub.ToolHub`'s module doc tells the lifecycle).

`_ensure_started(name)` is the one way in for the calls and listings above it: it starts a
stopped or failed server on demand (refusing one whose tools' names could clash with another
enabled server's: `_clash`) and waits, within `start_timeout`, until it runs or has failed.
Each server's connection is one task (`_serve`) that opens its transport (a stdio process, its
stderr to `<logs>/mcp/<server>.log`, or streamable HTTP), lets `mcp.Client` connect in "auto"
mode, lists the tools and holds the session until it is told to stop or the server goes away.

`_timed` is a request's time limit (`call_timeout`). A server's question during a call
(elicitation) goes to the handler given to `on_elicit`, on a worker thread; the running
requests' limits wait while the user answers.
"""

from __future__ import annotations

import asyncio
import logging
import math
from contextlib import AsyncExitStack, suppress
from pathlib import Path
from typing import Any, TextIO

import anyio
import mcp.types as mcp_types
from mcp import Client, StdioServerParameters, stdio_client
from mcp.client import ClientRequestContext
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from ..paths import logs_dir
from .config import ServerConfig
from .connection import (
    cancel_when,
    forward,
    last_line,
    list_tools,
    start_failure,
    streams,
    watch_tools,
)
from .elicit import Elicitation, parse_schema
from .hub_base import STOP_WAIT, ElicitHandler, HubBase, HubServer, tool_spec
from .specs import names_clash
from .specs import server_slug as _slug

__all__ = ["HubConnections"]

log = logging.getLogger(__name__)


class HubConnections(HubBase):
    """The servers' connections: started on demand, held by one task each, stopped (see the
    module doc)."""

    def on_elicit(self, handler: ElicitHandler | None) -> None:
        """Who answers the servers' questions during calls (the window's form, the terminal's
        prompt); None declines them all."""
        self._elicit = handler

    def _log_file(self, name: str) -> Path:
        folder = self._log_dir or logs_dir() / "mcp"
        folder.mkdir(parents=True, exist_ok=True)
        return folder / f"{_slug(name)}.log"

    def _clash(self, name: str) -> str:
        """The sentence refusing server `name` when another enabled server's tools could have
        the same names for the model as its own (`names_clash`); "" when none can."""
        for other, server in self._servers.items():
            if other != name and server.config.enabled and names_clash(name, other):
                return (
                    f"the MCP servers '{name}' and '{other}' cannot both be used: the model "
                    f"would call their tools by the same names ('{_slug(name)}__…', "
                    f"'{_slug(other)}__…'; in these names a server's name keeps only letters, "
                    "digits, _ and -), so a call could not say which server it is for; rename "
                    "one of them in the MCP config"
                )
        return ""

    async def _refuse(self, name: str, server: HubServer, why: str) -> None:
        """Stop `server` if it runs and mark it failed with `why` (it offers no tools)."""
        if server.state != "failed" or server.error != why:
            self._changed(name, server, "failed", why)
        if server.task is not None and not server.task.done():
            server.stop.set()
            await asyncio.wait([server.task], timeout=STOP_WAIT)
        with self._lock:
            server.tools = []

    async def _ensure_started(self, name: str) -> HubServer | None:
        """The server, started if it was not running (None for an unknown or disabled name;
        a failed one, not started, when its name clashes with another's: `_clash`)."""
        server = self._servers.get(name)
        if server is None or not server.config.enabled:
            return None
        why = self._clash(name)
        if why:
            await self._refuse(name, server, why)
            return server
        if server.task is not None and not server.task.done() and server.stop.is_set():
            # Stopping after a failure (a crash, a timeout): let it finish, then start afresh.
            await asyncio.wait([server.task], timeout=STOP_WAIT)
        if server.task is None or server.task.done():
            server.ready, server.stop = asyncio.Event(), asyncio.Event()
            server.tools, server.session = [], None
            self._changed(name, server, "starting")
            server.task = asyncio.get_running_loop().create_task(self._serve(name, server))
        try:
            await asyncio.wait_for(server.ready.wait(), self.start_timeout)
        except TimeoutError:
            server.stop.set()
            self._changed(
                name, server, "failed",
                f"the MCP server '{name}' did not start within {self.start_timeout:g} s",
            )  # fmt: skip
        return server

    async def _open(
        self, stack: AsyncExitStack, name: str, config: ServerConfig
    ) -> tuple[Any, Any]:
        """Enter the server's transport; returns its (read, write) streams."""
        if config.command is not None:
            params = StdioServerParameters(
                command=config.command,
                args=list(config.args),
                env=dict(config.env) or None,
                cwd=config.cwd,
            )
            errlog: TextIO = stack.enter_context(self._log_file(name).open("a", encoding="utf-8"))
            streams = await stack.enter_async_context(stdio_client(params, errlog=errlog))
        else:
            assert config.url is not None
            http = await stack.enter_async_context(
                create_mcp_http_client(headers=dict(config.headers) or None)
            )
            streams = await stack.enter_async_context(
                streamable_http_client(config.url, http_client=http)
            )
        return streams[0], streams[1]

    async def _serve(self, name: str, server: HubServer) -> None:
        """The task owning one connection: open, initialize, list the tools, then hold the
        session until asked to stop or the server goes away."""
        config = server.config
        closed = anyio.Event()
        log_start = 0
        if config.command is not None:
            with suppress(OSError):
                log_start = self._log_file(name).stat().st_size
        try:
            async with AsyncExitStack() as stack:
                read, write = await self._open(stack, name, config)
                # Forward the transport's messages so its end (EOF: the process died, the HTTP
                # stream closed) is seen even while no call waits.
                send, receive = anyio.create_memory_object_stream[Any](0)
                group = await stack.enter_async_context(anyio.create_task_group())
                stack.callback(group.cancel_scope.cancel)
                group.start_soon(forward, read, send, closed)

                async def on_message(message: object) -> None:
                    if isinstance(message, mcp_types.ToolListChangedNotification):
                        server.stale = True

                # Client's "auto" mode: the 2026-07-28 `server/discover` probe, and the
                # `initialize` handshake with a server of an earlier version.
                client = await stack.enter_async_context(
                    Client(
                        streams(receive, write),
                        mode="auto",
                        read_timeout_seconds=self.start_timeout,
                        message_handler=on_message,
                        elicitation_callback=self._elicitation_callback(name, server),
                        cache=None,
                    )
                )
                session = client.session
                tools = await list_tools(session)
                with self._lock:
                    server.tools = [tool_spec(name, t) for t in tools]
                    server.protocol = client.protocol_version
                server.session, server.client = session, client
                if client.protocol_version in MODERN_PROTOCOL_VERSIONS:
                    # 2026-07-28 sends "the tools changed" only on a subscription.
                    group.start_soon(watch_tools, client, name, server.mark_stale)
                self._changed(name, server, "running")
                server.ready.set()
                async with anyio.create_task_group() as wait:
                    for event in (server.stop, closed):
                        wait.start_soon(cancel_when, event, wait.cancel_scope)
                server.session = server.client = None
                if closed.is_set() and not server.stop.is_set():
                    self._changed(
                        name, server, "failed",
                        f"the MCP server '{name}' stopped; it will be started again when needed",
                    )  # fmt: skip
        except Exception as e:  # every failure is this server's sentence
            server.session = server.client = None
            why = start_failure(name, config, e)
            tail = last_line(self._log_file(name), log_start) if config.command is not None else ""
            if tail and server.state == "starting":
                why += f" (it said: {tail})"
            if server.state != "failed":
                self._changed(name, server, "failed", why)
        finally:
            server.session = server.client = None
            server.ready.set()
            if server.state in ("running", "starting"):
                self._changed(name, server, "stopped")

    async def _timed(self, server: HubServer, awaitable: Any) -> Any:
        """Await `awaitable` within `call_timeout`; TimeoutError past it. The limit is paused
        while the user answers the server's question (`_elicitation_callback`)."""
        with anyio.CancelScope(deadline=anyio.current_time() + self.call_timeout) as scope:
            server.deadlines.add(scope)
            try:
                return await awaitable
            finally:
                server.deadlines.discard(scope)
        raise TimeoutError

    def _elicitation_callback(self, name: str, server: HubServer) -> Any:
        """The SDK's elicitation callback for server `name`: the question goes to the handler
        (`on_elicit`) on a worker thread; the running calls' time limits wait meanwhile."""

        async def callback(
            _context: ClientRequestContext, params: mcp_types.ElicitRequestParams
        ) -> mcp_types.ElicitResult | mcp_types.ErrorData:
            handler = self._elicit
            if handler is None:
                return mcp_types.ElicitResult(action="decline")
            url = str(getattr(params, "url", "") or "")
            try:
                fields = [] if url else parse_schema(getattr(params, "requested_schema", None))
            except ValueError as e:
                log.warning("declined a question of the MCP server %r: %s", name, e)
                return mcp_types.ElicitResult(action="decline")
            question = Elicitation(name, params.message, fields, url)
            paused = {scope: scope.deadline for scope in server.deadlines}
            started = anyio.current_time()
            for scope in paused:
                scope.deadline = math.inf
            try:
                answer = await asyncio.to_thread(handler, question)
            except BaseException:
                question.cancelled.set()
                raise
            finally:
                spent = anyio.current_time() - started
                for scope, deadline in paused.items():
                    scope.deadline = deadline + spent
            content = answer.content if answer.action == "accept" and not url else None
            return mcp_types.ElicitResult(action=answer.action, content=content)

        return callback
