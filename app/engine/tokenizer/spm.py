"""SentencePiece-style tokenization (`tokenizer.ggml.model == "llama"`).

The text (spaces already replaced by U+2581 "▁") starts as one symbol per character. Adjacent
symbols whose concatenation is a vocabulary token are merged, highest token score first (ties:
leftmost first), until no pair forms a token. Symbols that are not tokens fall back to their
UTF-8 bytes as `<0xHH>` tokens. This is llama.cpp's algorithm, reproduced exactly.

Speed: the work is split into chunks that no merge can cross. A merge can only join two
characters that sit next to each other inside some vocabulary token, so a "▁" whose left
neighbour never precedes "▁" inside a token starts a new chunk (in practice: every word). Chunk
results are cached, so repeated words cost one dict lookup.
"""

from __future__ import annotations

import heapq
import re

from .vocab import Vocabulary

__all__ = ["SentencePieceTokenizer"]

SPACE = "\u2581"
_CACHE_LIMIT = 200_000


def byte_token_ids(vocab: Vocabulary) -> list[int | None]:
    """For each byte value, the id of its `<0xHH>` token (else its 1-char token, else unk)."""
    t2i = vocab.token_to_id
    out: list[int | None] = []
    for b in range(256):
        tid = t2i.get(f"<0x{b:02X}>")
        if tid is None and b < 128:
            tid = t2i.get(chr(b))
        out.append(tid if tid is not None else vocab.unk_id)
    return out


def _chars_before_inner_space(tokens: list[str]) -> set[str]:
    """Every character that directly precedes a "▁" inside some token."""
    joined = "\x00".join(tokens)
    if joined.count("\x00") == len(tokens) - 1:
        return set(re.findall("([^\x00])(?=" + SPACE + ")", joined))
    found: set[str] = set()
    for tok in tokens:
        i = tok.find(SPACE, 1)
        while i > 0:
            found.add(tok[i - 1])
            i = tok.find(SPACE, i + 1)
    return found


class SentencePieceTokenizer:
    """Turns already-escaped text ("▁" for spaces) into token ids."""

    def __init__(self, vocab: Vocabulary) -> None:
        self._t2i = vocab.token_to_id
        self._scores = vocab.scores
        self._byte_ids = byte_token_ids(vocab)
        joiners = _chars_before_inner_space(vocab.tokens)
        chunk = "." + "[^" + SPACE + "]*"
        if joiners:
            cls = "".join(sorted(re.escape(c) for c in joiners))
            chunk += "(?:(?<=[" + cls + "])" + SPACE + "[^" + SPACE + "]*)*"
        self._chunk_re = re.compile(chunk, re.DOTALL)
        self._cache: dict[str, list[int]] = {}

    def encode(self, text: str, out: list[int]) -> None:
        """Append the ids for `text` (spaces must already be "▁") to `out`."""
        cache = self._cache
        for chunk in self._chunk_re.findall(text):
            ids = cache.get(chunk)
            if ids is None:
                ids = self._merge(chunk)
                if len(cache) >= _CACHE_LIMIT:
                    cache.clear()
                cache[chunk] = ids
            out.extend(ids)

    def _merge(self, text: str) -> list[int]:
        t2i = self._t2i
        n = len(text)
        if n == 1:
            tid = t2i.get(text)
            return [tid] if tid is not None else self._bytes(text)
        scores = self._scores
        syms = list(text)
        nxt = list(range(1, n + 1))
        nxt[-1] = -1
        prv = list(range(-1, n - 1))
        heap: list[tuple[float, int, int, int]] = []
        for i in range(n - 1):
            tid = t2i.get(text[i : i + 2])
            if tid is not None:
                heap.append((-scores[tid], i, i + 1, 2))
        heapq.heapify(heap)
        pop, push = heapq.heappop, heapq.heappush
        while heap:
            _, left, right, size = pop(heap)
            ls, rs = syms[left], syms[right]
            if not ls or not rs or len(ls) + len(rs) != size:
                continue  # one side changed since this pair was queued
            merged = ls + rs
            syms[left] = merged
            syms[right] = ""
            after = nxt[right]
            nxt[left] = after
            if after >= 0:
                prv[after] = left
            before = prv[left]
            if before >= 0:
                cand = syms[before] + merged
                tid = t2i.get(cand)
                if tid is not None:
                    push(heap, (-scores[tid], before, left, len(cand)))
            if after >= 0:
                cand = merged + syms[after]
                tid = t2i.get(cand)
                if tid is not None:
                    push(heap, (-scores[tid], left, after, len(cand)))
        out: list[int] = []
        i = 0
        while i >= 0:
            sym = syms[i]
            tid = t2i.get(sym)
            if tid is not None:
                out.append(tid)
            else:
                out.extend(self._bytes(sym))
            i = nxt[i]
        return out

    def _bytes(self, sym: str) -> list[int]:
        ids = self._byte_ids
        return [
            tid for tid in (ids[b] for b in sym.encode("utf-8", "surrogatepass")) if tid is not None
        ]
