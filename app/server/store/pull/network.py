"""The one door to the network for pulls: the offline switch, timeouts, the HTTP client.

`HEARTH_OFFLINE=1` (also `true`/`yes`/`on`) forbids every network access: a pull then stops
with a sentence before any connection is made. The desktop app's "work offline" setting
starts its private service with the same variable.
"""

from __future__ import annotations

import httpx

from .... import env
from .errors import Offline

__all__ = ["offline", "check_online", "http_client", "TIMEOUT"]

# Connecting may take a while on a bad network; a read that stalls this long is retried.
TIMEOUT = httpx.Timeout(connect=15.0, read=60.0, write=30.0, pool=60.0)
_USER_AGENT = "hearth-pull"


def offline() -> bool:
    return env.flag("HEARTH_OFFLINE")


def check_online(what: str) -> None:
    """Offline (a sentence naming `what`) when HEARTH_OFFLINE is set."""
    if offline():
        raise Offline(
            f"Hearth is offline (HEARTH_OFFLINE is set), so {what} cannot be downloaded; "
            "unset HEARTH_OFFLINE (or turn off 'Work offline' in the app's settings) to pull "
            "models, or import a local GGUF file with `hearth create NAME -f FILE.gguf`"
        )


def http_client(timeout: httpx.Timeout | None = None) -> httpx.Client:
    """A client that follows redirects (blobs and files are served from a CDN) and keeps
    connections open across the parts of a download."""
    check_online("models")
    return httpx.Client(
        follow_redirects=True,
        timeout=timeout or TIMEOUT,
        headers={"User-Agent": _USER_AGENT},
        limits=httpx.Limits(max_connections=16, max_keepalive_connections=16),
    )
