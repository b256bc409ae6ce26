"""Chats to and from a JSON file that keeps everything: the export and import format.

The file (UTF-8 JSON, written by `hearth chats export` and the app's Export chat…):

    {"format": "hearth-chats", "version": 3, "hearth": "<app version>", "exported_at": <time>,
     "chats": [{"title", "title_auto", "model", "system_prompt", "options", "tools",
                "created_at", "updated_at", "current_leaf",
                "messages": [{"id", "parent_id", "role", "content", "thinking", "model", "state",
                              "error", "stats", "tool_calls", "tool", "covers", "compare",
                              "created_at",
                              "images": [<base64>...],
                              "documents": [<document>...], "sources": [<source>...]},
                             ...]}, ...]}

    <document>: {"name", "kind", "pages", "sections", "chars", "notes", "mode", "sha256",
                 "created_at", "chunks": [{"section", "text", "vectors": {<model>: <base64>},
                                           "origin"}]}
    <source>:   {"message", "document", "chunk", "number"}

Version 2 added `documents` (a user message's attached documents as stored: what the chip shows,
"whole" or "searched", and the text in its passages, each with its page or section and its
embeddings, float32 little-endian in base64, by embedding model) and `sources` (the passages that
message's prompt drew on, which the reply under it cites: `message` is the number of the message the
document is attached to, `document` and `chunk` are 0-based places in its lists, `number` the
passage's [n] in the prompt, 0 for a document sent whole). Both are left out where empty. A
passage's `origin` ("image": a vision model transcribed it from an image of its page, a scanned
page) is written only where it is not empty; an older Hearth ignores it, and a file without it
imports with the file's own text as every passage's origin. An imported chat is used as a reopened
one is: no file is read again and nothing is re-embedded. A version-1 file (no documents) imports as
before.

Version 3 added summaries (history.compaction): a message with role "summary" whose `covers`
says how many messages of its branch, root first, it stands for in the prompt (left out where
0), and the state "undone" for a summary the user took back. The messages it covers are in the
file as every other message. Files of versions 1 and 2 (which have no summaries) import as
before; an older Hearth refuses a version-3 file rather than send a summary as a message.

A reply written side by side with another model's (the app's Compare) has `compare`, its
column (1 or 2), written only where it is not 0; the replies of one comparison are siblings
(versions of the reply to the same message), every one of them in the file, and
`current_leaf` names the branch the conversation continued on. An older Hearth ignores
`compare` and imports them as versions of the reply, so it needed no new version.

Every message of every branch is there (parents before their replies); `id` and `parent_id`
number the messages within their chat (1, 2, ...) and `current_leaf` names the one whose
branch was on screen. Times are seconds since 1970 (UTC). `tool_calls`, `tool` and `tools`
are as records.Chat/Message describe them; options and stats are the stored objects.

Import never overwrites: the chats are added under new ids, all of a file or none of it; a
reply exported while it was being written ("streaming") comes in as "interrupted". A
file that is not an export, or is broken, or comes from a newer format, is refused with a
sentence naming the file and, for a broken one, the chat and field.
"""

from __future__ import annotations

import base64
import binascii
import json
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TypeVar

from .. import __version__
from .chat_store import ChatStore
from .document_tables import read_documents, read_sources
from .records import (
    DONE,
    ERROR,
    INTERRUPTED,
    STOPPED,
    STREAMING,
    UNDONE,
    Chat,
    ChatRecord,
    DocumentChunk,
    DocumentRecord,
    Message,
    SourceRef,
)

__all__ = [
    "EXPORT_FORMAT",
    "EXPORT_VERSION",
    "ExportError",
    "chats_to_json",
    "chats_from_json",
    "import_file",
    "selected_chats",
]

EXPORT_FORMAT = "hearth-chats"
EXPORT_VERSION = 3  # 2: documents and sources; 3: summaries (role "summary", covers, undone)

T = TypeVar("T")


class ExportError(ValueError):
    """A file cannot be imported, or a chat cannot be exported; the message is a sentence."""


