"""The MCP servers a user configured, in the JSON shape Claude Desktop and most MCP clients
share, so an existing config can be pasted as it is:

    {"mcpServers": {
        "files": {"command": "npx", "args": ["-y", "@modelcontextprotocol/server-filesystem",
                  "/tmp"], "env": {"DEBUG": "1"}, "cwd": "/tmp"},
        "remote": {"url": "https://example.com/mcp", "headers": {"Authorization": "Bearer ..."}}
    }}

A server is stdio (`command`, `args`, `env`, `cwd`) or streamable HTTP (`url`, `headers`);
`"type"` may say which (`"stdio"`, `"http"`, `"streamable-http"`, `"streamableHttp"`); SSE, the
transport MCP deprecated, is refused with a sentence. `"disabled": true` (Cline's key, or
`"enabled": false`) keeps a server configured but off. Keys Hearth does not use (`autoApprove`,
`timeout`, ...) are kept in `ServerConfig.extra` and written back, so saving loses nothing.
VS Code's top-level `"servers"` is read as `"mcpServers"`.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlparse

from ..paths import data_dir

__all__ = [
    "ConfigError",
    "ServerConfig",
    "default_config_path",
    "dump_config",
    "load_config_file",
    "parse_config",
    "save_config_file",
]

Transport = Literal["stdio", "http"]

_STDIO_KEYS = ("command", "args", "env", "cwd")
_HTTP_KEYS = ("url", "headers")
_OWN_KEYS = frozenset((*_STDIO_KEYS, *_HTTP_KEYS, "type", "transport", "disabled", "enabled"))
_TYPES: dict[str, Transport] = {
    "stdio": "stdio",
    "http": "http",
    "streamable-http": "http",
    "streamable_http": "http",
    "streamableHttp": "http",
}


class ConfigError(ValueError):
    """A config that cannot be used; the message is a sentence naming the server and field."""


@dataclass(frozen=True)
class ServerConfig:
    """One MCP server: stdio when `command` is set, streamable HTTP when `url` is."""

    name: str
    command: str | None = None
    args: tuple[str, ...] = ()
    env: dict[str, str] = field(default_factory=dict)
    cwd: str | None = None
    url: str | None = None
    headers: dict[str, str] = field(default_factory=dict)
    enabled: bool = True
    extra: dict[str, Any] = field(default_factory=dict)  # keys kept for the round trip

    @property
    def transport(self) -> Transport:
        return "stdio" if self.command is not None else "http"


def _str_map(name: str, key: str, value: Any) -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ConfigError(f"server '{name}': \"{key}\" must be an object of names to strings")
    out: dict[str, str] = {}
    for k, v in value.items():
        if isinstance(v, bool) or not isinstance(v, str | int | float):
            raise ConfigError(f"server '{name}': \"{key}\" value for '{k}' must be a string")
        out[str(k)] = str(v)
    return out


def _server(name: str, raw: Any) -> ServerConfig:
    if not isinstance(raw, dict):
        raise ConfigError(f'server \'{name}\' must be an object with "command" or "url"')
    kind = raw.get("type", raw.get("transport"))
    if kind is not None and kind not in _TYPES:
        if kind == "sse":
            raise ConfigError(
                f"server '{name}' uses the SSE transport, which MCP deprecated and Hearth does "
                'not support; use its streamable HTTP address ("url") instead'
            )
        raise ConfigError(f'server \'{name}\': "type" must be "stdio" or "http", not {kind!r}')
    command, url = raw.get("command"), raw.get("url")
    if command is not None and url is not None:
        raise ConfigError(f'server \'{name}\' has both "command" and "url"; give one')
    if command is None and url is None:
        raise ConfigError(f'server \'{name}\' needs "command" (a program) or "url" (HTTP)')
    if kind is not None and (_TYPES[kind] == "stdio") != (command is not None):
        raise ConfigError(f"server '{name}': \"type\" {kind!r} does not match its fields")
    enabled = raw.get("enabled", True)
    disabled = raw.get("disabled", False)
    if not isinstance(enabled, bool) or not isinstance(disabled, bool):
        raise ConfigError(f"server '{name}': \"disabled\" must be true or false")
    extra = {k: v for k, v in raw.items() if k not in _OWN_KEYS}
    if kind is not None:
        extra["type"] = kind
    common: dict[str, Any] = {"name": name, "enabled": enabled and not disabled, "extra": extra}
    if command is not None:
        if not isinstance(command, str) or not command.strip():
            raise ConfigError(f"server '{name}': \"command\" must be a program name or path")
        args = raw.get("args", [])
        if not isinstance(args, list) or not all(
            isinstance(a, str | int | float) and not isinstance(a, bool) for a in args
        ):
            raise ConfigError(f"server '{name}': \"args\" must be a list of strings")
        cwd = raw.get("cwd")
        if cwd is not None and (not isinstance(cwd, str) or not cwd):
            raise ConfigError(f"server '{name}': \"cwd\" must be a folder path")
        return ServerConfig(
            command=command,
            args=tuple(str(a) for a in args),
            env=_str_map(name, "env", raw.get("env")),
            cwd=cwd,
            **common,
        )
    parsed = urlparse(url) if isinstance(url, str) else None
    if parsed is None or parsed.scheme not in ("http", "https") or not parsed.netloc:
        raise ConfigError(f"server '{name}': \"url\" must be an http:// or https:// address")
    return ServerConfig(url=url, headers=_str_map(name, "headers", raw.get("headers")), **common)


def parse_config(data: Mapping[str, Any] | str) -> dict[str, ServerConfig]:
    """The servers of a config (a parsed JSON object or its text), by name, in file order.

    Raises `ConfigError` with a sentence for text that is not JSON, a missing `mcpServers`
    object, or a server whose fields cannot be used (naming the server and the field)."""
    if isinstance(data, str):
        try:
            data = json.loads(data)
        except ValueError as e:
            raise ConfigError(f"the MCP config is not valid JSON: {e}") from None
    if not isinstance(data, Mapping):
        raise ConfigError('the MCP config must be a JSON object with "mcpServers"')
    servers = data.get("mcpServers", data.get("servers"))
    if servers is None:
        raise ConfigError('the MCP config has no "mcpServers" object')
    if not isinstance(servers, dict):
        raise ConfigError('"mcpServers" must be an object of server names to servers')
    out: dict[str, ServerConfig] = {}
    for name, raw in servers.items():
        if not isinstance(name, str) or not name.strip():
            raise ConfigError('a server in "mcpServers" has an empty name')
        out[name] = _server(name, raw)
    return out


def _dump_server(s: ServerConfig) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if s.command is not None:
        out["command"] = s.command
        out["args"] = list(s.args)
        if s.env:
            out["env"] = dict(s.env)
        if s.cwd is not None:
            out["cwd"] = s.cwd
    else:
        out["url"] = s.url
        if s.headers:
            out["headers"] = dict(s.headers)
    if not s.enabled:
        out["disabled"] = True
    out.update(s.extra)
    return out


def dump_config(servers: Mapping[str, ServerConfig]) -> dict[str, Any]:
    """The `{"mcpServers": ...}` object for `servers`; `parse_config` gives them back."""
    return {"mcpServers": {name: _dump_server(s) for name, s in servers.items()}}


def default_config_path() -> Path:
    """`mcp.json` in Hearth's data folder (beside `settings.json`; under HEARTH_HOME if set)."""
    return data_dir() / "mcp.json"


def load_config_file(
    path: str | os.PathLike[str], *, missing_ok: bool = False
) -> dict[str, ServerConfig]:
    """The servers in the file at `path`. A missing file is `ConfigError` (or no servers with
    `missing_ok`); unreadable or invalid content is `ConfigError` naming the file."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        if missing_ok:
            return {}
        raise ConfigError(f"there is no MCP config file at {p}") from None
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError(f"cannot read the MCP config {p}: {e}") from None
    try:
        return parse_config(text)
    except ConfigError as e:
        raise ConfigError(f"{p}: {e}") from None


def save_config_file(path: str | os.PathLike[str], servers: Mapping[str, ServerConfig]) -> None:
    """Write `servers` to `path` atomically; other top-level keys already in the file stay."""
    p = Path(path)
    data: dict[str, Any] = {}
    try:
        old = json.loads(p.read_text(encoding="utf-8"))
        if isinstance(old, dict):
            data = {k: v for k, v in old.items() if k != "servers"}
    except (OSError, ValueError):
        pass
    data.update(dump_config(servers))
    p.parent.mkdir(parents=True, exist_ok=True)
    tmp = p.with_name(p.name + ".tmp")
    tmp.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
    tmp.replace(p)
