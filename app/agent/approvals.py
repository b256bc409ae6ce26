"""Which tool calls run without asking: the user's grants, one policy for the desktop app and
`hearth run --tools`.

A call is asked about with four answers (`loop.Decision`): allow once, always allow this tool,
always allow this server, deny. The two "always" answers become a `Grant`, tied to the
server's *identity* (`server_identity`: its command and arguments for stdio, its URL for HTTP)
and, for a tool grant, the tool's own name (not the `<server>__<tool>` name the model sees).
A grant applies only while the configured server has that identity: a server whose command,
arguments or URL changed is asked about again, whatever its name (`Approvals.prune` also drops
such grants, so the list the user sees holds only grants that apply).

Grants are kept in the app's settings file (`AppSettings.tool_grants`, a list of
`Grant.to_json()` objects), which the desktop app and `hearth run --tools` share: each reads
the file again before using or changing them (`reload`) and writes only that key back at
once (`save`: `app_settings.save_tool_grants`), so a grant or revoke in one is never lost
by the other.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from .config import ServerConfig
from .loop import Approve, Decision, ToolCall
from .specs import ToolSpec

__all__ = [
    "Approvals",
    "Grant",
    "policy_approve",
    "server_identity",
]


def server_identity(config: ServerConfig) -> str:
    """What a grant is tied to: `stdio ["command", "arg", ...]` (JSON) or `http URL`. The
    environment, folder and headers are not part of it (a token that changes in a header does
    not make the server another one)."""
    if config.command is not None:
        return "stdio " + json.dumps([config.command, *config.args], ensure_ascii=False)
    return f"http {config.url}"


@dataclass(frozen=True)
class Grant:
    """ "Always allow": `tool` of the server `identity` (named `server` when granted), or every
    tool of it when `tool` is "" ("always allow this server")."""

    server: str
    identity: str
    tool: str = ""

    @property
    def whole_server(self) -> bool:
        return not self.tool

    def label(self) -> str:
        """How the grant is listed: "weather: forecast" or "weather: every tool"."""
        return f"{self.server}: {self.tool or 'every tool'}"

    def to_json(self) -> dict[str, str]:
        return {"server": self.server, "identity": self.identity, "tool": self.tool}

    @staticmethod
    def from_json(raw: Any) -> Grant | None:
        """A stored grant, or None for anything that is not one (skipped, never a crash)."""
        if not isinstance(raw, dict):
            return None
        server, identity, tool = raw.get("server"), raw.get("identity"), raw.get("tool", "")
        if not (isinstance(server, str) and isinstance(identity, str) and isinstance(tool, str)):
            return None
        return Grant(server, identity, tool) if identity else None


def _parsed(raw: Iterable[Any]) -> list[Grant]:
    return [g for g in map(Grant.from_json, raw) if g is not None]


class Approvals:
    """The grants, thread-safe (an agent loop's thread asks while the window lists them).
    `save(grants)` is called after every change with the grants to keep."""

    def __init__(
        self,
        grants: Iterable[Grant] = (),
        save: Callable[[list[Grant]], None] | None = None,
        reload: Callable[[], Iterable[Any]] | None = None,
    ) -> None:
        self._grants = list(dict.fromkeys(grants))
        self._save = save
        # Where the grants are kept, read again before each use and change: another program
        # (the CLI beside the app) may have changed them since (stored `to_json` objects).
        self._reload = reload
        self._lock = threading.Lock()

    @classmethod
    def from_json(
        cls,
        raw: Iterable[Any],
        save: Callable[[list[Grant]], None] | None = None,
        reload: Callable[[], Iterable[Any]] | None = None,
    ) -> Approvals:
        return cls(_parsed(raw), save, reload)

    def _refresh(self) -> None:
        """Take the kept grants as they are now (under the lock)."""
        if self._reload is not None:
            self._grants = list(dict.fromkeys(_parsed(self._reload())))

    def grants(self) -> list[Grant]:
        with self._lock:
            self._refresh()
            return list(self._grants)

    def allows(self, config: ServerConfig | None, tool: str) -> bool:
        """Whether a call of `tool` of the server `config` runs without asking."""
        if config is None:
            return False
        identity = server_identity(config)
        with self._lock:
            self._refresh()
            return any(g.identity == identity and g.tool in ("", tool) for g in self._grants)

    def grant(self, config: ServerConfig, tool: str = "") -> Grant:
        """Remember "always allow" for `tool` of `config` ("" = the whole server)."""
        new = Grant(config.name, server_identity(config), tool)
        with self._lock:
            self._refresh()
            if new in self._grants:
                return new
            self._grants.append(new)
            grants = list(self._grants)
        self._store(grants)
        return new

    def revoke(self, grant: Grant) -> None:
        """Ask again before the calls `grant` allowed."""
        with self._lock:
            self._refresh()
            if grant not in self._grants:
                return
            self._grants.remove(grant)
            grants = list(self._grants)
        self._store(grants)

    def prune(self, servers: Mapping[str, ServerConfig]) -> list[Grant]:
        """Drop the grants of servers that are gone or whose identity changed (by the name
        they were granted under); returns the grants dropped."""
        identities = {server_identity(c) for c in servers.values()}
        with self._lock:
            self._refresh()
            dropped = [
                g
                for g in self._grants
                if g.identity not in identities
                or (g.server in servers and server_identity(servers[g.server]) != g.identity)
            ]
            if not dropped:
                return []
            self._grants = [g for g in self._grants if g not in dropped]
            grants = list(self._grants)
        self._store(grants)
        return dropped

    def _store(self, grants: list[Grant]) -> None:
        if self._save is not None:
            self._save(grants)


def policy_approve(
    approvals: Approvals,
    servers: Callable[[], Mapping[str, ServerConfig]],
    ask: Callable[[ToolCall, ToolSpec], Decision],
    on_allowed: Callable[[ToolCall, ToolSpec, Grant], None] | None = None,
) -> Approve:
    """The loop's `Approve` for every front end: a call a grant covers runs (ALLOW_ALWAYS;
    `on_allowed` is told which grant, a terminal prints it); any other is asked (`ask`, the
    window's card or the terminal's line), and an "always" answer becomes a grant for the
    server as `servers()` configures it now."""

    def approve(call: ToolCall, spec: ToolSpec) -> Decision:
        config = servers().get(spec.server)
        if config is not None and approvals.allows(config, spec.name):
            if on_allowed is not None:
                identity = server_identity(config)
                found = next(
                    g
                    for g in approvals.grants()
                    if g.identity == identity and g.tool in ("", spec.name)
                )
                on_allowed(call, spec, found)
            return Decision.ALLOW_ALWAYS
        decision = ask(call, spec)
        if config is not None and decision is Decision.ALLOW_ALWAYS:
            approvals.grant(config, spec.name)
        elif config is not None and decision is Decision.ALLOW_SERVER:
            approvals.grant(config)
        return decision

    return approve
