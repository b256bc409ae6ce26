"""DOCX: paragraphs and tables in document order (python-docx), split at the headings
("Heading 1".."Heading 9" and "Title" styles), each section labelled by its heading path.
The package is checked first (`packages.check_package`): one that would unpack past
`MAX_UNPACKED_BYTES` (a zip bomb) is refused with a sentence before python-docx reads it."""

from __future__ import annotations

import zipfile
from pathlib import Path

from .limits import DocumentError
from .packages import check_package
from .records import Document, Section

__all__ = ["read_docx"]


def _level(style_name: str) -> int:
    """1-9 for a heading style, 0 for body text ("Title" counts as level 1)."""
    if style_name == "Title":
        return 1
    if style_name.startswith("Heading "):
        tail = style_name.removeprefix("Heading ").strip()
        return int(tail) if tail.isdigit() else 0
    return 0


def read_docx(path: Path) -> Document:
    import docx
    from docx.opc.exceptions import PackageNotFoundError
    from docx.table import Table
    from docx.text.paragraph import Paragraph

    try:
        check_package(path, "Word document")  # a zip bomb is refused before python-docx
        document = docx.Document(str(path))
    except DocumentError:
        raise
    except (PackageNotFoundError, zipfile.BadZipFile, KeyError, ValueError) as e:
        raise DocumentError(f"{path.name} is damaged or is not a Word document (.docx): {e}") from e
    except Exception as e:
        raise DocumentError(f"{path.name} is damaged: {e}") from e
    sections: list[Section] = []
    heading_path: list[str] = []
    label = "start"
    lines: list[str] = []

    def close() -> None:
        text = "\n".join(lines).strip()
        if text:
            sections.append(Section(label, text))

    for block in document.iter_inner_content():
        if isinstance(block, Table):
            for row in block.rows:
                cells = [c.text.strip() for c in row.cells]
                lines.append(" | ".join(cells))
            continue
        if not isinstance(block, Paragraph):
            continue
        style = block.style.name if block.style is not None else ""
        level = _level(style or "")
        text = block.text.strip()
        if level and text:
            close()
            heading_path = [*heading_path[: level - 1], text]
            label, lines = " › ".join(heading_path), [text]
        elif text:
            lines.append(text)
    close()
    return Document(path.name, "docx", sections)
