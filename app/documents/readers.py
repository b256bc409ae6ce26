"""Reading a file into a Document: the format is chosen by the file's suffix, the work is done
by the library made for it (pypdf, python-docx, the standard library's html.parser and csv).

Bounded: a file over MAX_FILE_BYTES, a PDF over MAX_PAGES pages, a DOCX that would unpack past
`packages.MAX_UNPACKED_BYTES` (a zip bomb) or a text over MAX_CHARS characters is refused with
a sentence, as is an encrypted or damaged file; nothing is half-read silently (a PDF page
without a text layer is read by a vision model when a `Transcriber` is given and the service has
one, see scanned.py; else it is read as empty and named in the document's notes).
"""

from __future__ import annotations

import csv
import io
import re
from pathlib import Path
from typing import TYPE_CHECKING

from .limits import MAX_CHARS, MAX_FILE_BYTES, MAX_PAGES, DocumentError, Progress
from .records import Document, Section

if TYPE_CHECKING:
    from .scanned import Transcriber

__all__ = [
    "CODE_SUFFIXES",
    "DOCUMENT_SUFFIXES",
    "MAX_CHARS",
    "MAX_FILE_BYTES",
    "MAX_PAGES",
    "DocumentError",
    "Progress",
    "read_document",
]

LINES_PER_SECTION = 40  # a text file's sections: "lines 1–40", "lines 41–80", ...

TEXT_SUFFIXES = {".txt", ".text", ".log", ".rst"}
MARKDOWN_SUFFIXES = {".md", ".markdown"}
HTML_SUFFIXES = {".html", ".htm", ".xhtml"}
CSV_SUFFIXES = {".csv", ".tsv"}
CODE_SUFFIXES = {
    ".py", ".js", ".ts", ".tsx", ".jsx", ".java", ".kt", ".c", ".h", ".cc", ".cpp", ".hpp",
    ".cs", ".go", ".rs", ".rb", ".php", ".swift", ".scala", ".sh", ".bash", ".ps1", ".sql",
    ".r", ".m", ".lua", ".pl", ".toml", ".yaml", ".yml", ".json", ".xml", ".ini", ".cfg",
    ".css", ".scss", ".vue", ".dart", ".zig", ".hs", ".ex", ".exs", ".clj", ".jl",
}  # fmt: skip
DOCUMENT_SUFFIXES = frozenset(
    {".pdf", ".docx"} | TEXT_SUFFIXES | MARKDOWN_SUFFIXES | HTML_SUFFIXES | CSV_SUFFIXES
    | CODE_SUFFIXES
)  # fmt: skip


def read_document(
    path: Path, progress: Progress | None = None, transcriber: Transcriber | None = None
) -> Document:
    """Read the document at `path` (see the module's docstring for the formats and limits);
    `transcriber` reads a PDF's scanned pages with a vision model (scanned.py)."""
    suffix = path.suffix.lower()
    if suffix not in DOCUMENT_SUFFIXES:
        raise DocumentError(f"{path.name}: Hearth does not read “{suffix or 'no suffix'}” files.")
    try:
        size = path.stat().st_size
    except OSError as e:
        raise DocumentError(f"{path.name}: the file cannot be opened ({e.strerror}).") from e
    if size > MAX_FILE_BYTES:
        raise DocumentError(
            f"{path.name} is {size / 2**20:.0f} MiB; documents of up to "
            f"{MAX_FILE_BYTES // 2**20} MiB can be attached."
        )
    if suffix == ".pdf":
        from .pdf import read_pdf
        from .scanned import read_scanned_pages

        doc = read_pdf(path, progress)
        read_scanned_pages(path, doc, transcriber)
    elif suffix == ".docx":
        from .word import read_docx

        doc = read_docx(path)
    else:
        doc = _read_textual(path, suffix)
    if doc.chars > MAX_CHARS:
        raise DocumentError(
            f"{path.name} holds {doc.chars:,} characters of text; Hearth reads documents of up "
            f"to {MAX_CHARS:,}."
        )
    if not any(s.text.strip() for s in doc.sections):
        if doc.notes:
            raise DocumentError(f"{path.name} has no text Hearth can read: {doc.notes[0]}")
        raise DocumentError(f"{path.name} is empty: it holds no text.")
    return doc


def _decode(path: Path) -> str:
    data = path.read_bytes()
    if b"\x00" in data[:8192]:
        raise DocumentError(f"{path.name} is not a text file (it holds binary data).")
    for encoding in (
        ("utf-8-sig", "utf-16") if data[:2] in (b"\xff\xfe", b"\xfe\xff") else ("utf-8-sig",)
    ):
        try:
            return data.decode(encoding)
        except UnicodeDecodeError:
            continue
    return data.decode("cp1252", errors="replace")  # old Windows text: readable, never refused


def _read_textual(path: Path, suffix: str) -> Document:
    try:
        text = _decode(path)
    except OSError as e:
        raise DocumentError(f"{path.name}: the file cannot be read ({e.strerror}).") from e
    if suffix in HTML_SUFFIXES:
        from .html_text import html_sections

        return Document(path.name, "html", html_sections(text))
    if suffix in MARKDOWN_SUFFIXES:
        return Document(path.name, "markdown", markdown_sections(text))
    if suffix in CSV_SUFFIXES:
        return Document(path.name, "csv", csv_sections(text, "\t" if suffix == ".tsv" else ","))
    kind = "code" if suffix in CODE_SUFFIXES else "text"
    return Document(path.name, kind, line_sections(text))


def line_sections(text: str, per: int = LINES_PER_SECTION) -> list[Section]:
    """Text as sections of `per` lines, labelled by their line numbers."""
    lines = text.splitlines()
    out = []
    for start in range(0, len(lines), per):
        block = lines[start : start + per]
        end = start + len(block)
        out.append(Section(f"lines {start + 1}–{end}", "\n".join(block)))
    return out


_HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")


def markdown_sections(text: str) -> list[Section]:
    """Markdown split at its headings, each section labelled by its heading path (the text
    before the first heading is "start"); fenced code is not searched for headings."""
    out: list[Section] = []
    path: list[str] = []
    lines: list[str] = []
    label = "start"
    fenced = False

    def close() -> None:
        if "\n".join(lines).strip():
            out.append(Section(label, "\n".join(lines).strip("\n")))

    for line in text.splitlines():
        if line.lstrip().startswith(("```", "~~~")):
            fenced = not fenced
        match = None if fenced else _HEADING.match(line)
        if match:
            close()
            level = len(match.group(1))
            path = [*path[: level - 1], match.group(2)]
            label = " › ".join(p for p in path if p)
            lines = [line]
        else:
            lines.append(line)
    close()
    return out


def csv_sections(text: str, delimiter: str, per: int = LINES_PER_SECTION) -> list[Section]:
    """A table as sections of rows, each repeating the header so a passage stands alone."""
    try:
        rows = list(csv.reader(io.StringIO(text), delimiter=delimiter))
    except csv.Error:
        return line_sections(text, per)
    if not rows:
        return []
    header, body = rows[0], rows[1:]

    def line(row: list[str]) -> str:
        return delimiter.join(row)

    out = []
    for start in range(0, max(len(body), 1), per):
        block = body[start : start + per]
        first, last = start + 2, start + 1 + len(block)  # file line numbers, header is line 1
        label = f"rows {first}–{last}" if block else "header"
        out.append(Section(label, "\n".join(line(r) for r in [header, *block])))
    return out