def selected_chats(store: ChatStore, chat_ids: Sequence[int] | None) -> list[Chat]:
    """The chats to export: those named (in that order), or all, the most recent first."""
    if chat_ids is None:
        return store.chats()
    chats = []
    for chat_id in chat_ids:
        chat = store.chat(chat_id)
        if chat is None:
            raise ExportError(f"there is no chat {chat_id} (`hearth chats list` shows them)")
        chats.append(chat)
    return chats


def chats_to_json(store: ChatStore, chat_ids: Sequence[int] | None = None) -> dict[str, Any]:
    """The export of the given chats (default: all) as a JSON-ready dict."""
    return {
        "format": EXPORT_FORMAT,
        "version": EXPORT_VERSION,
        "hearth": __version__,
        "exported_at": time.time(),
        "chats": [_chat_to_json(store, chat) for chat in selected_chats(store, chat_ids)],
    }


def _chat_to_json(store: ChatStore, chat: Chat) -> dict[str, Any]:
    tree = store.tree(chat.id)
    number = {m.id: i for i, m in enumerate(tree, start=1)}
    ids = [m.id for m in tree]
    documents = read_documents(store.connection, ids)
    sources = read_sources(store.connection, ids)
    for refs in sources.values():
        for ref in refs:
            if ref.message not in number:  # never so: a prompt draws on its own chat's documents
                raise ExportError(f"chat {chat.title!r} cites a document of another chat")
    return {
        "title": chat.title,
        "title_auto": chat.title_auto,
        "model": chat.model,
        "system_prompt": chat.system_prompt,
        "options": chat.options,
        "tools": chat.tools,
        "created_at": chat.created_at,
        "updated_at": chat.updated_at,
        "current_leaf": number.get(chat.current_leaf) if chat.current_leaf else None,
        "messages": [
            {
                "id": number[m.id],
                "parent_id": None if m.parent_id is None else number[m.parent_id],
                "role": m.role,
                "content": m.content,
                "thinking": m.thinking,
                "model": m.model,
                "state": m.state,
                "error": m.error,
                "stats": m.stats,
                "tool_calls": m.tool_calls,
                "tool": m.tool,
                **({"covers": m.covers} if m.covers else {}),
                **({"compare": m.compare} if m.compare else {}),
                "created_at": m.created_at,
                "images": [base64.b64encode(b).decode("ascii") for b in m.images],
                **_documents_to_json(documents.get(m.id, []), sources.get(m.id, []), number),
            }
            for m in tree
        ],
    }


def _documents_to_json(
    documents: list[DocumentRecord], sources: list[SourceRef], number: dict[int, int]
) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if documents:
        out["documents"] = [
            {
                "name": d.name,
                "kind": d.kind,
                "pages": d.pages,
                "sections": d.sections,
                "chars": d.chars,
                "notes": d.notes,
                "mode": d.mode,
                "sha256": d.sha256,
                "created_at": d.created_at,
                "chunks": [
                    {
                        "section": c.section,
                        "text": c.text,
                        "vectors": {
                            model: base64.b64encode(v).decode("ascii")
                            for model, v in c.vectors.items()
                        },
                        **({"origin": c.origin} if c.origin else {}),
                    }
                    for c in d.chunks
                ],
            }
            for d in documents
        ]
    if sources:
        out["sources"] = [
            {
                "message": number[s.message],
                "document": s.document,
                "chunk": s.chunk,
                "number": s.number,
            }
            for s in sources
        ]
    return out


def chats_from_json(data: Any, source: str) -> list[ChatRecord]:
    """The chats of an export (checked field by field), ready for ChatStore.add_chats.

    `source` names the file in the sentences of the ExportError raised for anything else.
    """
    if not isinstance(data, dict) or data.get("format") != EXPORT_FORMAT:
        raise ExportError(
            f"{source} is not a Hearth chat export (one is a JSON file written by"
            " `hearth chats export` or the app's Export chat…)"
        )
    version = data.get("version")
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise ExportError(f"{source} has no valid format version (a whole number from 1)")
    if version > EXPORT_VERSION:
        raise ExportError(
            f"{source} was written by a newer Hearth (export format {version}; this one reads"
            f" up to {EXPORT_VERSION}); update Hearth to import it"
        )
    chats = data.get("chats")
    if not isinstance(chats, list):
        raise ExportError(f"{source} has no list of chats")
    return [_chat_from_json(c, f"{source}: chat {i}") for i, c in enumerate(chats, start=1)]


