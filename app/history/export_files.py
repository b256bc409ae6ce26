"""Writing an export to a file (the CLI's `-o` and the app's Export… dialogs): the format
from the name or the choice, the text, and a write that is whole or nothing."""

from __future__ import annotations

import json
import os
import re
from collections.abc import Sequence
from pathlib import Path

from .chat_store import ChatStore
from .export import chats_to_json
from .export_markdown import chats_to_markdown

__all__ = ["FORMATS", "export_text", "format_for", "suggested_name", "write_export"]

FORMATS = ("json", "markdown")
_SUFFIX = {"json": ".json", "markdown": ".md"}


def format_for(path: Path | None, chosen: str | None = None) -> str:
    """The export format: the one chosen, else markdown for a .md/.markdown file, else json."""
    if chosen:
        return chosen
    if path is not None and path.suffix.lower() in (".md", ".markdown"):
        return "markdown"
    return "json"


def suggested_name(title: str | None, fmt: str = "json") -> str:
    """A file name for an export: the chat's title made safe for file systems, or (all chats)
    hearth-chats, with the format's suffix."""
    stem = re.sub(r"[^\w\- ]+", "", title or "").strip()[:60] if title is not None else ""
    return (stem or ("hearth-chats" if title is None else "chat")) + _SUFFIX[fmt]


def export_text(store: ChatStore, chat_ids: Sequence[int] | None, fmt: str) -> str:
    """The export of the given chats (default: all) in `fmt` ("json" or "markdown")."""
    if fmt == "markdown":
        return chats_to_markdown(store, chat_ids)
    return json.dumps(chats_to_json(store, chat_ids), ensure_ascii=False, indent=1) + "\n"


def write_export(
    store: ChatStore, chat_ids: Sequence[int] | None, path: Path, fmt: str | None = None
) -> int:
    """Write the export to `path` whole or not at all (a temporary file renamed over it);
    return how many chats it holds. Raises ExportError (no such chat) or OSError."""
    fmt = format_for(path, fmt)
    text = export_text(store, chat_ids, fmt)
    partial = path.with_name(path.name + ".partial")
    try:
        partial.write_text(text, encoding="utf-8")
        os.replace(partial, path)
    finally:
        partial.unlink(missing_ok=True)
    return len(chat_ids) if chat_ids is not None else len(store.chats())
