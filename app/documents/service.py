"""Calls to Hearth's own service from hearth.documents (plain urllib: the app calls them from
its worker threads, the CLI from its main thread): a JSON POST whose failure is one exception
with a sentence, and the installed model with a capability ("embedding", "vision"), as
/api/show lists it."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from typing import Any

__all__ = ["ServiceCallError", "auth_headers", "find_model", "post_json"]


class ServiceCallError(RuntimeError):
    """The service could not answer (its message says why: HTTP status and detail, or the
    connection's error)."""


def auth_headers(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"} if token else {}


def post_json(
    base_url: str,
    path: str,
    body: dict[str, Any],
    token: str,
    timeout: float,
    error: type[ServiceCallError] = ServiceCallError,
) -> Any:
    """POST `body` to `path`; the JSON answer. Any failure raises `error`."""
    req = urllib.request.Request(
        base_url.rstrip("/") + path,
        data=json.dumps(body).encode(),
        method="POST",
        headers={"Content-Type": "application/json", **auth_headers(token)},
    )
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return json.loads(resp.read() or b"{}")
    except urllib.error.HTTPError as e:
        detail = e.read().decode(errors="replace")[:300]
        raise error(f"{path}: HTTP {e.code} {detail}") from e
    except (OSError, ValueError) as e:
        raise error(f"{path}: {e}") from e


def _capabilities(base_url: str, token: str, name: str, timeout: float) -> list[str]:
    try:
        show = post_json(base_url, "/api/show", {"model": name}, token, timeout)
    except ServiceCallError:
        return []
    return [str(c) for c in show.get("capabilities") or []]


def find_model(
    base_url: str, capability: str, token: str = "", prefer: str = "", timeout: float = 30.0
) -> str:
    """`prefer` (the chat's model) when /api/show says it has `capability`, else the first
    installed model (in /api/tags order) that has it; '' if none (or no service)."""
    if prefer and capability in _capabilities(base_url, token, prefer, timeout):
        return prefer
    req = urllib.request.Request(base_url.rstrip("/") + "/api/tags", headers=auth_headers(token))
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            models = json.loads(resp.read()).get("models") or []
    except (OSError, ValueError):
        return ""
    for m in models:
        name = str(m.get("name") or m.get("model") or "")
        caps = m.get("capabilities")
        if caps is None:
            caps = _capabilities(base_url, token, name, timeout) if name else []
        if name and capability in caps:
            return name
    return ""
