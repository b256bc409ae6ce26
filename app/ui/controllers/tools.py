"""The MCP servers the app knows (hearth.agent's mcp.json, the file `hearth run --tools` reads
too), the one ToolHub that runs them for the app's lifetime, and their status.

The hub starts servers on demand on its own thread; nothing here blocks the window: listing
the servers' tools (which starts them) and reconfiguring them run on short-lived threads.
News from those threads (and the hub's) reaches `status_changed` on the GUI thread.
"""

from __future__ import annotations

import contextlib
import shutil
import threading
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from PySide6.QtCore import QObject, Signal

from ...agent.approvals import Approvals, Grant, policy_approve
from ...agent.config import (
    ConfigError,
    ServerConfig,
    default_config_path,
    load_config_file,
    parse_config,
    save_config_file,
)
from ...agent.hub import ElicitHandler, ServerStatus, ToolHub, ToolSpec
from ...agent.loop import Approve, Decision, ToolCall
from ...app_settings import load_tool_grants, save_tool_grants
from .settings import SettingsController

__all__ = ["ToolsController", "server_entry"]


def server_entry(config: ServerConfig) -> dict[str, Any]:
    """One server as its `mcpServers` entry (the shape the edit dialog shows)."""
    from ...agent.config import dump_config

    return dict(dump_config({config.name: config})["mcpServers"][config.name])


