"""The MCP servers of a chat, behind one thread-safe synchronous object (`ToolHub`).

The MCP SDK is asyncio (anyio); Hearth's callers are a Qt window and a terminal loop. The hub
runs one asyncio loop on its own daemon thread; each server lives there in one task that owns
its connection (the SDK's transport and `ClientSession` context managers must be entered and
left in the same task). The public methods submit coroutines to that loop and wait.

Lifecycle of a server: "stopped" until something needs it (`tools()` or `call()` starts it:
on demand); "starting" while its process starts (or its HTTP session opens) and it answers
`initialize` and `tools/list`; "running"; "failed" with a sentence when it could not start,
stopped during a call (its process died, its HTTP endpoint went away) or did not answer a call
in time (it is then stopped, in case it hangs). A failed server is started again by the next
call that needs it. One server's failure is only its own calls' error results: nothing raises.
`close()` (or `set_servers` dropping one) stops the servers: a stdio server's stdin is closed,
then it is terminated and killed (the SDK's escalation).

A stdio server's stderr goes to `<logs>/mcp/<server>.log`; its last line is quoted in the
sentence when it fails to start.

Names: the model calls a tool by `<server slug>__<tool>` (`specs.qualified_name`). Two enabled
servers whose names could give the same such name (`specs.names_clash`: "a.b" and "a_b") are
both refused ("failed", with a sentence saying to rename one) and offer no tools, so a name
the user approves is always the (server, tool) pair that runs.
"""

from __future__ import annotations

import asyncio
import logging
import math
import threading
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from contextlib import AsyncExitStack, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, TextIO, TypeVar

import anyio
import mcp.types as mcp_types
import pydantic
from mcp import (
    Client,
    ClientSession,
    InputRequiredRoundsExceededError,
    StdioServerParameters,
    stdio_client,
)
from mcp.client import ClientRequestContext
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from mcp.shared.exceptions import MCPError
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from ..paths import logs_dir
from . import features
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
from .content import PromptSpec, ResourceContent, ResourceSpec
from .elicit import ElicitAnswer, Elicitation, parse_schema
from .results import tool_result
from .specs import (
    DEFAULT_CALL_TIMEOUT,
    DEFAULT_RESULT_LIMIT,
    DEFAULT_START_TIMEOUT,
    ToolResult,
    ToolSpec,
    error_result,
    names_clash,
    qualified_name,
)
from .specs import server_slug as _slug

__all__ = [
    "DEFAULT_CALL_TIMEOUT",
    "DEFAULT_RESULT_LIMIT",
    "DEFAULT_START_TIMEOUT",
    "ElicitHandler",
    "HubError",
    "ServerStatus",
    "ToolHub",
    "ToolResult",
    "ToolSpec",
    "qualified_name",
]

log = logging.getLogger(__name__)

_STOP_WAIT = 10.0  # seconds `close()` waits for the servers to stop

State = Literal["stopped", "starting", "running", "failed"]
T = TypeVar("T")

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


class _Server:
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


def _spec(server: str, tool: mcp_types.Tool) -> ToolSpec:
    schema = dict(tool.input_schema or {})
    schema.setdefault("type", "object")
    return ToolSpec(server, tool.name, tool.description or "", schema)


