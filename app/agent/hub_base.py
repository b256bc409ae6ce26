"""The bookkeeping under `hub.ToolHub`: the hub's asyncio thread, its configured servers and
their states.

`HubBase` owns the event loop (on a daemon thread) that every server's connection lives on,
`_run` (submit a coroutine to it and wait: the synchronous facade's one door), the table of
configured servers (`HubServer`, hub-thread state) and the status callbacks (`_changed` sets a
server's state and tells them). `set_servers` reconfigures and `close` stops everything; how a
server is started, held and stopped is `hub_connection.HubConnections`' part. The light types
a front end sees (`ServerStatus`, `HubError`, `ElicitHandler`) are defined here.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable, Mapping
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Self

import anyio
import mcp.types as mcp_types
from mcp import Client, ClientSession

from .config import ServerConfig
from .elicit import ElicitAnswer, Elicitation
from .specs import DEFAULT_CALL_TIMEOUT, DEFAULT_RESULT_LIMIT, DEFAULT_START_TIMEOUT, ToolSpec

__all__ = [
    "STOP_WAIT",
    "ElicitHandler",
    "HubBase",
    "HubError",
    "HubServer",
    "ServerStatus",
    "State",
    "tool_spec",
]

log = logging.getLogger(__name__)

STOP_WAIT = 10.0  # seconds `close()` waits for the servers to stop

State = Literal["stopped", "starting", "running", "failed"]

ElicitHandler = Callable[[Elicitation], ElicitAnswer]
"""Asks the user a server's question (`elicit.Elicitation`); runs on a worker thread and may
block until the user answers. Without one, every question is declined."""


class HubError(Exception):
    """A prompt or resource request that failed; the message is the sentence to show."""


@dataclass(frozen=True)
class ServerStatus:
    """A snapshot of one server: its `state`, the sentence that says why it failed (`error`,
    empty otherwise) and the tools it listed when it last started."""

    state: State = "stopped"
    error: str = ""
    tools: list[ToolSpec] = field(default_factory=list)
    protocol: str = ""  # the MCP version agreed with the server ("2026-07-28", "2025-11-25", ...)


class HubServer:
    """One configured server and its connection (hub-thread state)."""

    def __init__(self, config: ServerConfig) -> None:
        self.config = config
        self.state: State = "stopped"
        self.error = ""
        self.tools: list[ToolSpec] = []
        self.session: ClientSession | None = None
        self.client: Client | None = None
        self.protocol = ""
        self.deadlines: set[anyio.CancelScope] = set()  # calls running (their time limits)
        self.task: asyncio.Task[None] | None = None
        self.ready = asyncio.Event()
        self.stop = asyncio.Event()
        self.stale = False  # the server said its tools changed (tools/list_changed)

    def status(self) -> ServerStatus:
        return ServerStatus(self.state, self.error, list(self.tools), self.protocol)

    def mark_stale(self) -> None:
        self.stale = True


def tool_spec(server: str, tool: mcp_types.Tool) -> ToolSpec:
    schema = dict(tool.input_schema or {})
    schema.setdefault("type", "object")
    return ToolSpec(server, tool.name, tool.description or "", schema)


class HubBase:
    """The MCP servers of `servers`: the thread their connections live on and their states
    (`hub.ToolHub` is the whole hub: its doc says what the arguments are, its module doc a
    server's lifecycle). Thread-safe; `on_status` callbacks run on the hub's thread."""

    def __init__(
        self,
        servers: Mapping[str, ServerConfig],
        *,
        call_timeout: float = DEFAULT_CALL_TIMEOUT,
        result_limit: int = DEFAULT_RESULT_LIMIT,
        start_timeout: float = DEFAULT_START_TIMEOUT,
        log_dir: Path | None = None,
    ) -> None:
        self.call_timeout = call_timeout
        self.result_limit = result_limit
        self.start_timeout = start_timeout
        self._log_dir = log_dir
        self._lock = threading.Lock()
        self._callbacks: list[Callable[[str, ServerStatus], None]] = []
        self._closed = False
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self._loop.run_forever, name="hearth-mcp-hub", daemon=True
        )
        self._thread.start()
        self._servers: dict[str, HubServer] = {}
        self._elicit: ElicitHandler | None = None
        self._run(self._set_servers(dict(servers)))

    # -- the synchronous facade -------------------------------------------------------------

    def _run(self, coro: Any, timeout: float | None = None) -> Any:
        if self._closed:
            coro.close()
            raise RuntimeError("the tool hub is closed")
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout)

    def on_status(self, callback: Callable[[str, ServerStatus], None]) -> None:
        """Call `callback(server name, status)` (on the hub's thread) whenever a server's
        state changes; a GUI forwards it to its own thread. The callback must not call the
        hub's blocking methods (they would wait on the thread running it); `status()` is safe."""
        with self._lock:
            self._callbacks.append(callback)

    def status(self) -> dict[str, ServerStatus]:
        """Every configured server's state, error sentence and last listed tools."""
        with self._lock:
            return {name: s.status() for name, s in self._servers.items()}

    def set_servers(self, servers: Mapping[str, ServerConfig]) -> None:
        """Reconfigure: servers removed or changed are stopped (a changed one starts again with
        its new config when needed); unchanged ones keep running."""
        self._run(self._set_servers(dict(servers)))

    def close(self) -> None:
        """Stop every server and the hub's thread. Idempotent; the hub is unusable after."""
        if self._closed:
            return
        try:
            self._run(self._close(), STOP_WAIT + 5)
        except (FutureTimeout, RuntimeError):
            log.warning("MCP servers did not all stop in time")
        finally:
            self._closed = True
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(5)
            if not self._loop.is_running():
                self._loop.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- on the hub's thread ------------------------------------------------------------------

    def _changed(self, name: str, server: HubServer, state: State, error: str = "") -> None:
        with self._lock:
            server.state, server.error = state, error
            callbacks = list(self._callbacks)
            status = server.status()
        for cb in callbacks:
            try:
                cb(name, status)
            except Exception:  # a display's bug must not stop the tools
                log.exception("an MCP status callback failed")

    async def _set_servers(self, configs: dict[str, ServerConfig]) -> None:
        stopping = []
        with self._lock:
            for name, server in list(self._servers.items()):
                if configs.get(name) != server.config:
                    del self._servers[name]
                    stopping.append(server)
            for name, config in configs.items():
                if name not in self._servers:
                    self._servers[name] = HubServer(config)
        await self._stop_all(stopping)

    async def _stop_all(self, servers: list[HubServer]) -> None:
        tasks = [s.task for s in servers if s.task is not None and not s.task.done()]
        for s in servers:
            s.stop.set()
        if tasks:
            _, pending = await asyncio.wait(tasks, timeout=STOP_WAIT)
            for t in pending:
                t.cancel()

    async def _close(self) -> None:
        with self._lock:
            servers = list(self._servers.values())
        await self._stop_all(servers)
