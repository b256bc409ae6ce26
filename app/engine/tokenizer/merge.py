"""What byte-level BPE (`bpe.py`) and SentencePiece (`spm.py`) share: the merge and a cache.

Both start each piece of text from one symbol per character and repeatedly merge the adjacent
pair with the best priority (lowest first; ties: leftmost first) until no adjacent pair may
merge. This is llama.cpp's algorithm for both: a heap of candidate pairs over a doubly linked
list of symbols. The two tokenizers differ only in how a pair is ranked, which the caller
passes to `merge_symbols`. Both also cache the ids of each piece (`PieceCache`), as text
repeats its words.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterable

__all__ = ["PairRank", "PieceCache", "merge_symbols"]

_CACHE_LIMIT = 200_000  # pieces; then the cache starts over (bounded memory, no LRU bookkeeping)

# `rank(left, right)`: the priority of merging two adjacent symbols (lower merges first), or
# None when the pair may not merge.
PairRank = Callable[[str, str], float | None]


def merge_symbols(text: str, rank: PairRank) -> list[str]:
    """The symbols that the non-empty `text` merges into, left to right.

    Every character starts as its own symbol; the adjacent pair with the lowest `rank` is merged
    (ties go to the leftmost pair), then the new symbol's pairs with its neighbours are ranked,
    and so on until no adjacent pair has a rank. Concatenated, the result is `text`.
    """
    n = len(text)
    if n == 1:
        return [text]
    syms = list(text)
    # A doubly linked list over `syms`: merging empties the right symbol and unlinks it.
    nxt = list(range(1, n + 1))
    nxt[-1] = -1
    prv = list(range(-1, n - 1))
    # Entries are (rank, left, right, combined length); the tuple order gives the tie-break.
    heap: list[tuple[float, int, int, int]] = []
    for i in range(n - 1):
        r = rank(text[i], text[i + 1])
        if r is not None:
            heap.append((r, i, i + 1, 2))
    heapq.heapify(heap)
    pop, push = heapq.heappop, heapq.heappush
    while heap:
        _, left, right, size = pop(heap)
        ls, rs = syms[left], syms[right]
        # Symbols only ever grow or empty, so a side that changed since this pair was queued
        # shows as an empty symbol or a different combined length: the entry is stale.
        if not ls or not rs or len(ls) + len(rs) != size:
            continue
        merged = ls + rs
        syms[left] = merged
        syms[right] = ""
        after = nxt[right]
        nxt[left] = after
        if after >= 0:
            prv[after] = left
        before = prv[left]
        if before >= 0:
            r = rank(syms[before], merged)
            if r is not None:
                push(heap, (r, before, left, len(syms[before]) + len(merged)))
        if after >= 0:
            r = rank(merged, syms[after])
            if r is not None:
                push(heap, (r, left, after, len(merged) + len(syms[after])))
    out: list[str] = []
    i = 0
    while i >= 0:
        out.append(syms[i])
        i = nxt[i]
    return out


class PieceCache:
    """Token ids per piece of text, computed by `encode(piece)` once and then looked up."""

    def __init__(self, encode: Callable[[str], list[int]]) -> None:
        self._encode = encode
        self._ids: dict[str, list[int]] = {}

    def extend(self, out: list[int], pieces: Iterable[str]) -> None:
        """Append the ids of each piece, in order, to `out`."""
        cache = self._ids
        for piece in pieces:
            ids = cache.get(piece)
            if ids is None:
                ids = self._encode(piece)
                if len(cache) >= _CACHE_LIMIT:
                    cache.clear()
                cache[piece] = ids
            out.extend(ids)
