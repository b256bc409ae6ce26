"""Calls to Hearth's own service from hearth.documents, through hearth.client (the app calls
them from its worker threads, the CLI from its main thread): a JSON POST whose failure is one
exception with a sentence, and the installed model with a capability ("embedding", "vision"),
as /api/show lists it, picked by one rule (`pick_model`) that the app applies to its own list
of models."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from ..client import HearthClient, ServiceError

__all__ = ["ServiceCallError", "find_model", "pick_model", "post_json"]


class ServiceCallError(RuntimeError):
    """The service could not answer (its message says why: the path and the service's own
    sentence, or the connection's error)."""


def post_json(
    base_url: str,
    path: str,
    body: dict[str, Any],
    token: str,
    timeout: float,
    error: type[ServiceCallError] = ServiceCallError,
) -> Any:
    """POST `body` to `path`; the JSON answer. Any failure raises `error`."""
    try:
        return HearthClient(base_url, token, timeout).request("POST", path, body)
    except ServiceError as e:
        status = f"HTTP {e.status} " if e.status else ""
        raise error(f"{path}: {status}{e.message}") from e


def pick_model(
    models: Iterable[tuple[str, Sequence[str] | None]], capability: str, prefer: str = ""
) -> str:
    """The model to use for `capability` among `models` ((name, capabilities) in the service's
    /api/tags order; capabilities None where unknown): `prefer` when it has it, else the first
    that has it; '' if none. The one rule of the app and the CLI (embedding, vision)."""
    first = ""
    for name, caps in models:  # lazily: without `prefer`, the first match ends the search
        if not name or capability not in (caps or ()):
            continue
        if not prefer or name == prefer:
            return name
        first = first or name
    return first


def _capabilities(client: HearthClient, name: str) -> list[str]:
    try:
        show = client.request("POST", "/api/show", {"model": name})
    except ServiceError:
        return []
    return [str(c) for c in show.get("capabilities") or []] if isinstance(show, dict) else []


def find_model(
    base_url: str, capability: str, token: str = "", prefer: str = "", timeout: float = 30.0
) -> str:
    """`pick_model` over the service's installed models (/api/tags, each model's capabilities
    from /api/show where the list lacks them); '' if none (or no service)."""
    client = HearthClient(base_url, token, timeout)
    if prefer and capability in _capabilities(client, prefer):
        return prefer
    try:
        models = client.models()
    except ServiceError:
        return ""

    def listed() -> Iterable[tuple[str, Sequence[str] | None]]:
        for m in models:
            name = str(m.get("name") or m.get("model") or "")
            caps = m.get("capabilities")
            yield name, (_capabilities(client, name) if caps is None and name else caps)

    return pick_model(listed(), capability)
