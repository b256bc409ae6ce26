"""The tools of the hub's servers: listing them and calling one (`HubTools`, part of
`hub.ToolHub`).

`tools()` starts the servers asked for and gives the tools of those running (listed again
after a server said they changed). `call()` finds the server of a qualified name
(`<server slug>__<tool>`), starts it if needed and calls the tool within `call_timeout`;
it never raises for a server's failure: a refused, failed, timed-out or cancelled call is an
`is_error` result whose text is the sentence, and a server that timed out or went away during
the call is marked failed and stopped (the next call starts it again).
"""

from __future__ import annotations

import asyncio
import math
import threading
from collections.abc import Iterable, Mapping
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any

import anyio
import mcp.types as mcp_types
import pydantic
from mcp import InputRequiredRoundsExceededError
from mcp.shared.exceptions import MCPError

from .connection import list_tools
from .hub_base import STOP_WAIT, HubServer, tool_spec
from .hub_connection import HubConnections
from .results import tool_result
from .specs import ToolResult, ToolSpec, error_result
from .specs import server_slug as _slug

__all__ = ["HubTools"]


class HubTools(HubConnections):
    """`tools()` and `call()` (see the module doc)."""

    def tools(self, servers: Iterable[str] | None = None) -> list[ToolSpec]:
        """The tools of `servers` (default: every enabled one), starting those not running.
        A server that cannot start adds no tools: its `status()` says why. Unknown names are
        skipped."""
        names = None if servers is None else list(servers)
        result: list[ToolSpec] = self._run(self._tools(names), self.start_timeout + STOP_WAIT)
        return result

    def call(
        self,
        qualified_name: str,
        arguments: Mapping[str, Any] | None = None,
        cancel: threading.Event | None = None,
    ) -> ToolResult:
        """Call a tool by its qualified name (`ToolSpec.qualified_name`), starting its server
        if needed. Never raises for a server's failure: a failed, timed-out or cancelled call
        is an `is_error` result whose text is the sentence. Setting `cancel` stops the call
        (the server is sent MCP's cancellation) and returns at once."""
        if self._closed:
            return error_result("the tools were stopped: this chat has ended")
        holder: dict[str, anyio.CancelScope] = {}
        fut: Future[ToolResult] = asyncio.run_coroutine_threadsafe(
            self._call_cancellable(qualified_name, dict(arguments or {}), holder, cancel),
            self._loop,
        )
        deadline = self.start_timeout + self.call_timeout + STOP_WAIT
        waited = 0.0
        while True:
            step = 0.05 if cancel is not None else 0.5
            try:
                return fut.result(step)
            except FutureTimeout:
                waited += step
            except BaseException:  # Ctrl-C in a terminal: stop the call, then let it go up
                self._cancel_soon(holder)
                raise
            if cancel is not None and cancel.is_set():
                self._cancel_soon(holder)
            if waited >= deadline:
                fut.cancel()
                return error_result(f"the tool '{qualified_name}' did not answer and was abandoned")

    def _cancel_soon(self, holder: dict[str, anyio.CancelScope]) -> None:
        scope = holder.get("scope")
        if scope is not None and not self._loop.is_closed():
            self._loop.call_soon_threadsafe(scope.cancel)

    # -- on the hub's thread ------------------------------------------------------------------

    async def _tools(self, names: list[str] | None) -> list[ToolSpec]:
        if names is None:
            names = [n for n, s in self._servers.items() if s.config.enabled]
        started = await asyncio.gather(*(self._ensure_started(n) for n in names))
        await asyncio.gather(*(self._refresh(s) for s in started if s is not None and s.stale))
        return [t for s in started if s is not None and s.state == "running" for t in s.tools]

    async def _refresh(self, server: HubServer) -> None:
        """List a server's tools again after it said they changed (kept as they were if the
        listing fails: the next call says what is wrong)."""
        session, server.stale = server.session, False
        if session is None:
            return
        try:
            tools = await list_tools(session)
        except (MCPError, pydantic.ValidationError, RuntimeError):
            return
        with self._lock:
            server.tools = [tool_spec(server.config.name, t) for t in tools]

    def _find(self, qualified: str) -> tuple[str, str] | None:
        """(server name, tool name) for a qualified name: the server whose `<slug>__` starts
        it, an enabled one before a disabled one, then the longest prefix. Of enabled servers
        only one can match unless their names clash, and then the one found is refused."""
        best, rank = None, (False, 0)
        for name, server in self._servers.items():
            prefix = _slug(name) + "__"
            here = (server.config.enabled, len(prefix))
            if qualified.startswith(prefix) and len(qualified) > len(prefix) and here > rank:
                best, rank = (name, qualified[len(prefix) :]), here
        return best

    async def _call_cancellable(
        self,
        qualified: str,
        arguments: dict[str, Any],
        holder: dict[str, anyio.CancelScope],
        cancel: threading.Event | None,
    ) -> ToolResult:
        with anyio.CancelScope() as scope:
            holder["scope"] = scope
            if cancel is not None and cancel.is_set():
                scope.cancel()
            return await self._call(qualified, arguments)
        return error_result(f"the call to '{qualified}' was cancelled")

    async def _call(self, qualified: str, arguments: dict[str, Any]) -> ToolResult:
        found = self._find(qualified)
        if found is None:
            return error_result(f"there is no tool '{qualified}' among the enabled MCP servers")
        name, tool = found
        server = await self._ensure_started(name)
        if server is None:
            return error_result(f"the MCP server '{name}' is disabled")
        client = server.client
        if server.state != "running" or client is None:
            return error_result(server.error or f"the MCP server '{name}' is not running")
        try:
            # The time limit is this scope's (`_timed`), not the SDK's read timeout: the time
            # the user takes to answer the server's question (elicitation) does not count.
            result = await self._timed(
                server, client.call_tool(tool, arguments, read_timeout_seconds=math.inf)
            )
        except (MCPError, TimeoutError) as e:
            if isinstance(e, TimeoutError) or e.code == mcp_types.REQUEST_TIMEOUT:
                why = (
                    f"the tool '{tool}' of the MCP server '{name}' did not answer within "
                    f"{self.call_timeout:g} s; the call was stopped and the server is restarted"
                )
                self._changed(name, server, "failed", why)
                server.stop.set()
                return error_result(why)
            if e.code == mcp_types.CONNECTION_CLOSED:
                why = (
                    f"the MCP server '{name}' stopped during the call to '{tool}'; "
                    "it will be started again on the next call"
                )
                self._changed(name, server, "failed", why)
                server.stop.set()
                return error_result(why)
            return error_result(
                f"the MCP server '{name}' refused the call to '{tool}': {e.message}"
            )
        except InputRequiredRoundsExceededError:
            return error_result(
                f"the MCP server '{name}' kept asking for input during the call to '{tool}'"
            )
        except (pydantic.ValidationError, RuntimeError) as e:
            return error_result(f"the MCP server '{name}' sent a result Hearth cannot read: {e}")
        if not isinstance(result, mcp_types.CallToolResult):
            return error_result(f"the MCP server '{name}' sent a result Hearth cannot read")
        return tool_result(result, self.result_limit)
