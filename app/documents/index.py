"""The documents of chats in the history database (the tables and their one writer:
hearth.history.document_tables): storing a prepared document on its message, reading it back
without the file, ranking its chunks for a question (BM25 from FTS5 always; with vectors, fused
with cosine similarity by reciprocal rank), and the passages each message's prompt drew on.

Every write is one transaction on the connection it is given (ChatStore's: autocommit mode,
explicit BEGIN), so a document is stored whole or not at all.
"""

from __future__ import annotations

import json
import re
import sqlite3
import time
from collections.abc import Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass

import numpy as np

from ..history.db import transaction
from ..history.document_tables import (
    copy_documents,
    insert_document,
    replace_sources,
    set_document_mode,
)
from ..history.records import DocumentChunk, DocumentRecord
from .prepare import PreparedDocument
from .records import Citation

__all__ = ["DocumentIndex", "Hit", "StoredDocument", "fts_any"]

RRF_K = 60  # reciprocal rank fusion's constant (Cormack et al., 2009)


@dataclass(frozen=True)
class StoredDocument:
    id: int
    message_id: int
    name: str
    kind: str
    pages: int
    sections: int
    chars: int
    notes: list[str]
    mode: str  # "whole" or "searched"
    chunks: int

    def extent(self) -> str:
        if self.kind == "pdf":
            return f"{self.pages} page" + ("s" if self.pages != 1 else "")
        return f"{self.sections} section" + ("s" if self.sections != 1 else "")


@dataclass(frozen=True)
class Hit:
    chunk_id: int
    document_id: int
    document: str
    section: str
    text: str
    score: float


def fts_any(text: str, limit: int = 64) -> str:
    """A question -> an FTS5 query matching chunks with any of its words (BM25 ranks them)."""
    words = list(dict.fromkeys(w.lower() for w in re.findall(r"\w+", text, re.UNICODE)))
    return " OR ".join('"' + w.replace('"', '""') + '"' for w in words[:limit])


