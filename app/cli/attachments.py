"""`hearth run --attach FILE`: pictures go with the first message as images (for a vision
model); documents go through hearth.documents exactly as in the desktop app: read and indexed
into a throw-away history database for the session, sent whole or searched against the
context, searched again for each follow-up question, and the passages used printed after each
reply as its sources. A PDF's scanned pages are read by the session's model when it can see,
else by the first installed vision model (scanned.py), each page's progress on stderr."""

from __future__ import annotations

import base64
import tempfile
from pathlib import Path
from typing import Any, TextIO

from ..client import HearthClient, ServiceError
from ..documents import ChatDocuments, DocumentError, PreparedDocument, prepare_document
from ..documents.embedding import Embedder, find_embedding_model, question_embedder
from ..documents.records import Citation
from ..documents.scanned import Transcriber
from ..history import ChatStore, Message

__all__ = ["IMAGE_SUFFIXES", "TerminalAttachments", "context_length"]

IMAGE_SUFFIXES = {".png", ".jpg", ".jpeg", ".webp", ".gif", ".bmp"}


def context_length(client: HearthClient, model: str, asked: int | None) -> int:
    """num_ctx as the service will use it: --num-ctx, else what the service says it runs the
    model with (/api/show's `hearth.num_ctx`: the Modelfile's value, else its default), else
    4096 (a service that does not say). A reply's final record then says what it used
    (`reported_num_ctx`), which the session takes from there on."""
    return asked or client.num_ctx(model) or 4096


class TerminalAttachments:
    """The files of one `hearth run` session and the conversation that carries them."""

    def __init__(
        self,
        client: HearthClient,
        model: str,
        paths: list[str],
        num_ctx: int | None,
        embed_model: str | None,
        err: TextIO,
    ) -> None:
        self._err = err
        self.num_ctx = context_length(client, model, num_ctx)
        self.images: list[str] = []
        docs: list[Path] = []
        for raw in paths:
            path = Path(raw).expanduser()
            if not path.is_file():
                raise ServiceError(f"cannot attach {raw}: there is no such file")
            if path.suffix.lower() in IMAGE_SUFFIXES:
                self.images.append(base64.b64encode(path.read_bytes()).decode("ascii"))
            else:
                docs.append(path)
        self._dir = tempfile.TemporaryDirectory(prefix="hearth-run-")
        self._store = ChatStore(Path(self._dir.name) / "session.db")
        self._chat = self._store.create_chat(model)
        self._leaf: int | None = None
        embedder = None
        if docs:
            name = (
                embed_model
                if embed_model is not None
                else find_embedding_model(client.base_url, client.api_key)
            )
            if name:
                embedder = Embedder(client.base_url, name, client.api_key)
        self._docs = ChatDocuments(
            self._store, question_embedder(embedder) if embedder is not None else None
        )
        self._pending: list[PreparedDocument] = []
        for path in docs:
            transcriber = Transcriber(client.base_url, client.api_key, prefer=model)
            self._pending.append(self._prepare(path, embedder, transcriber))

    def _prepare(
        self, path: Path, embedder: Embedder | None, transcriber: Transcriber
    ) -> PreparedDocument:
        line_open = False  # a "\rreading ... page N of M" line waits for its newline

        def progress(done: int, total: int) -> None:
            nonlocal line_open
            if total >= 20 and (done == total or done % 10 == 0):
                self._err.write(f"\rreading {path.name}: page {done} of {total}")
                self._err.flush()
                line_open = True

        def transcribing(page: int, done: int, total: int) -> None:
            nonlocal line_open
            self._err.write(
                ("\n" if line_open else "")
                + f"(reading {path.name}: page {page} from its image with "
                f"{transcriber.vision_model()}, {done + 1} of {total})\n"
            )
            self._err.flush()
            line_open = False

        transcriber.progress = transcribing
        try:
            prepared = prepare_document(path, progress, embedder, transcriber)
        except DocumentError as e:
            raise ServiceError(str(e)) from None
        if line_open:
            self._err.write("\n")
        if prepared.embed_error:
            self._err.write(f"(no embeddings for {path.name}: {prepared.embed_error})\n")
        return prepared

    def close(self) -> None:
        self._store.close()
        self._dir.cleanup()

    @property
    def any(self) -> bool:
        return bool(self.images or self._pending)

    def user(self, text: str) -> dict[str, Any]:
        """The next user message, as /api/chat takes it, with the files it carries."""
        earlier = self._store.path(self._chat.id)
        msg = self._store.add_message(self._chat.id, self._leaf, "user", text)
        self._leaf = msg.id
        pending, self._pending = self._pending, []
        self._docs.on_sent(msg, pending, "", earlier, self.num_ctx)
        for doc in self._docs.attached(msg.id):
            notes = "".join(f"; {n}" for n in doc.notes)
            self._err.write(f"[{doc.name}: {doc.extent()}, {doc.mode}{notes}]\n")
        entry: dict[str, Any] = {"role": "user", "content": self._docs.message_text(msg)}
        if self._docs.attached(msg.id):
            entry["pinned"] = True  # its documents are never summarised away (compaction)
        if self.images:
            entry["images"], self.images = self.images, []
        return entry

    def messages(self) -> list[dict[str, Any]]:
        """The conversation so far, as sent (documents in the messages that carry them)."""
        return [
            {"role": m.role, "content": self._docs.message_text(m)}
            for m in self._store.path(self._chat.id)
        ]

    def assistant(self, text: str) -> None:
        msg = self._store.add_message(self._chat.id, self._leaf, "assistant", text)
        self._leaf = msg.id

    def forget_last(self) -> None:
        """The last question got no reply (stopped, failed): the next one follows the one
        before it."""
        last = self._store.message(self._leaf) if self._leaf else None
        self._leaf = last.parent_id if isinstance(last, Message) else None

    def sources(self) -> list[Citation]:
        """The passages the last question's prompt drew on."""
        return self._docs.citations(self._leaf) if self._leaf else []


def format_sources(citations: list[Citation]) -> str:
    """Sources: [1] report.pdf, page 217 · [2] ... (a document sent whole: its best pages)."""
    if not citations:
        return ""
    parts = [(f"[{c.number}] " if c.number else "") + c.label() for c in citations]
    return "Sources: " + " · ".join(parts) + "\n"