class ToolsController(QObject):
    servers_changed = Signal()
    status_changed = Signal()  # always on the GUI thread
    _status_elsewhere = Signal()  # emitted on other threads; queued to `_relay`
    _grants_elsewhere = Signal(object)  # list[Grant] from any thread; saved on the GUI thread

    def __init__(
        self,
        settings: SettingsController,
        path: Path | None = None,
        parent: QObject | None = None,
    ) -> None:
        super().__init__(parent)
        self._settings = settings
        self.path = path or default_config_path()
        # A file that does not parse is kept as it is (and copied aside before the first save),
        # and the sentence saying why is shown in Settings.
        self.load_error = ""
        self._servers: dict[str, ServerConfig] = {}
        try:
            if self.path.exists():
                self._servers = load_config_file(self.path)
        except (ConfigError, OSError, ValueError) as e:
            self.load_error = str(e)
        self._hub: ToolHub | None = None
        self._elicit: ElicitHandler | None = None
        self._lock = threading.Lock()
        self._closed = False
        self._status_elsewhere.connect(self._relay)
        self._grants_elsewhere.connect(self._save_grants)
        # "Always allow" grants: an agent loop's thread adds them, the settings file keeps them.
        # The file is their truth (the CLI changes them too): each change is written at once,
        # from whichever thread makes it, and the settings on screen follow on the GUI thread.
        self.approvals = Approvals.from_json(
            load_tool_grants(), self._write_grants, reload=load_tool_grants
        )

    def _relay(self) -> None:
        if not self._closed:
            self.status_changed.emit()

    # -- the servers ---------------------------------------------------------------------------

    def servers(self) -> dict[str, ServerConfig]:
        return dict(self._servers)

    def enabled_servers(self) -> list[str]:
        return [n for n, c in self._servers.items() if c.enabled]

    def validate(self, data: dict[str, Any] | str) -> tuple[dict[str, ServerConfig], str]:
        """Parse a `{"mcpServers": ...}` document: (servers, "") or ({}, the sentence why not)."""
        try:
            return parse_config(data), ""
        except ConfigError as e:
            return {}, str(e)
        except ValueError as e:  # JSON that does not parse
            return {}, str(e)

    def put_server(self, config: ServerConfig, old_name: str = "") -> None:
        """Add `config`, or replace the server called `old_name` (renaming it keeps its place)."""
        if old_name and old_name != config.name and old_name in self._servers:
            merged = {
                (config.name if n == old_name else n): (config if n == old_name else c)
                for n, c in self._servers.items()
            }
        else:
            merged = {**self._servers, config.name: config}
        self._set(merged)

    def add_servers(self, servers: dict[str, ServerConfig]) -> None:
        """Pasted JSON: its servers join (a server of the same name is replaced)."""
        self._set({**self._servers, **servers})

    def remove_server(self, name: str) -> None:
        if name in self._servers:
            self._set({n: c for n, c in self._servers.items() if n != name})

    def _set(self, servers: dict[str, ServerConfig]) -> None:
        if self.load_error and self.path.exists():
            shutil.copy2(self.path, self.path.with_name(self.path.name + ".damaged"))
            self.load_error = ""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        save_config_file(self.path, servers)
        self._servers = servers
        self.approvals.prune(servers)  # a changed command or URL is asked about again
        with self._lock:
            hub = self._hub
        if hub is not None:  # stopping a changed server may take seconds: not on the GUI thread
            threading.Thread(
                target=self._reconfigure, args=(hub, servers), name="hearth-tools-set", daemon=True
            ).start()
        self.servers_changed.emit()
        self.status_changed.emit()

    def _reconfigure(self, hub: ToolHub, servers: dict[str, ServerConfig]) -> None:
        with contextlib.suppress(RuntimeError):  # the hub closed meanwhile (the app quit)
            hub.set_servers(servers)
        self._status_elsewhere.emit()

    # -- the hub -------------------------------------------------------------------------------

    def hub(self) -> ToolHub:
        """The one hub, made on first use (no thread runs until a chat uses tools)."""
        with self._lock:
            if self._hub is None:
                self._hub = ToolHub(
                    self._servers, call_timeout=float(self._settings.current().tool_call_timeout)
                )
                if self._elicit is not None:
                    self._hub.on_elicit(self._elicit)
                on_status = getattr(self._hub, "on_status", None)
                if on_status is not None:
                    on_status(lambda *_a: self._status_elsewhere.emit())
            return self._hub

    def set_elicit_handler(self, handler: ElicitHandler) -> None:
        """Who answers the servers' questions during calls (`McpController.ask`)."""
        with self._lock:
            self._elicit = handler
            if self._hub is not None:
                self._hub.on_elicit(handler)

    def set_call_timeout(self, seconds: int) -> None:
        self._settings.set_tool_call_timeout(seconds)
        with self._lock:
            hub = self._hub
        if hub is not None:
            hub.call_timeout = float(seconds)

    def _write_grants(self, grants: list[Grant]) -> None:
        save_tool_grants([g.to_json() for g in grants])
        self._grants_elsewhere.emit(grants)

    def _save_grants(self, grants: list[Grant]) -> None:
        self._settings.set_tool_grants([g.to_json() for g in grants])

    def policy(self, ask: Callable[[ToolCall, ToolSpec], Decision]) -> Approve:
        """The loop's `Approve`: the grants first, then `ask` (the approval card); an
        "always" answer becomes a grant tied to the server's command or URL."""
        return policy_approve(self.approvals, self.servers, ask)

    def grants(self) -> list[Grant]:
        return self.approvals.grants()

    def revoke(self, grant: Grant) -> None:
        """Ask again before the calls `grant` allowed."""
        self.approvals.revoke(grant)

    def status(self) -> dict[str, ServerStatus]:
        """Each known server's state, error sentence and tools ("stopped" before first use)."""
        with self._lock:
            hub = self._hub
        found = hub.status() if hub is not None else {}
        return {n: found.get(n) or ServerStatus(state="stopped") for n in self._servers}

    def check(self, names: Iterable[str] | None = None) -> None:
        """Start the servers (all enabled ones by default) to list their tools, off the GUI
        thread; `status_changed` follows when they answered or failed."""
        wanted = list(names) if names is not None else self.enabled_servers()

        def run() -> None:
            try:
                self.hub().tools(wanted)
            except RuntimeError:  # the hub closed meanwhile (the app quit)
                pass
            finally:
                self._status_elsewhere.emit()

        threading.Thread(target=run, name="hearth-tools-check", daemon=True).start()

    def tools(self, servers: Iterable[str]) -> list[ToolSpec]:
        """The tools of `servers` (starting them): call from a worker thread, never the GUI's."""
        return self.hub().tools(list(servers))

    def close(self) -> None:
        """At exit: stop every server."""
        self._closed = True
        with self._lock:
            hub, self._hub = self._hub, None
        if hub is not None:
            hub.close()
