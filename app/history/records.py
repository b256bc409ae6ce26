"""Plain records the store hands out (copies: changing them changes nothing in the database)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

__all__ = ["Chat", "Message", "SearchHit", "STREAMING", "DONE", "INTERRUPTED", "STOPPED", "ERROR"]

# Message states. A reply is written while it streams; one still "streaming" when the app
# starts was cut off by a crash or a kill and becomes "interrupted".
STREAMING = "streaming"
DONE = "done"
INTERRUPTED = "interrupted"
STOPPED = "stopped"
ERROR = "error"


@dataclass
class Chat:
    id: int
    title: str
    model: str
    system_prompt: str = ""
    options: dict[str, Any] = field(default_factory=dict)
    current_leaf: int | None = None
    title_auto: bool = True
    created_at: float = 0.0
    updated_at: float = 0.0


@dataclass
class Message:
    id: int
    chat_id: int
    parent_id: int | None
    role: str
    content: str = ""
    thinking: str = ""
    model: str = ""
    state: str = DONE
    error: str = ""
    stats: dict[str, Any] = field(default_factory=dict)
    created_at: float = 0.0
    images: list[bytes] = field(default_factory=list)
    # Filled by ChatStore.path(): where this message sits among its siblings (versions).
    version: int = 1
    versions: int = 1


@dataclass
class SearchHit:
    chat_id: int
    title: str
    snippet: str
    updated_at: float
