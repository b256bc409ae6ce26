"""Documents in the open chat: reading dropped or picked files off the GUI thread (with a
progress line), the ones waiting to go with the next message, and what each message says to
the model and cites, through hearth.documents (the same code as `hearth run --attach`).

Reading, chunking and embedding a document run on a worker thread, and so do reading a PDF's
scanned pages with a vision model (the chat's model when it can see, else the first installed
one; the progress line names the page) and embedding a question for the hybrid search when a
message is sent; the history database is written only on the GUI thread (it owns the
connection), when the message is sent and its question's vector (if any) has arrived.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from PySide6.QtCore import QObject, Signal

from ...documents import ChatDocuments, DocumentError, PreparedDocument, prepare_document
from ...documents.context import QuestionEmbedder
from ...documents.embedding import Embedder, pick_embedding_model, question_embedder
from ...documents.scanned import Transcriber
from ...history import ChatStore, Message
from ...history.compaction import SUMMARY
from ..api_client import ApiClient
from ..widgets.documents import ChipInfo
from .models import ModelsController

__all__ = ["DocumentsController"]


class _Reading(QObject):
    """Signals from one worker thread (queued to the GUI thread, where this object lives)."""

    progressed = Signal(str, int, int)  # name, pages done, pages
    transcribing = Signal(str, str, int, int, int)  # name, model, page, done, scanned pages
    done = Signal(object)  # PreparedDocument
    failed = Signal(str)  # a sentence


class _Embedding(QObject):
    """The answer of one question's embedding on a worker thread (queued to the GUI thread)."""

    done = Signal(object)  # (vector, model), or None when the service could not embed