class ToolHub:
    """The MCP servers of `servers` (see the module doc for their lifecycle).

    `call_timeout`: seconds a call may take before it is an error result and its server is
    restarted. `result_limit`: characters of one result's text (the cut is said in it).
    `start_timeout`: seconds a server may take to start and list its tools.
    `log_dir`: where stdio servers' stderr goes (default `<hearth logs>/mcp`).
    Thread-safe; `on_status` callbacks run on the hub's thread."""

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
        self._servers: dict[str, _Server] = {}
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

    def tools(self, servers: Iterable[str] | None = None) -> list[ToolSpec]:
        """The tools of `servers` (default: every enabled one), starting those not running.
        A server that cannot start adds no tools: its `status()` says why. Unknown names are
        skipped."""
        names = None if servers is None else list(servers)
        result: list[ToolSpec] = self._run(self._tools(names), self.start_timeout + _STOP_WAIT)
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
        deadline = self.start_timeout + self.call_timeout + _STOP_WAIT
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

    def on_elicit(self, handler: ElicitHandler | None) -> None:
        """Who answers the servers' questions during calls (the window's form, the terminal's
        prompt); None declines them all."""
        self._elicit = handler

    def prompts(self, servers: Iterable[str] | None = None) -> list[PromptSpec]:
        """The prompts of `servers` (default: every enabled one), starting them; a server
        that offers none, cannot list them or failed adds none."""
        names = None if servers is None else list(servers)
        result: list[PromptSpec] = self._listing(names, features.list_prompts)
        return result

    def get_prompt(
        self, server: str, name: str, arguments: Mapping[str, str] | None = None
    ) -> list[dict[str, Any]]:
        """The messages of `server`'s prompt `name` filled with `arguments`, in /api/chat's
        shape (`content.prompt_messages`). Raises `HubError` with the sentence when it fails."""
        args = {str(k): str(v) for k, v in (arguments or {}).items()}
        messages: list[dict[str, Any]] = self._request(server, features.get_prompt, name, args)
        return messages

    def resources(self, servers: Iterable[str] | None = None) -> list[ResourceSpec]:
        """The resources `servers` list (default: every enabled one), starting them."""
        names = None if servers is None else list(servers)
        result: list[ResourceSpec] = self._listing(names, features.list_resources)
        return result

    def read_resource(self, server: str, uri: str) -> list[ResourceContent]:
        """What `server` gives for `uri` (`resources/read`). Raises `HubError` with the
        sentence when it fails."""
        parts: list[ResourceContent] = self._request(server, features.read_resource, uri)
        return parts

    def _listing(self, names: list[str] | None, fetch: Any) -> Any:
        try:
            return self._run(self._each(names, fetch), self.start_timeout + self.call_timeout)
        except FutureTimeout:
            return []

    def _request(self, server: str, request: Any, *args: Any) -> Any:
        wait = self.start_timeout + self.call_timeout + _STOP_WAIT
        try:
            return self._run(self._with_client(server, request, *args), wait)
        except FutureTimeout:
            raise HubError(f"the MCP server '{server}' did not answer in time") from None

    def _cancel_soon(self, holder: dict[str, anyio.CancelScope]) -> None:
        scope = holder.get("scope")
        if scope is not None and not self._loop.is_closed():
            self._loop.call_soon_threadsafe(scope.cancel)

    def close(self) -> None:
        """Stop every server and the hub's thread. Idempotent; the hub is unusable after."""
        if self._closed:
            return
        try:
            self._run(self._close(), _STOP_WAIT + 5)
        except (FutureTimeout, RuntimeError):
            log.warning("MCP servers did not all stop in time")
        finally:
            self._closed = True
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(5)
            if not self._loop.is_running():
                self._loop.close()

    def __enter__(self) -> ToolHub:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- on the hub's thread ------------------------------------------------------------------

    def _changed(self, name: str, server: _Server, state: State, error: str = "") -> None:
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
                    self._servers[name] = _Server(config)
        await self._stop_all(stopping)

    async def _stop_all(self, servers: list[_Server]) -> None:
        tasks = [s.task for s in servers if s.task is not None and not s.task.done()]
        for s in servers:
            s.stop.set()
        if tasks:
            _, pending = await asyncio.wait(tasks, timeout=_STOP_WAIT)
            for t in pending:
                t.cancel()

    async def _close(self) -> None:
        with self._lock:
            servers = list(self._servers.values())
        await self._stop_all(servers)

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

    async def _refuse(self, name: str, server: _Server, why: str) -> None:
        """Stop `server` if it runs and mark it failed with `why` (it offers no tools)."""
        if server.state != "failed" or server.error != why:
            self._changed(name, server, "failed", why)
        if server.task is not None and not server.task.done():
            server.stop.set()
            await asyncio.wait([server.task], timeout=_STOP_WAIT)
        with self._lock:
            server.tools = []

    async def _ensure_started(self, name: str) -> _Server | None:
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
            await asyncio.wait([server.task], timeout=_STOP_WAIT)
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

    async def _serve(self, name: str, server: _Server) -> None:
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
                    server.tools = [_spec(name, t) for t in tools]
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

    async def _tools(self, names: list[str] | None) -> list[ToolSpec]:
        if names is None:
            names = [n for n, s in self._servers.items() if s.config.enabled]
        started = await asyncio.gather(*(self._ensure_started(n) for n in names))
        await asyncio.gather(*(self._refresh(s) for s in started if s is not None and s.stale))
        return [t for s in started if s is not None and s.state == "running" for t in s.tools]

    async def _each(self, names: list[str] | None, fetch: Any) -> list[Any]:
        """`fetch(client, server name)` for every running server of `names` (started first);
        a server whose listing fails adds nothing (its calls say what is wrong)."""
        if names is None:
            names = [n for n, s in self._servers.items() if s.config.enabled]
        started = await asyncio.gather(*(self._ensure_started(n) for n in names))
        out: list[Any] = []
        for name, server in zip(names, started, strict=True):
            if server is None or server.client is None or server.state != "running":
                continue
            try:
                out.extend(await self._timed(server, fetch(server.client, name)))
            except (MCPError, TimeoutError, pydantic.ValidationError, RuntimeError) as e:
                log.info("listing the MCP server %r failed: %s", name, e)
        return out

    async def _with_client(self, name: str, request: Any, *args: Any) -> Any:
        """`request(client, server name, *args)` on the running server `name`, in its time
        limit; every failure is `HubError` with a sentence."""
        server = await self._ensure_started(name)
        if server is None:
            raise HubError(f"there is no enabled MCP server '{name}'")
        if server.client is None or server.state != "running":
            raise HubError(server.error or f"the MCP server '{name}' is not running")
        try:
            return await self._timed(server, request(server.client, name, *args))
        except TimeoutError:
            raise HubError(
                f"the MCP server '{name}' did not answer within {self.call_timeout:g} s"
            ) from None
        except MCPError as e:
            raise HubError(f"the MCP server '{name}' refused the request: {e.message}") from None
        except (pydantic.ValidationError, RuntimeError) as e:
            raise HubError(
                f"the MCP server '{name}' sent an answer Hearth cannot read: {e}"
            ) from None

    async def _timed(self, server: _Server, awaitable: Any) -> Any:
        """Await `awaitable` within `call_timeout`; TimeoutError past it. The limit is paused
        while the user answers the server's question (`_elicitation_callback`)."""
        with anyio.CancelScope(deadline=anyio.current_time() + self.call_timeout) as scope:
            server.deadlines.add(scope)
            try:
                return await awaitable
            finally:
                server.deadlines.discard(scope)
        raise TimeoutError

    def _elicitation_callback(self, name: str, server: _Server) -> Any:
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

    async def _refresh(self, server: _Server) -> None:
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
            server.tools = [_spec(server.config.name, t) for t in tools]

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
