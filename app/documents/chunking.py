"""Splitting a document into chunks: passages of at most CHUNK_CHARS characters that never
cross a section (so each chunk has one page or heading to cite), cut at a paragraph, else a
line, else a sentence, else a space. Chunks do not overlap: joined in order they are the
document's text, which is how a document sent whole is rebuilt from the index."""

from __future__ import annotations

import re

from .records import Chunk, Section

__all__ = ["CHUNK_CHARS", "chunk_sections"]

CHUNK_CHARS = 1200  # about 300 tokens: a paragraph or two, small enough to cite precisely

_CUTS = (
    re.compile(r"\n\s*\n"),
    re.compile(r"\n"),
    re.compile(r"(?<=[.!?;:])\s+"),
    re.compile(r"\s+"),
)


def _split(text: str, limit: int) -> list[str]:
    pieces: list[str] = []
    while len(text) > limit:
        cut = 0
        for pattern in _CUTS:
            ends = [m.end() for m in pattern.finditer(text, 0, limit + 1) if m.start() > limit // 3]
            if ends:
                cut = ends[-1]
                break
        if cut <= 0:
            cut = limit
        pieces.append(text[:cut])
        text = text[cut:]
    if text:
        pieces.append(text)
    return pieces


def chunk_sections(sections: list[Section], limit: int = CHUNK_CHARS) -> list[Chunk]:
    chunks: list[Chunk] = []
    for section in sections:
        for piece in _split(section.text, limit):
            if piece.strip():
                chunks.append(Chunk(len(chunks), section.label, piece, section.origin))
    return chunks
