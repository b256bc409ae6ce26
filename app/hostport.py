"""HEARTH_HOST's forms (`host`, `host:port`, `:port`, `[v6]:port`, `http://host:port`) and the
URL a client uses to reach an address. A leaf: the service reads its address with it, the
launcher finds the shared service with it.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Mapping

from . import env as hearth_env

__all__ = [
    "DEFAULT_HOST",
    "DEFAULT_PORT",
    "HostError",
    "parse_host",
    "env_host",
    "is_loopback",
    "client_url",
]

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 11434


class HostError(ValueError):
    """An address is malformed; the message names it."""


def parse_host(value: str, default_port: int = DEFAULT_PORT) -> tuple[str, int]:
    """`host`, `host:port`, `:port`, `[v6]:port` or `http://host:port` -> (host, port)."""
    text = value.strip()
    text = re.sub(r"^[a-zA-Z][a-zA-Z0-9+.-]*://", "", text).rstrip("/")
    host, port_text = text, ""
    if text.startswith("["):
        end = text.find("]")
        if end < 0:
            raise HostError(f"HEARTH_HOST {value!r} has an unclosed '['")
        host, rest = text[1:end], text[end + 1 :]
        port_text = rest[1:] if rest.startswith(":") else ""
    elif text.count(":") == 1:
        host, port_text = text.split(":")
    host = host or DEFAULT_HOST
    if not port_text:
        return host, default_port
    try:
        port = int(port_text)
    except ValueError:
        raise HostError(f"HEARTH_HOST {value!r} has a port that is not a number") from None
    if not 0 <= port <= 65535:
        raise HostError(f"HEARTH_HOST {value!r}: the port must be between 0 and 65535")
    return host, port


def env_host(env: Mapping[str, str]) -> tuple[str, int]:
    """The address HEARTH_HOST names (default 127.0.0.1:11434)."""
    return parse_host(hearth_env.text("HEARTH_HOST", env) or DEFAULT_HOST)


def is_loopback(host: str) -> bool:
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def client_url(host: str, port: int) -> str:
    """The URL that reaches a service bound to (host, port): a wildcard bind means this machine."""
    if host in ("0.0.0.0", "::", ""):
        host = "127.0.0.1"
    host = f"[{host}]" if ":" in host else host
    return f"http://{host}:{port}"