_REQUIRED = object()


class _Fields:
    """Typed reads of one JSON object of an export, each failure a sentence naming `where`."""

    def __init__(self, obj: Any, where: str) -> None:
        if not isinstance(obj, dict):
            raise ExportError(f"{where} is not an object")
        self.obj, self.where = obj, where

    def get(self, key: str, kind: type | tuple[type, ...], default: Any = _REQUIRED) -> Any:
        """obj[key] if it has the expected JSON type, `default` if absent (unless required)."""
        if key not in self.obj:
            if default is _REQUIRED:
                raise ExportError(f"{self.where} has no {key!r}")
            return default
        value = self.obj[key]
        if kind is float:
            kind = (int, float)
        if not isinstance(value, kind) or (isinstance(value, bool) and kind is not bool):
            raise ExportError(
                f"{self.where}: {key!r} is a {type(value).__name__}, not the expected kind"
            )
        return value

    def list_of(self, key: str, kind: type[T]) -> list[T]:
        values = self.get(key, list, [])
        if not all(isinstance(v, kind) for v in values):
            raise ExportError(f"{self.where}: {key!r} must hold only {kind.__name__} items")
        return list(values)


def _chat_from_json(obj: Any, where: str) -> ChatRecord:
    fields = _Fields(obj, where)
    get = fields.get
    title = get("title", str, "")
    if title:
        where = fields.where = f"{where} ({title!r})"
    raw_messages = get("messages", list, [])
    messages: list[Message] = []
    documents: dict[int, list[DocumentRecord]] = {}
    sources: dict[int, list[SourceRef]] = {}
    for i, raw in enumerate(raw_messages, start=1):
        message, docs, refs = _message_from_json(raw, f"{where}, message {i}")
        messages.append(message)
        if docs:
            documents[message.id] = docs
        if refs:
            sources[message.id] = refs
    leaf = get("current_leaf", (int, type(None)), None)
    known = {m.id for m in messages}
    for m in messages:
        if m.parent_id is not None and m.parent_id not in known:
            raise ExportError(f"{where}: message {m.id} answers message {m.parent_id}, missing")
    if leaf is not None and leaf not in known:
        raise ExportError(f"{where}: current_leaf {leaf} is not one of its messages")
    if len(known) != len(messages):
        raise ExportError(f"{where}: two messages have the same id")
    order = {m.id: i for i, m in enumerate(messages)}
    for m in messages:
        if m.parent_id is not None and order[m.parent_id] > order[m.id]:
            raise ExportError(f"{where}: message {m.id} comes before the one it answers")
    for number, refs in sources.items():
        for ref in refs:
            docs = documents.get(ref.message, [])
            if not (
                0 <= ref.document < len(docs) and 0 <= ref.chunk < len(docs[ref.document].chunks)
            ):
                raise ExportError(
                    f"{where}: message {number} cites passage {ref.chunk} of document"
                    f" {ref.document} of message {ref.message}, which is not there"
                )
    chat = Chat(
        id=0,
        title=title,
        title_auto=get("title_auto", bool, True),
        model=get("model", str),
        system_prompt=get("system_prompt", str, ""),
        options=get("options", dict, {}),
        tools=fields.list_of("tools", str),
        current_leaf=leaf,
        created_at=float(get("created_at", float, 0.0)),
        updated_at=float(get("updated_at", float, 0.0)),
    )
    return ChatRecord(chat, messages, documents, sources)


