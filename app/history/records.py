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
    # Names of the MCP servers enabled for this chat (schema 2).
    tools: list[str] = field(default_factory=list)


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
    # Schema 2. An assistant message's tool calls as the model emitted them:
    # [{"id", "name", "arguments"}]. A role "tool" message (its parent is the assistant message
    # that called it; the result text is `content`, its images `images`) keeps the call here:
    # {"call_id", "name", "server", "arguments", "decision", "is_error", "truncated", "structured"}.
    tool_calls: list[dict[str, Any]] = field(default_factory=list)
    tool: dict[str, Any] = field(default_factory=dict)
    # Filled by ChatStore.path(): where this message sits among its siblings (versions).
    version: int = 1
    versions: int = 1


@dataclass
class SearchHit:
    chat_id: int
    title: str
    snippet: str
    updated_at: float
