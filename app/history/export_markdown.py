"""Chats as Markdown, for reading: each chat's branch on screen (root to current leaf).

Not a format to import (the JSON export is): other branches are not written, images are
named, not embedded. Thinking is a collapsed <details> block; tool calls and results are
shown with their arguments and text; an interrupted, stopped or failed reply says so. A
question names the documents attached to it (extent, and whether it was sent whole or
searched); a reply lists the sources its question's prompt drew on (document and page or
section, [n] as numbered in the prompt; "read from an image of page N" for a scanned page a vision
model transcribed). A reply written side by side with another model's (Compare) is followed by
the other reply, quoted in a collapsed block, "Compared with <model>".
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence

from .chat_store import ChatStore
from .document_tables import read_documents, read_sources
from .export import selected_chats
from .records import (
    DONE,
    ERROR,
    INTERRUPTED,
    STOPPED,
    Chat,
    DocumentRecord,
    Message,
    SourceRef,
    cited_section,
)

__all__ = ["chats_to_markdown"]

_STATE_NOTES = {
    INTERRUPTED: "*(cut off: Hearth was closed while this reply was written)*",
    STOPPED: "*(stopped)*",
    ERROR: "*(failed{error})*",
}


def chats_to_markdown(store: ChatStore, chat_ids: Sequence[int] | None = None) -> str:
    """The given chats (default: all, most recent first) as one Markdown document."""
    parts = [_chat(store, chat) for chat in selected_chats(store, chat_ids)]
    return "\n---\n\n".join(parts)


def _when(seconds: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(seconds))


def _fence(text: str, lang: str = "") -> str:
    """`text` in a code fence longer than any backtick run inside it."""
    longest, run = 0, 0
    for ch in text:
        run = run + 1 if ch == "`" else 0
        longest = max(longest, run)
    ticks = "`" * max(3, longest + 1)
    return f"{ticks}{lang}\n{text}\n{ticks}\n"


def _open_fence(text: str) -> str:
    """The fence (3 or more ` or ~) of a code block `text` leaves open, else ''."""
    fence = ""
    for line in text.splitlines():
        stripped = line.strip()
        char = stripped[:1]
        if char not in ("`", "~"):
            continue
        run = stripped[: len(stripped) - len(stripped.lstrip(char))]
        if len(run) < 3:
            continue
        if not fence:
            fence = run  # opens a block (an info string may follow)
        elif stripped == run and char == fence[0] and len(run) >= len(fence):
            fence = ""  # closes it
    return fence


def _closed(text: str) -> str:
    """Model text with a code block left open (a cut-off reply) closed, so the rest of the
    document is not swallowed by it."""
    fence = _open_fence(text)
    return f"{text}\n{fence}" if fence else text


def _chat(store: ChatStore, chat: Chat) -> str:
    out = [f"# {chat.title or 'New chat'}\n"]
    meta = [f"Model: {chat.model}", f"started {_when(chat.created_at)}"]
    if chat.tools:
        meta.append("tools: " + ", ".join(chat.tools))
    out.append("*" + " · ".join(meta) + "*\n")
    if chat.system_prompt:
        out.append("**System prompt:**\n\n" + _quote(chat.system_prompt))
    if chat.options:
        out.append("**Options:** `" + json.dumps(chat.options, sort_keys=True) + "`\n")
    path = store.path(chat.id)
    sources = read_sources(store.connection, [m.id for m in path])
    owners = {ref.message for refs in sources.values() for ref in refs}
    documents = read_documents(store.connection, sorted(owners | {m.id for m in path}))
    for msg in path:
        out.append(_message(msg))
        if msg.role == "user" and msg.id in documents:
            out.append(_attached(documents[msg.id]))
        if msg.role == "assistant" and msg.parent_id in sources:
            out.append(_sources(sources[msg.parent_id], documents))
        if msg.compare:
            out.extend(_compared(m) for m in store.comparison(msg.id) if m.id != msg.id)
    return "\n".join(out)


def _compared(other: Message) -> str:
    """Another model's reply to the same question (Compare), which the chat did not go on with."""
    return (
        f"<details><summary>Compared with {other.model or 'another model'}</summary>\n\n"
        f"{_closed(other.content)}\n\n</details>\n"
    )


def _extent(doc: DocumentRecord) -> str:
    n, unit = (doc.pages, "page") if doc.kind == "pdf" else (doc.sections, "section")
    return f"{n} {unit}" + ("s" if n != 1 else "")


def _attached(documents: list[DocumentRecord]) -> str:
    lines = [
        f"- {d.name} ({_extent(d)}, sent {d.mode})" + "".join(f"; {n}" for n in d.notes)
        for d in documents
    ]
    return "**Attached:**\n\n" + "\n".join(lines) + "\n"


def _sources(refs: list[SourceRef], documents: dict[int, list[DocumentRecord]]) -> str:
    lines = []
    for ref in refs:
        doc = documents[ref.message][ref.document]
        mark = f"[{ref.number}] " if ref.number else ""
        chunk = doc.chunks[ref.chunk]
        lines.append(f"- {mark}{doc.name}, {cited_section(chunk.section, chunk.origin)}")
    return "**Sources:**\n\n" + "\n".join(lines) + "\n"


def _quote(text: str) -> str:
    return "\n".join("> " + line if line else ">" for line in text.splitlines()) + "\n"


def _message(msg: Message) -> str:
    heading = {"user": "You", "assistant": msg.model or "Assistant", "system": "System"}
    if msg.role == "summary":  # compaction: a notice with the summary behind it
        undone = " (undone: the messages were sent as they were)" if msg.state == "undone" else ""
        return (
            f"*Earlier messages were summarised to fit the context{undone}.*\n\n"
            f"<details><summary>Summary of {msg.covers} messages</summary>\n\n"
            f"{msg.content}\n\n</details>\n"
        )
    if msg.role == "tool":
        name = msg.tool.get("name", "tool")
        server = msg.tool.get("server")
        title = f"## Tool result: {name}" + (f" ({server})" if server else "")
    else:
        title = "## " + heading.get(msg.role, msg.role)
    if msg.versions > 1:
        title += f" (version {msg.version} of {msg.versions})"
    out = [title + "\n"]
    if msg.thinking:
        out.append(f"<details><summary>Thinking</summary>\n\n{msg.thinking}\n\n</details>\n")
    if msg.role == "tool":
        if msg.tool.get("is_error"):
            out.append("*(the tool reported an error)*\n")
        if msg.content:
            out.append(_fence(msg.content))
    elif msg.content:
        out.append(_closed(msg.content) + "\n")
    for call in msg.tool_calls:
        args = json.dumps(call.get("arguments", {}), indent=2, ensure_ascii=False)
        out.append(f"**Tool call:** `{call.get('name', '?')}`\n\n" + _fence(args, "json"))
    if msg.images:
        n = len(msg.images)
        out.append(f"*({n} image{'s' if n != 1 else ''} attached)*\n")
    if msg.state != DONE and msg.state in _STATE_NOTES:
        error = f": {msg.error}" if msg.error else ""
        out.append(_STATE_NOTES[msg.state].format(error=error) + "\n")
    return "\n".join(out)