def _message_from_json(
    obj: Any, where: str
) -> tuple[Message, list[DocumentRecord], list[SourceRef]]:
    fields = _Fields(obj, where)
    get = fields.get
    images = []
    for i, text in enumerate(fields.list_of("images", str), start=1):
        try:
            images.append(base64.b64decode(text, validate=True))
        except (binascii.Error, ValueError):
            raise ExportError(f"{where}: image {i} is not base64") from None
    state = get("state", str, DONE)
    if state == STREAMING:  # exported while the reply was being written: it ends there
        state = INTERRUPTED
    if state not in (DONE, INTERRUPTED, STOPPED, ERROR, UNDONE):
        raise ExportError(f"{where}: 'state' {state!r} is not one Hearth knows")
    message = Message(
        id=get("id", int),
        chat_id=0,
        parent_id=get("parent_id", (int, type(None)), None),
        role=get("role", str),
        content=get("content", str, ""),
        thinking=get("thinking", str, ""),
        model=get("model", str, ""),
        state=state,
        error=get("error", str, ""),
        stats=get("stats", dict, {}),
        tool_calls=fields.list_of("tool_calls", dict),
        tool=get("tool", dict, {}),
        covers=get("covers", int, 0),
        compare=get("compare", int, 0),
        created_at=float(get("created_at", float, 0.0)),
        images=images,
    )
    documents = [
        _document_from_json(d, f"{where}, document {i}")
        for i, d in enumerate(get("documents", list, []), start=1)
    ]
    sources = [
        _source_from_json(r, f"{where}, source {i}")
        for i, r in enumerate(get("sources", list, []), start=1)
    ]
    return message, documents, sources


def _document_from_json(obj: Any, where: str) -> DocumentRecord:
    fields = _Fields(obj, where)
    get = fields.get
    mode = get("mode", str, "whole")
    if mode not in ("whole", "searched"):
        raise ExportError(f"{where}: 'mode' {mode!r} is neither 'whole' nor 'searched'")
    chunks = []
    for i, raw in enumerate(get("chunks", list, []), start=1):
        chunk = _Fields(raw, f"{where}, passage {i}")
        vectors = {}
        for model, text in chunk.get("vectors", dict, {}).items():
            try:
                vector = base64.b64decode(text, validate=True) if isinstance(text, str) else b"?"
            except (binascii.Error, ValueError):
                vector = b"?"
            if len(vector) % 4:
                raise ExportError(
                    f"{chunk.where}: the vector of {model!r} is not float32 numbers in base64"
                )
            vectors[model] = vector
        chunks.append(
            DocumentChunk(
                chunk.get("section", str),
                chunk.get("text", str),
                vectors,
                chunk.get("origin", str, ""),
            )
        )
    return DocumentRecord(
        name=get("name", str),
        kind=get("kind", str),
        pages=get("pages", int, 0),
        sections=get("sections", int, 0),
        chars=get("chars", int, 0),
        notes=fields.list_of("notes", str),
        mode=mode,
        sha256=get("sha256", str, ""),
        created_at=float(get("created_at", float, 0.0)),
        chunks=chunks,
    )


def _source_from_json(obj: Any, where: str) -> SourceRef:
    get = _Fields(obj, where).get
    return SourceRef(
        get("message", int), get("document", int), get("chunk", int), get("number", int, 0)
    )


def import_file(store: ChatStore, path: Path) -> list[int]:
    """Add the chats of the export at `path` to `store` (new ids); return their ids.

    Raises ExportError (a sentence) for a file that is not a readable export; nothing is added
    then. OSError (missing file, no permission) is left to the caller.
    """
    raw = path.read_bytes()
    try:
        data = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        what = f"not JSON ({e})" if isinstance(e, json.JSONDecodeError) else "not UTF-8 text"
        raise ExportError(
            f"{path} is not a Hearth chat export: it is {what}; one is a JSON file written by"
            " `hearth chats export` or the app's Export chat…"
        ) from None
    chats = chats_from_json(data, str(path))
    try:
        return store.add_chats(chats)
    except ValueError as e:
        raise ExportError(f"{path}: {e}") from None
