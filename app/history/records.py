"""Plain records the store hands out (copies: changing them changes nothing in the database)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "Chat",
    "ChatRecord",
    "DocumentChunk",
    "DocumentRecord",
    "Message",
    "SearchHit",
    "SourceRef",
    "FROM_IMAGE",
    "cited_section",
    "STREAMING",
    "DONE",
    "INTERRUPTED",
    "STOPPED",
    "ERROR",
    "UNDONE",
]

# Message states. A reply is written while it streams; one still "streaming" when the app
# starts was cut off by a crash or a kill and becomes "interrupted".
STREAMING = "streaming"
DONE = "done"
INTERRUPTED = "interrupted"
STOPPED = "stopped"
ERROR = "error"
UNDONE = "undone"  # a summary (role "summary", schema 5) the user took back


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
    # Schema 4. A role "summary" message (history.compaction) stands in the prompt for the
    # first `covers` messages of its branch; 0 for every other message.
    covers: int = 0
    # Schema 6. An assistant reply written side by side with another model's (Compare): its
    # column, 1 (left) or 2 (right); its comparison is its siblings with `compare` > 0.
    compare: int = 0
    # Filled by ChatStore.path(): where this message sits among its siblings (versions).
    version: int = 1
    versions: int = 1


@dataclass
class SearchHit:
    chat_id: int
    title: str
    snippet: str
    updated_at: float


# Schema 3's documents as plain rows, for export and import (document_tables.py reads and
# writes them; hearth.documents owns what they mean: reading, indexing, retrieving).

# A passage's origin (schema 4's document_chunks.origin): "" for a file's own text, FROM_IMAGE
# for text a vision model transcribed from the page's image (a scanned page).
FROM_IMAGE = "image"


def cited_section(section: str, origin: str) -> str:
    """The page or section a citation names: "page 2", or "read from an image of page 2" for
    a passage transcribed from the page's image (every place that cites says it the same way)."""
    return f"read from an image of {section}" if origin == FROM_IMAGE else section


@dataclass
class DocumentChunk:
    """A passage of a stored document: the page or section it comes from, its text, its
    embeddings by model name (float32, little-endian bytes, as chunk_vectors holds them) and
    its origin ("" or FROM_IMAGE)."""

    section: str
    text: str
    vectors: dict[str, bytes] = field(default_factory=dict)
    origin: str = ""


@dataclass
class DocumentRecord:
    """A document attached to a user message, as stored: what its chip shows (name, kind,
    pages, sections, chars, notes), how it was sent ("whole" or "searched"), the file's
    sha256, when it was attached and its chunks in order (joined, its whole text)."""

    name: str
    kind: str
    pages: int = 0
    sections: int = 0
    chars: int = 0
    notes: list[str] = field(default_factory=list)
    mode: str = "whole"
    sha256: str = ""
    created_at: float = 0.0
    chunks: list[DocumentChunk] = field(default_factory=list)


@dataclass
class SourceRef:
    """A passage a user message's prompt drew on (the reply under it cites it): chunk `chunk`
    of document `document` (list positions) attached to message `message` (an id, or in an
    export or import the message's number in its chat); `number` is its [n] in the prompt,
    0 for a passage of a document sent whole."""

    message: int
    document: int
    chunk: int
    number: int = 0


@dataclass
class ChatRecord:
    """A whole chat to add (an import): its messages, parents first, numbered by `id`
    within the list, and the documents and sources of its messages keyed by those numbers."""

    chat: Chat
    messages: list[Message]
    documents: dict[int, list[DocumentRecord]] = field(default_factory=dict)
    sources: dict[int, list[SourceRef]] = field(default_factory=dict)
