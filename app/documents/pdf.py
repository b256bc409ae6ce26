"""PDF: the text layer of each page (pypdf), labelled "page N". A page without text that holds an
image is read as empty and listed in `Document.scanned` (scanned.py then has a vision model read it,
or notes why not); an encrypted PDF is read only when it opens with the empty password (many are
encrypted only to restrict printing or copying), else refused with a sentence, as is a damaged
one."""

from __future__ import annotations

import logging
from pathlib import Path

from .limits import MAX_PAGES, DocumentError, Progress
from .records import Document, Section, page_ranges

__all__ = ["read_pdf"]


def _has_images(page: object) -> bool:
    try:
        return len(page.images) > 0  # type: ignore[attr-defined]
    except Exception:
        return True


def read_pdf(path: Path, progress: Progress | None = None) -> Document:
    from pypdf import PdfReader
    from pypdf.errors import DependencyError, FileNotDecryptedError, PdfReadError

    name = path.name
    logging.getLogger("pypdf").setLevel(logging.ERROR)  # its recovery warnings are not news
    try:
        reader = PdfReader(path, strict=False)
        if reader.is_encrypted and not reader.decrypt(""):
            raise DocumentError(
                f"{name} is protected by a password; Hearth cannot read it. Save an unprotected "
                "copy (print it to PDF) and attach that."
            )
        count = len(reader.pages)
    except DocumentError:
        raise
    except (FileNotDecryptedError, DependencyError) as e:
        raise DocumentError(f"{name} is encrypted in a way Hearth cannot open ({e}).") from e
    except (PdfReadError, ValueError, KeyError, TypeError, OSError, IndexError) as e:
        raise DocumentError(f"{name} is damaged or is not a PDF: {e}") from e
    if count > MAX_PAGES:
        raise DocumentError(
            f"{name} has {count} pages; Hearth reads PDFs of up to {MAX_PAGES} pages."
        )
    sections: list[Section] = []
    scanned: list[int] = []
    blank: list[int] = []
    broken: list[int] = []
    for n, page in enumerate(reader.pages, start=1):
        try:
            text = page.extract_text() or ""
        except Exception:
            text = ""
            broken.append(n)
        else:
            if not text.strip():
                (scanned if _has_images(page) else blank).append(n)
        sections.append(Section(f"page {n}", text.strip()))
        if progress is not None:
            progress(n, count)
    notes = []
    if broken:
        notes.append(f"page(s) {page_ranges(broken)} could not be read (damaged)")
    if blank and len(blank) < count:
        notes.append(f"page(s) {page_ranges(blank)} hold no text")
    return Document(name, "pdf", sections, pages=count, notes=notes, scanned=scanned)
