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

import re

from .merge import PieceCache, merge_symbols
from .vocab import Vocabulary

__all__ = ["SentencePieceTokenizer"]

SPACE = "\u2581"


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
        self._cache = PieceCache(self._merge)

    def encode(self, text: str, out: list[int]) -> None:
        """Append the ids for `text` (spaces must already be "▁") to `out`."""
        self._cache.extend(out, self._chunk_re.findall(text))

    def _merge(self, text: str) -> list[int]:
        t2i = self._t2i
        scores = self._scores

        def rank(left: str, right: str) -> float | None:
            # Highest score merges first, and merge_symbols takes the lowest rank first.
            tid = t2i.get(left + right)
            return None if tid is None else -scores[tid]

        out: list[int] = []
        for sym in merge_symbols(text, rank):
            tid = t2i.get(sym)
            if tid is not None:
                out.append(tid)
            else:
                out.extend(self._bytes(sym))
        return out

    def _bytes(self, sym: str) -> list[int]:
        ids = self._byte_ids
        return [
            tid for tid in (ids[b] for b in sym.encode("utf-8", "surrogatepass")) if tid is not None
        ]
