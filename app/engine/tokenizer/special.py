"""Splitting text on special-token strings before normal tokenization.

llama.cpp's rule (which the models' GGUF conversions were tested against) is: take the special
tokens longest first (by UTF-8 length); each one claims its leftmost non-overlapping
occurrences in the text that no longer token has claimed. This differs from a left-to-right
longest-match scan only when special tokens overlap each other, but it is cheap to reproduce
exactly: one regex pass (a trie of the token strings under a lookahead) finds, at every
position, the longest special token starting there. Tokens then claim spans in llama.cpp's
order; an occurrence refused because it runs into claimed text falls back to the longest
special token that starts at the same place and still fits (shorter ones come later in the
order, so this is exactly what llama.cpp would find for them).
"""

from __future__ import annotations

import re
from collections.abc import Iterable

__all__ = ["SpecialSplitter"]


def _char_class(chars: list[str]) -> str:
    if len(chars) == 1:
        return re.escape(chars[0])
    return "[" + "".join("\\" + c if c in "\\]^-[" else c for c in chars) + "]"


def _trie_pattern(strings: Iterable[str]) -> str:
    """A regex matching any of `strings`, preferring the longest at a given position."""
    root: dict[str, dict] = {}
    for s in strings:
        node = root
        for ch in s:
            node = node.setdefault(ch, {})
        node[""] = {}

    def build(node: dict[str, dict]) -> str:
        # Children with identical sub-patterns share one branch through a character class,
        # which keeps families like "<unused0>".."<unused6241>" small and quick to compile.
        groups: dict[str, list[str]] = {}
        for ch, child in sorted(node.items()):
            if ch:
                groups.setdefault(build(child), []).append(ch)
        alts = [_char_class(chars) + sub for sub, chars in groups.items()]
        if not alts:
            return ""
        body = alts[0] if len(alts) == 1 else "(?:" + "|".join(alts) + ")"
        if "" in node:  # a token ends here: longer continuations first, then stop
            return "(?:" + body + ")?"
        return body

    return build(root)


class SpecialSplitter:
    """Splits text into plain-text fragments (`str`) and special-token ids (`int`)."""

    def __init__(self, specials: dict[str, int]) -> None:
        """`specials` maps each special token's text to its id (texts must be non-empty)."""
        self._ids = specials
        self._regex: re.Pattern[str] | None = None
        self._prefixes: dict[str, tuple[str, ...]] = {}

    def __bool__(self) -> bool:
        return bool(self._ids)

    def _pattern(self) -> re.Pattern[str]:
        if self._regex is None:
            # Built on first use: it is only needed when encoding, and costs a few ms.
            self._regex = re.compile("(?=(" + _trie_pattern(self._ids) + "))", re.DOTALL)
        return self._regex

    def _special_prefixes(self, token: str) -> tuple[str, ...]:
        found = self._prefixes.get(token)
        if found is None:
            ids = self._ids
            found = tuple(token[:k] for k in range(1, len(token) + 1) if token[:k] in ids)
            self._prefixes[token] = found
        return found

    def split(self, text: str) -> list[str | int]:
        """Fragments of `text` in order; concatenating the texts of the ids gives `text` back."""
        if not self._ids or not text:
            return [text] if text else []
        # Start with the longest special token at each position. A shorter special token
        # starting at the same position is only tried when the longer one is refused (and
        # then directly the longest one that fits before the claimed text it ran into).
        occurrences: dict[str, list[int]] = {}
        for m in self._pattern().finditer(text):
            occurrences.setdefault(m.group(1), []).append(m.start())
        if not occurrences:
            return [text]
        prefixes = self._special_prefixes
        candidates = {t for longest in occurrences for t in prefixes(longest)}
        ids = self._ids
        # Longest first by UTF-8 length, ties by id (llama.cpp's sort leaves ties unspecified).
        order = sorted(candidates, key=lambda t: (-len(t.encode("utf-8", "surrogatepass")), ids[t]))
        claimed = bytearray(len(text))
        spans: list[tuple[int, int, int]] = []
        for tok in order:
            positions = occurrences.get(tok)
            if not positions:
                continue
            positions.sort()
            n = len(tok)
            tid = ids[tok]
            mark = b"\x01" * n
            for pos in positions:
                hit = claimed.find(1, pos, pos + n)
                if hit < 0:
                    claimed[pos : pos + n] = mark
                    spans.append((pos, n, tid))
                elif hit > pos:  # fall back to the longest special prefix that still fits
                    for shorter in reversed(prefixes(tok)):
                        if len(shorter) <= hit - pos:
                            occurrences.setdefault(shorter, []).append(pos)
                            break
        spans.sort()
        out: list[str | int] = []
        last = 0
        for pos, n, tid in spans:
            if pos > last:
                out.append(text[last:pos])
            out.append(tid)
            last = pos + n
        if last < len(text):
            out.append(text[last:])
        return out
