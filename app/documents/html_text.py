"""An HTML page's readable text, split at its headings (the standard library's parser; script,
style and other invisible elements are dropped)."""

from __future__ import annotations

import re
from html.parser import HTMLParser

from .records import Section

__all__ = ["html_sections"]

_HIDDEN = {"script", "style", "noscript", "template", "svg", "head"}
_BLOCKS = {
    "p", "div", "br", "li", "tr", "section", "article", "header", "footer", "table", "ul",
    "ol", "pre", "blockquote", "dd", "dt", "figcaption", "title",
}  # fmt: skip
_HEADINGS = {"h1": 1, "h2": 2, "h3": 3, "h4": 4, "h5": 5, "h6": 6}


class _Text(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.sections: list[Section] = []
        self._path: list[str] = []
        self._label = "start"
        self._parts: list[str] = []
        self._hidden = 0
        self._heading: list[str] | None = None
        self._level = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in _HIDDEN:
            self._hidden += 1
        elif tag in _HEADINGS and not self._hidden:
            self._flush()
            self._heading, self._level = [], _HEADINGS[tag]
        elif tag in _BLOCKS:
            self._parts.append("\n")
        elif tag in ("td", "th"):
            self._parts.append(" | ")

    def handle_endtag(self, tag: str) -> None:
        if tag in _HIDDEN:
            self._hidden = max(0, self._hidden - 1)
        elif tag in _HEADINGS and self._heading is not None:
            title = re.sub(r"\s+", " ", "".join(self._heading)).strip()
            self._path = [*self._path[: self._level - 1], title]
            self._label = " › ".join(p for p in self._path if p) or "start"
            self._parts.append(title + "\n")
            self._heading = None
        elif tag in _BLOCKS:
            self._parts.append("\n")

    def handle_data(self, data: str) -> None:
        if self._hidden:
            return
        (self._heading if self._heading is not None else self._parts).append(data)

    def _flush(self) -> None:
        text = "".join(self._parts)
        text = re.sub(r"[ \t\r\f\v]+", " ", text)
        text = re.sub(r" *\n[ \n]*", "\n", text).strip()
        if text:
            self.sections.append(Section(self._label, text))
        self._parts = []

    def close(self) -> None:
        super().close()
        self._flush()


def html_sections(html: str) -> list[Section]:
    parser = _Text()
    parser.feed(html)
    parser.close()
    return parser.sections
