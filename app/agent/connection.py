"""The MCP connection helpers of `hub.ToolHub` (on the hub's loop): the already open streams
as the `Transport` `mcp.Client` enters, the forwarding that sees a transport's end, the tool
listing (paged), a 2026-07-28 connection's "tools changed" subscription, and the sentences
for a server that could not start (quoting the last line of its stderr log)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import httpx2
import mcp.types as mcp_types
from mcp import Client, ClientSession
from mcp.shared.exceptions import MCPError

from .config import ServerConfig

log = logging.getLogger(__name__)

__all__ = [
    "cancel_when",
    "forward",
    "last_line",
    "list_tools",
    "start_failure",
    "streams",
    "watch_tools",
]


def last_line(path: Path, start: int) -> str:
    """The last non-empty line written to `path` after offset `start` (a server's stderr)."""
    try:
        with open(path, "rb") as f:
            f.seek(start)
            lines = [ln.strip() for ln in f.read()[-4000:].decode("utf-8", "replace").splitlines()]
    except OSError:
        return ""
    lines = [ln for ln in lines if ln]
    return lines[-1][:300] if lines else ""


@asynccontextmanager
async def streams(read: Any, write: Any) -> AsyncIterator[tuple[Any, Any]]:
    """Streams already open, as the `Transport` `mcp.Client` enters."""
    yield read, write


async def watch_tools(client: Client, name: str, changed: Callable[[], None]) -> None:
    """Call `changed()` whenever the server says its tools changed (a 2026-07-28
    connection's `subscriptions/listen`); a server that refuses the subscription is not
    watched."""
    try:
        async with client.listen(tools_list_changed=True) as events:
            async for _event in events:
                changed()
    except Exception as e:  # refused, or the connection ended: nothing to watch
        log.debug("not watching the tools of %r: %s", name, e)


async def forward(source: Any, sink: Any, closed: anyio.Event) -> None:
    try:
        async with sink:
            async for item in source:
                await sink.send(item)
    except (anyio.ClosedResourceError, anyio.BrokenResourceError, anyio.EndOfStream):
        pass
    finally:
        closed.set()


async def cancel_when(event: asyncio.Event | anyio.Event, scope: anyio.CancelScope) -> None:
    await event.wait()
    scope.cancel()


async def list_tools(session: ClientSession) -> list[mcp_types.Tool]:
    tools: list[mcp_types.Tool] = []
    cursor: str | None = None
    for _ in range(100):  # a server paging forever cannot hang the start
        page = await session.list_tools(
            params=mcp_types.PaginatedRequestParams(cursor=cursor) if cursor else None
        )
        tools.extend(page.tools)
        cursor = page.next_cursor
        if not cursor:
            break
    return tools


def start_failure(name: str, config: ServerConfig, e: BaseException) -> str:
    """The sentence for a server that could not start or whose connection broke."""
    if isinstance(e, BaseExceptionGroup):
        leaves = [x for x in e.exceptions if not isinstance(x, anyio.get_cancelled_exc_class())]
        if leaves:
            return start_failure(name, config, leaves[0])
    if isinstance(e, FileNotFoundError) and config.command is not None:
        return f"the MCP server '{name}' could not start: there is no program '{config.command}'"
    if isinstance(e, OSError) and config.command is not None:
        return f"the MCP server '{name}' could not start '{config.command}': {e.strerror or e}"
    if isinstance(e, httpx2.HTTPError | OSError):
        return f"the MCP server '{name}' at {config.url} cannot be reached: {e}"
    if isinstance(e, MCPError):
        if e.code == mcp_types.CONNECTION_CLOSED:
            return f"the MCP server '{name}' closed the connection while starting"
        if e.code == mcp_types.REQUEST_TIMEOUT:
            return f"the MCP server '{name}' did not answer while starting"
        where = f" at {config.url}" if config.url else ""
        return f"the MCP server '{name}'{where} failed to start: {e.message}"
    return f"the MCP server '{name}' failed: {e}"
