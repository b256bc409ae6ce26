"""What a file may be to be read as a document, and the error that refuses it with a sentence:
shared by the readers (readers.py and the format modules it chooses: pdf.py, word.py, and the
zip checks of packages.py), which import it and not each other."""

from __future__ import annotations

from collections.abc import Callable

__all__ = ["MAX_CHARS", "MAX_FILE_BYTES", "MAX_PAGES", "DocumentError", "Progress"]

MAX_FILE_BYTES = 64 * 1024 * 1024
MAX_PAGES = 2000
MAX_CHARS = 8_000_000  # about 2 million tokens: far past any context, still quick to index

# Progress(done, total): pages (PDF) or bytes read so far, for a progress line.
Progress = Callable[[int, int], None]


class DocumentError(ValueError):
    """A file Hearth cannot read as a document; the message is a sentence for the user."""
