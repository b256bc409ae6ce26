"""Documents attached to a chat: reading them (PDF, DOCX, text, Markdown, HTML, CSV, code),
splitting them into chunks, indexing them in the history database (FTS5/BM25, and vectors from
an embedding model when there is one), and turning them into the prompt of a question: whole
when they fit the context, else the passages that answer it, with the citations to show.

Qt-free: the desktop app and `hearth run --attach` use the same code.
"""

from .chat_documents import ChatDocuments
from .context import DocumentContext, build_context, estimate_tokens
from .index import DocumentIndex
from .prepare import PreparedDocument, prepare_document
from .readers import DOCUMENT_SUFFIXES, DocumentError, read_document
from .records import Chunk, Citation, Document, Section

__all__ = [
    "DOCUMENT_SUFFIXES",
    "ChatDocuments",
    "Chunk",
    "Citation",
    "Document",
    "DocumentContext",
    "DocumentError",
    "DocumentIndex",
    "PreparedDocument",
    "Section",
    "build_context",
    "estimate_tokens",
    "prepare_document",
    "read_document",
]