class DocumentIndex:
    def __init__(self, conn: sqlite3.Connection) -> None:
        self._conn = conn

    def _tx(self) -> AbstractContextManager[sqlite3.Connection]:
        return transaction(self._conn)

    # -- writing -----------------------------------------------------------------------------

    def add(self, message_id: int, position: int, prepared: PreparedDocument, mode: str) -> int:
        """Store `prepared` on the message `message_id`; its id."""
        doc = prepared.document
        vectors: list[dict[str, bytes]] = [{} for _ in prepared.chunks]
        if prepared.vectors and prepared.embed_model:
            vectors = [
                {prepared.embed_model: np.asarray(v, "<f4").tobytes()} for v in prepared.vectors
            ]
        record = DocumentRecord(
            name=doc.name,
            kind=doc.kind,
            pages=doc.pages,
            sections=len(doc.sections),
            chars=doc.chars,
            notes=list(doc.notes),
            mode=mode,
            sha256=prepared.sha256,
            created_at=time.time(),
            chunks=[
                DocumentChunk(chunk.section, chunk.text, vec, chunk.origin)
                for chunk, vec in zip(prepared.chunks, vectors, strict=True)
            ],
        )
        with self._tx() as db:
            return insert_document(db, message_id, position, record)[0]

    def copy_documents(self, source_message: int, target_message: int) -> None:
        """Attach `source_message`'s documents to `target_message` too (an edited question
        keeps its documents): rows are copied inside the database, no file is read."""
        with self._tx() as db:
            copy_documents(db, source_message, target_message, time.time())

    def set_mode(self, document_id: int, mode: str) -> None:
        with self._tx() as db:
            set_document_mode(db, document_id, mode)

    def set_sources(self, message_id: int, sources: Sequence[tuple[int, int]]) -> None:
        """The passages (chunk id, number in the prompt) `message_id`'s prompt draws on."""
        with self._tx() as db:
            replace_sources(db, message_id, sources)

    # -- reading -----------------------------------------------------------------------------

    def documents(self, message_ids: Sequence[int]) -> list[StoredDocument]:
        """The documents attached to these messages, in message and attachment order."""
        if not message_ids:
            return []
        marks = ",".join("?" * len(message_ids))
        rows = self._conn.execute(
            "SELECT d.*, (SELECT COUNT(*) FROM document_chunks c WHERE c.document_id = d.id)"
            f" AS n FROM documents d WHERE d.message_id IN ({marks})"
            " ORDER BY d.message_id, d.position",
            tuple(message_ids),
        ).fetchall()
        return [
            StoredDocument(
                r["id"], r["message_id"], r["name"], r["kind"], r["pages"], r["sections"],
                r["chars"], json.loads(r["notes"] or "[]"), r["mode"], r["n"],
            )
            for r in rows
        ]  # fmt: skip

    def chunks(self, document_id: int) -> list[tuple[int, str, str, str]]:
        """(chunk id, section, text, origin) of a document, in order: joined, its whole text."""
        rows = self._conn.execute(
            "SELECT id, section, text, origin FROM document_chunks WHERE document_id=?"
            " ORDER BY position",
            (document_id,),
        )
        return [(r[0], r[1], r[2], r[3]) for r in rows]

    def sources(self, message_id: int) -> list[Citation]:
        rows = self._conn.execute(
            "SELECT s.number, c.id, c.section, c.text, d.name, c.origin FROM message_sources s"
            " JOIN document_chunks c ON c.id = s.chunk_id JOIN documents d ON d.id = c.document_id"
            " WHERE s.message_id=? ORDER BY s.position",
            (message_id,),
        )
        return [Citation(r[4], r[2], r[3], number=r[0], chunk_id=r[1], origin=r[5]) for r in rows]

    # -- ranking -----------------------------------------------------------------------------

    def search(
        self,
        document_ids: Sequence[int],
        question: str,
        limit: int = 20,
        question_vector: Sequence[float] | None = None,
        model: str = "",
    ) -> list[Hit]:
        """The chunks of these documents that best answer `question`, best first: BM25 over the
        full-text index, fused by reciprocal rank with cosine similarity when a question vector
        (made by `model`) is given and the chunks have vectors from the same model."""
        if not document_ids:
            return []
        ranked = [self._bm25(document_ids, question, limit * 2)]
        if question_vector is not None and model:
            ranked.append(self._nearest(document_ids, question_vector, model, limit * 2))
        ranked = [r for r in ranked if r]
        if not ranked:
            return []
        if len(ranked) == 1:
            scores = {cid: 1.0 / (RRF_K + i) for i, cid in enumerate(ranked[0])}
        else:
            scores = {}
            for ranking in ranked:
                for i, cid in enumerate(ranking):
                    scores[cid] = scores.get(cid, 0.0) + 1.0 / (RRF_K + i)
        best = sorted(scores, key=lambda c: -scores[c])[:limit]
        return self._hits(best, scores)

    def _bm25(self, document_ids: Sequence[int], question: str, limit: int) -> list[int]:
        query = fts_any(question)
        if not query:
            return []
        marks = ",".join("?" * len(document_ids))
        rows = self._conn.execute(
            "SELECT c.id FROM document_chunks_fts f JOIN document_chunks c ON c.id = f.rowid"
            f" WHERE document_chunks_fts MATCH ? AND c.document_id IN ({marks})"
            " ORDER BY bm25(document_chunks_fts) LIMIT ?",
            (query, *document_ids, limit),
        )
        return [r[0] for r in rows]

    def _nearest(
        self, document_ids: Sequence[int], vector: Sequence[float], model: str, limit: int
    ) -> list[int]:
        marks = ",".join("?" * len(document_ids))
        rows = self._conn.execute(
            "SELECT v.chunk_id, v.vector FROM chunk_vectors v JOIN document_chunks c"
            f" ON c.id = v.chunk_id WHERE v.model=? AND c.document_id IN ({marks})",
            (model, *document_ids),
        ).fetchall()
        if not rows:
            return []
        q = np.asarray(vector, np.float32)
        matrix = np.stack([np.frombuffer(r[1], "<f4") for r in rows])
        if matrix.shape[1] != q.shape[0]:
            return []
        norms = np.linalg.norm(matrix, axis=1) * (np.linalg.norm(q) or 1.0)
        cosine = matrix @ q / np.where(norms == 0, 1.0, norms)
        order = np.argsort(-cosine)[:limit]
        return [int(rows[i][0]) for i in order]

    def _hits(self, chunk_ids: list[int], scores: dict[int, float]) -> list[Hit]:
        if not chunk_ids:
            return []
        marks = ",".join("?" * len(chunk_ids))
        rows = {
            r[0]: r
            for r in self._conn.execute(
                "SELECT c.id, c.document_id, d.name, c.section, c.text FROM document_chunks c"
                f" JOIN documents d ON d.id = c.document_id WHERE c.id IN ({marks})",
                tuple(chunk_ids),
            )
        }
        return [
            Hit(cid, rows[cid][1], rows[cid][2], rows[cid][3], rows[cid][4], scores[cid])
            for cid in chunk_ids
            if cid in rows
        ]
