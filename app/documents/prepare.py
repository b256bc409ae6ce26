"""A document made ready to attach, before any chat holds it: read (scanned pages transcribed by a
vision model), chunked, hashed and (with an embedding model) embedded. This is the slow part, so it
runs off the GUI thread; the result is written to the history database when the message that carries
it is sent."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path

from .chunking import chunk_sections
from .embedding import Embedder, EmbeddingError
from .readers import Progress, read_document
from .records import Chunk, Document
from .scanned import Transcriber

__all__ = ["PreparedDocument", "prepare_document"]


@dataclass
class PreparedDocument:
    document: Document
    chunks: list[Chunk]
    sha256: str
    vectors: list[list[float]] = field(default_factory=list)  # one per chunk, or none
    embed_model: str = ""
    embed_error: str = ""  # why there are no vectors although a model was asked for

    @property
    def name(self) -> str:
        return self.document.name


def prepare_document(
    path: Path,
    progress: Progress | None = None,
    embedder: Embedder | None = None,
    transcriber: Transcriber | None = None,
) -> PreparedDocument:
    """Read and chunk the file at `path` (a PDF's scanned pages transcribed by `transcriber`'s
    vision model, when given and the service has one), and embed its chunks when `embedder` is
    given (a failing embedder leaves the document searchable by full text, and says why)."""
    document = read_document(path, progress, transcriber)
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    prepared = PreparedDocument(document, chunk_sections(document.sections), digest)
    if embedder is not None and prepared.chunks:
        try:
            prepared.vectors = embedder.embed([c.text for c in prepared.chunks])
            prepared.embed_model = embedder.model
        except EmbeddingError as e:
            prepared.embed_error = str(e)
    return prepared
