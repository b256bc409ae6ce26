"""The documents tables (schema 3: documents, document_chunks, chunk_vectors, message_sources;
schema 4: each chunk's origin) as plain rows: their one writer, and their reading for the export
and import of whole chats.

History owns the database and its schema (migrations.py), so every row these tables get is
written here: a document attached to a message (hearth.documents' index, and an imported chat),
a message's documents copied to another, a document's mode, the passages a prompt drew on. What
the rows mean (reading files, chunking, embedding, ranking, the prompt) is hearth.documents',
which history never imports. An imported chat's documents are the stored rows, chunks and
vectors included, so it is used as a reopened chat is: no file is read again and nothing is
re-embedded. The full-text index follows the chunks by its triggers. Every writer runs inside
the caller's transaction.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Mapping, Sequence

from .records import DocumentChunk, DocumentRecord, SourceRef

__all__ = [
    "copy_documents",
    "insert_document",
    "insert_documents",
    "insert_sources",
    "read_documents",
    "read_sources",
    "replace_sources",
    "set_document_mode",
]


def _marks(ids: Sequence[int]) -> str:
    return ",".join("?" * len(ids))


def read_documents(
    conn: sqlite3.Connection, message_ids: Sequence[int]
) -> dict[int, list[DocumentRecord]]:
    """The documents attached to these messages, by message id, each in attachment order with
    its chunks in order (messages without documents are absent)."""
    if not message_ids:
        return {}
    out: dict[int, list[DocumentRecord]] = {}
    rows = conn.execute(
        f"SELECT * FROM documents WHERE message_id IN ({_marks(message_ids)})"
        " ORDER BY message_id, position, id",
        tuple(message_ids),
    ).fetchall()
    for row in rows:
        chunks = conn.execute(
            "SELECT id, section, text, origin FROM document_chunks WHERE document_id=?"
            " ORDER BY position, id",
            (row["id"],),
        ).fetchall()
        vectors: dict[int, dict[str, bytes]] = {}
        for chunk_id, model, blob in conn.execute(
            "SELECT v.chunk_id, v.model, v.vector FROM chunk_vectors v"
            " JOIN document_chunks c ON c.id = v.chunk_id WHERE c.document_id=?"
            " ORDER BY v.chunk_id, v.model",
            (row["id"],),
        ):
            vectors.setdefault(chunk_id, {})[model] = bytes(blob)
        out.setdefault(row["message_id"], []).append(
            DocumentRecord(
                name=row["name"],
                kind=row["kind"],
                pages=row["pages"],
                sections=row["sections"],
                chars=row["chars"],
                notes=json.loads(row["notes"] or "[]"),
                mode=row["mode"],
                sha256=row["sha256"],
                created_at=row["created_at"],
                chunks=[DocumentChunk(c[1], c[2], vectors.get(c[0], {}), c[3]) for c in chunks],
            )
        )
    return out


def read_sources(
    conn: sqlite3.Connection, message_ids: Sequence[int]
) -> dict[int, list[SourceRef]]:
    """The passages each of these messages' prompts drew on, by message id, in order; each
    names its chunk by (message id, document position, chunk position) as read_documents
    lists them (messages without sources are absent)."""
    if not message_ids:
        return {}
    out: dict[int, list[SourceRef]] = {}
    rows = conn.execute(
        "SELECT s.message_id, s.number, d.message_id AS owner,"
        " (SELECT COUNT(*) FROM documents e WHERE e.message_id = d.message_id"
        "   AND (e.position < d.position OR (e.position = d.position AND e.id < d.id))) AS doc,"
        " (SELECT COUNT(*) FROM document_chunks k WHERE k.document_id = c.document_id"
        "   AND (k.position < c.position OR (k.position = c.position AND k.id < c.id))) AS chunk"
        " FROM message_sources s JOIN document_chunks c ON c.id = s.chunk_id"
        " JOIN documents d ON d.id = c.document_id"
        f" WHERE s.message_id IN ({_marks(message_ids)}) ORDER BY s.message_id, s.position",
        tuple(message_ids),
    )
    for r in rows:
        out.setdefault(r["message_id"], []).append(
            SourceRef(r["owner"], r["doc"], r["chunk"], r["number"])
        )
    return out


def insert_document(
    db: sqlite3.Connection, message_id: int, position: int, doc: DocumentRecord
) -> tuple[int, list[int]]:
    """Attach `doc` to the message `message_id` at `position`: (its id, its chunks' ids in
    order)."""
    cur = db.execute(
        "INSERT INTO documents(message_id, position, name, kind, pages, sections, chars,"
        " notes, mode, sha256, created_at) VALUES (?,?,?,?,?,?,?,?,?,?,?)",
        (
            message_id, position, doc.name, doc.kind, doc.pages, doc.sections, doc.chars,
            json.dumps(doc.notes), doc.mode, doc.sha256, doc.created_at,
        ),
    )  # fmt: skip
    doc_id = int(cur.lastrowid or 0)
    ids = []
    for i, chunk in enumerate(doc.chunks):
        cur = db.execute(
            "INSERT INTO document_chunks(document_id, position, section, text, origin)"
            " VALUES (?,?,?,?,?)",
            (doc_id, i, chunk.section, chunk.text, chunk.origin),
        )
        ids.append(int(cur.lastrowid or 0))
        db.executemany(
            "INSERT INTO chunk_vectors(chunk_id, model, vector) VALUES (?,?,?)",
            [(ids[-1], model, sqlite3.Binary(v)) for model, v in chunk.vectors.items()],
        )
    return doc_id, ids


def insert_documents(
    db: sqlite3.Connection, message_id: int, documents: Sequence[DocumentRecord]
) -> list[list[int]]:
    """Attach `documents` to the message `message_id`, in order; the new chunk ids, per
    document, in order (for insert_sources)."""
    return [
        insert_document(db, message_id, position, doc)[1] for position, doc in enumerate(documents)
    ]


def copy_documents(
    db: sqlite3.Connection, source_message: int, target_message: int, created_at: float
) -> None:
    """Attach `source_message`'s documents to `target_message` too, chunks and vectors
    included, at the same positions (rows copied inside the database)."""
    for row in db.execute(
        "SELECT * FROM documents WHERE message_id=? ORDER BY position", (source_message,)
    ).fetchall():
        cur = db.execute(
            "INSERT INTO documents(message_id, position, name, kind, pages, sections,"
            " chars, notes, mode, sha256, created_at)"
            " SELECT ?, position, name, kind, pages, sections, chars, notes, mode, sha256,"
            " ? FROM documents WHERE id=?",
            (target_message, created_at, row["id"]),
        )
        new_doc = int(cur.lastrowid or 0)
        for chunk in db.execute(
            "SELECT * FROM document_chunks WHERE document_id=? ORDER BY position",
            (row["id"],),
        ).fetchall():
            cur = db.execute(
                "INSERT INTO document_chunks(document_id, position, section, text, origin)"
                " VALUES (?,?,?,?,?)",
                (new_doc, chunk["position"], chunk["section"], chunk["text"], chunk["origin"]),
            )
            db.execute(
                "INSERT INTO chunk_vectors(chunk_id, model, vector)"
                " SELECT ?, model, vector FROM chunk_vectors WHERE chunk_id=?",
                (int(cur.lastrowid or 0), chunk["id"]),
            )


def set_document_mode(db: sqlite3.Connection, document_id: int, mode: str) -> None:
    """How the document was sent: "whole" or "searched"."""
    db.execute("UPDATE documents SET mode=? WHERE id=?", (mode, document_id))


def replace_sources(
    db: sqlite3.Connection, message_id: int, sources: Sequence[tuple[int, int]]
) -> None:
    """The passages (chunk id, number in the prompt) `message_id`'s prompt draws on, in place
    of those it had."""
    db.execute("DELETE FROM message_sources WHERE message_id=?", (message_id,))
    _write_sources(db, [(message_id, i, cid, n) for i, (cid, n) in enumerate(sources)])


def _write_sources(db: sqlite3.Connection, rows: Sequence[tuple[int, int, int, int]]) -> None:
    """Rows of message_sources: (message id, position, chunk id, number)."""
    db.executemany(
        "INSERT INTO message_sources(message_id, position, chunk_id, number) VALUES (?,?,?,?)",
        rows,
    )


def insert_sources(
    db: sqlite3.Connection,
    message_id: int,
    sources: Sequence[SourceRef],
    chunk_ids: Mapping[int, list[list[int]]],
) -> None:
    """Record the passages `message_id`'s prompt drew on.
    Each SourceRef names its message by the key of `chunk_ids` (what insert_documents returned
    for that message). Raises ValueError for a passage that is not there."""
    rows = []
    for position, ref in enumerate(sources):
        try:
            if ref.document < 0 or ref.chunk < 0:
                raise IndexError
            chunk_id = chunk_ids[ref.message][ref.document][ref.chunk]
        except (KeyError, IndexError):
            raise ValueError(
                f"a source names passage {ref.chunk + 1} of document {ref.document + 1} of"
                f" message {ref.message}, which is not there"
            ) from None
        rows.append((message_id, position, chunk_id, ref.number))
    _write_sources(db, rows)
