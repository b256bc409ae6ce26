"""The plain records documents are made of: what a reader gives (a Document of Sections), what
is indexed (Chunks) and what a reply cites (Citations)."""

from __future__ import annotations

from dataclasses import dataclass, field

from ..history.records import FROM_IMAGE, cited_section

__all__ = ["FROM_IMAGE", "Chunk", "Citation", "Document", "Section", "cited_section", "page_ranges"]


@dataclass(frozen=True)
class Section:
    """A part of a document a reader can name: `label` is "page 12" (PDF), a heading path
    ("Costs › Travel", DOCX and Markdown) or "lines 41–80" (text, CSV, code). `origin` is ""
    for the file's own text, FROM_IMAGE for text a vision model read from the page's image."""

    label: str
    text: str
    origin: str = ""


@dataclass
class Document:
    """A document as read: its file name, its kind ("pdf", "docx", "text", ...), its sections in
    order, how many pages it has (PDF; 0 for other kinds) and notes about what could not be read
    (a scanned page without text), which are shown to the user and told to the model.
    `scanned`: the pages (PDF, 1-based) that are images without a text layer, whether or not
    a vision model then read them."""

    name: str
    kind: str
    sections: list[Section]
    pages: int = 0
    notes: list[str] = field(default_factory=list)
    scanned: list[int] = field(default_factory=list)

    @property
    def chars(self) -> int:
        return sum(len(s.text) for s in self.sections)

    def text_for_estimate(self) -> str:
        """Its text as sent whole (section labels included), for estimating its tokens."""
        return "".join(f"\n[{s.label}]\n{s.text}" for s in self.sections)

    def extent(self) -> str:
        """How long it is, in the words a chip shows: "300 pages", "12 sections"."""
        if self.kind == "pdf":
            return f"{self.pages} page" + ("s" if self.pages != 1 else "")
        n = len(self.sections)
        return f"{n} section" + ("s" if n != 1 else "")


@dataclass(frozen=True)
class Chunk:
    """A passage of a document: the unit that is indexed, retrieved and cited. `position` is its
    place in the document; chunks never overlap, so the document's text is its chunks in order."""

    position: int
    section: str
    text: str
    origin: str = ""  # its section's


@dataclass(frozen=True)
class Citation:
    """A passage a reply drew on: the document, the page or section, and the passage itself.
    `number` is its [n] in the prompt (0 for a passage of a document sent whole)."""

    document: str
    section: str
    text: str
    number: int = 0
    chunk_id: int = 0
    origin: str = ""  # FROM_IMAGE: a vision model read the passage from an image of its page

    def where(self) -> str:
        """ "page 217", or "read from an image of page 2" for a transcribed scanned page."""
        return cited_section(self.section, self.origin)

    def label(self) -> str:
        return f"{self.document}, {self.where()}"


def page_ranges(pages: list[int]) -> str:
    """[3, 4, 5, 9] -> "3–5, 9"."""
    out: list[str] = []
    start = prev = pages[0]
    for p in [*pages[1:], -1]:
        if p == prev + 1:
            prev = p
            continue
        out.append(str(start) if start == prev else f"{start}–{prev}")
        start = prev = p
    return ", ".join(out)