class DocumentsController(QObject):
    changed = Signal()  # the waiting documents or the progress line changed
    notice = Signal(str, str)  # level, sentence

    def __init__(
        self,
        store: ChatStore,
        client: ApiClient,
        models: ModelsController,
        parent: QObject | None = None,
    ) -> None:
        super().__init__(parent)
        self._store = store
        self._client = client
        self._models = models
        # No embedder here: the GUI thread never embeds (on_sent fetches the vector first).
        self.chat_documents = ChatDocuments(store)
        self.pending: list[PreparedDocument] = []
        self.progress = ""  # "Reading report.pdf: page 40 of 300…" while reading
        self._active: list[_Reading] = []  # one per file still being read
        self._embedding: list[_Embedding] = []  # one per question being embedded

    # -- the embedding model -------------------------------------------------------------------

    def embedding_model(self) -> str:
        """The first installed model that embeds ('' when none: full-text search alone)."""
        return pick_embedding_model((r.name, r.capabilities) for r in self._models.model.models())

    def _embedder(self) -> Embedder | None:
        name = self.embedding_model()
        if not name or not self._client.base_url:
            return None
        return Embedder(self._client.base_url, name, self._client.token)

    # -- reading -------------------------------------------------------------------------------

    @property
    def reading(self) -> bool:
        return bool(self._active)

    def _transcriber(self, chat_model: str, path: Path, signals: _Reading) -> Transcriber | None:
        """What reads `path`'s scanned pages, if it has any (the model is found then, on the
        worker thread): `chat_model` when it can see, else the first installed vision model."""
        if not self._client.base_url:
            return None
        reader = Transcriber(self._client.base_url, self._client.token, chat_model)

        def progress(page: int, done: int, total: int) -> None:
            signals.transcribing.emit(path.name, reader.vision_model(), page, done, total)

        reader.progress = progress
        return reader

    def attach(self, paths: Sequence[Path], chat_model: str = "") -> None:
        """Read each file on a worker thread; it joins `pending` when ready. A PDF's scanned
        pages are read by `chat_model` when it can see, else by an installed vision model."""
        embedder = self._embedder()
        for path in paths:
            signals = _Reading(self)
            signals.progressed.connect(self._on_progress)
            signals.transcribing.connect(self._on_transcribing)
            transcriber = self._transcriber(chat_model, path, signals)
            signals.done.connect(lambda prepared, s=signals: self._on_done(s, prepared))
            signals.failed.connect(lambda sentence, s=signals: self._on_failed(s, sentence))

            def work(
                path: Path = path,
                signals: _Reading = signals,
                transcriber: Transcriber | None = transcriber,
            ) -> None:
                try:
                    prepared = prepare_document(
                        path,
                        lambda done, total: signals.progressed.emit(path.name, done, total),
                        embedder,
                        transcriber,
                    )
                except DocumentError as e:
                    signals.failed.emit(str(e))
                except Exception as e:  # a reader's bug must not lose the chat
                    signals.failed.emit(f"{path.name} could not be read: {e}")
                else:
                    signals.done.emit(prepared)

            thread = threading.Thread(target=work, name=f"read {path.name}", daemon=True)
            self._active.append(signals)
            self.progress = self.tr("Reading %1…").replace("%1", path.name)
            thread.start()
        self.changed.emit()

    def _finished(self, signals: _Reading) -> None:
        self._active.remove(signals)
        signals.deleteLater()
        if not self._active:
            self.progress = ""

    def _on_progress(self, name: str, done: int, total: int) -> None:
        self.progress = (
            self.tr("Reading %1: page %2 of %3…")
            .replace("%1", name)
            .replace("%2", str(done))
            .replace("%3", str(total))
        )
        self.changed.emit()

    def _on_transcribing(self, name: str, model: str, page: int, done: int, total: int) -> None:
        self.progress = (
            self.tr("Reading %1: page %2 from its image with %3 (%4 of %5)…")
            .replace("%1", name)
            .replace("%2", str(page))
            .replace("%3", model)
            .replace("%4", str(done + 1))
            .replace("%5", str(total))
        )
        self.changed.emit()

    def _on_done(self, signals: _Reading, prepared: PreparedDocument) -> None:
        self._finished(signals)
        self.pending.append(prepared)
        if prepared.document.notes:
            notes = "; ".join(prepared.document.notes)
            self.notice.emit("info", f"{prepared.name}: {notes}.")
        self.changed.emit()

    def _on_failed(self, signals: _Reading, sentence: str) -> None:
        self._finished(signals)
        self.notice.emit("error", sentence)
        self.changed.emit()

    def remove(self, index: int) -> None:
        if 0 <= index < len(self.pending):
            del self.pending[index]
            self.changed.emit()

    def clear(self) -> None:
        self.pending = []
        self.changed.emit()

    # -- the chat ------------------------------------------------------------------------------

    def pending_chips(
        self, system_prompt: str, path: Sequence[Message], num_ctx: int
    ) -> list[ChipInfo]:
        modes = self.chat_documents.preview_modes(self.pending, system_prompt, path, num_ctx)
        return [
            ChipInfo(p.name, p.document.extent(), mode, p.document.notes)
            for p, mode in zip(self.pending, modes, strict=True)
        ]

    @property
    def embedding(self) -> bool:
        """Whether a sent question's vector is still being fetched."""
        return bool(self._embedding)

    def on_sent(
        self,
        message: Message,
        system_prompt: str,
        earlier: Sequence[Message],
        num_ctx: int,
        then: Callable[[], None],
    ) -> None:
        """The message was stored: the waiting documents go with it (and the chat's searched
        documents are searched again for its question); then `then` runs on the GUI thread.

        With an embedding model installed and documents in the chat, the question is embedded
        on a worker thread first (an HTTP request the window must not wait on); the documents
        are stored and ranked, and `then` runs, when the vector (or the service's failure,
        then full-text search alone) arrives. Otherwise all of it happens before this returns.
        """
        pending, self.pending = self.pending, []
        if pending:
            self.changed.emit()
        searched = bool(pending) or self.chat_documents.has_documents([*earlier, message])
        embedder = self._embedder() if searched else None

        def finish(embedded: tuple[list[float], str] | None) -> None:
            fixed: QuestionEmbedder = lambda _question: embedded  # noqa: E731
            self.chat_documents.on_sent(message, pending, system_prompt, earlier, num_ctx, fixed)
            then()

        if embedder is None:
            finish(None)
            return
        signals = _Embedding(self)

        def arrived(embedded: tuple[list[float], str] | None) -> None:
            self._embedding.remove(signals)
            signals.deleteLater()
            finish(embedded)

        signals.done.connect(arrived)
        embed = question_embedder(embedder)

        def work() -> None:
            try:
                embedded = embed(message.content)
            except Exception:  # a bug in the client must not lose the question
                embedded = None
            signals.done.emit(embedded)

        self._embedding.append(signals)
        threading.Thread(target=work, name="embed question", daemon=True).start()

    def copy(self, source: Message, target: Message) -> None:
        self.chat_documents.copy(source, target)

    def message_text(self, message: Message) -> str:
        return self.chat_documents.message_text(message)

    def extras(self, message: Message) -> dict[str, Any]:
        """What the transcript shows besides the text: a question's document chips, a reply's
        sources (the passages its question's prompt drew on)."""
        if message.role == "user":
            docs = self.chat_documents.attached(message.id)
            return {"documents": [ChipInfo(d.name, d.extent(), d.mode, d.notes) for d in docs]}
        if message.role == "assistant" and message.parent_id is not None:
            question = message.parent_id
            parent = self._store.message(question)
            if parent is not None and parent.role == SUMMARY:  # compaction: the question is above
                question = parent.parent_id or question
            return {"sources": self.chat_documents.citations(question)}
        return {}
