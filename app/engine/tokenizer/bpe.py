"""Byte-level BPE (`tokenizer.ggml.model == "gpt2"`): GPT-2, Llama 3, Qwen, Mistral Tekken...

Each pre-tokenizer piece is turned into UTF-8 bytes, each byte into the printable character
GPT-2 assigns to it, and the resulting characters are merged pairwise by merge rank (lowest
rank first, ties leftmost first) by `merge.merge_symbols`, as llama.cpp does.
Pieces that are whole vocabulary tokens skip the merges when the pre-tokenizer says so
(`ignore_merges`, Llama 3 and Tekken). Results are cached per piece.
"""

from __future__ import annotations

from .merge import PieceCache, merge_symbols
from .pretokenize import PreTokenizer
from .vocab import Vocabulary

__all__ = ["BytePairTokenizer", "BYTE_TO_UNICODE", "UNICODE_TO_BYTE"]


def _bytes_to_unicode() -> list[str]:
    """GPT-2's reversible map from bytes to printable characters."""
    keep = [*range(0x21, 0x7F), *range(0xA1, 0xAD), *range(0xAE, 0x100)]
    table = [""] * 256
    for b in keep:
        table[b] = chr(b)
    extra = 0
    for b in range(256):
        if not table[b]:
            table[b] = chr(256 + extra)
            extra += 1
    return table


BYTE_TO_UNICODE: list[str] = _bytes_to_unicode()
UNICODE_TO_BYTE: dict[str, int] = {ch: b for b, ch in enumerate(BYTE_TO_UNICODE)}
# Applied to text decoded as latin-1 (one char per byte), this yields the GPT-2 characters.
_ENCODE_TABLE = {b: ch for b, ch in enumerate(BYTE_TO_UNICODE)}


class BytePairTokenizer:
    """Turns plain text (no special tokens) into ids with byte-level BPE."""

    def __init__(self, vocab: Vocabulary, pre: PreTokenizer) -> None:
        self._t2i = vocab.token_to_id
        self._pre = pre
        merges = vocab.merges
        # "left right" -> rank; the first occurrence of a duplicate wins, as in llama.cpp. The
        # key is the merge line itself, so a lookup is `left + " " + right` (tokens of
        # byte-level BPE never contain a plain space).
        self._ranks = dict(zip(reversed(merges), range(len(merges) - 1, -1, -1), strict=True))
        self._ignore_merges = pre.ignore_merges
        self._cache = PieceCache(self._piece)

    def encode(self, text: str, out: list[int]) -> None:
        """Append the ids for `text` to `out`."""
        self._cache.extend(out, self._pre.split(text))

    def _piece(self, piece: str) -> list[int]:
        word = piece.encode("utf-8", "surrogatepass").decode("latin-1")
        return self._word(word.translate(_ENCODE_TABLE))

    def _word(self, word: str) -> list[int]:
        t2i = self._t2i
        if self._ignore_merges:
            tid = t2i.get(word)
            if tid is not None:
                return [tid]
        ranks = self._ranks
        out: list[int] = []
        for sym in merge_symbols(word, lambda left, right: ranks.get(left + " " + right)):
            out.extend(self._lookup(sym))
        return out

    def _lookup(self, sym: str) -> list[int]:
        tid = self._t2i.get(sym)
        if tid is not None:
            return [tid]
        # Not a token (a merge whose result is missing from the vocabulary): llama.cpp then
        # looks up each UTF-8 byte of the symbol as a one-character token, dropping misses.
        t2i = self._t2i
        found = (t2i.get(chr(b)) for b in sym.encode("utf-8") if b < 0x80)
        return [t for t in found if t is not None]
