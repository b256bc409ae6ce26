"""Per-model token data for constrained sampling: token bytes as a trie, plus arrays that let a
mask inside a JSON string be computed with numpy instead of token by token.

Tokens are identified here by *u*, the index of their byte string in the sorted list of
distinct strings (several ids can share one string, e.g. "A" and the byte token <0x41>).
Index `n_u` is a sentinel for tokens that are never allowed (control tokens, empty pieces).
"""

from __future__ import annotations

from bisect import bisect_left
from typing import Any

import numpy as np

from ..tokenizer import TokenType
from ..tokenizer.detokenize import piece_bytes
from .automaton import _LEAD, _LEX

__all__ = ["ByteTrie", "TokenTable"]


class ByteTrie:
    """Sorted distinct byte strings read as a trie. A node is (lo, hi, depth): the strings
    `strings[lo:hi]` share `strings[lo][:depth]`; if one of them *is* that prefix it sits at
    `lo`. Children are found by bisection and memoised (idempotent, so safe to share between
    threads), which costs nothing at build time and only touches the nodes masks reach."""

    def __init__(self, strings: list[bytes]) -> None:
        self.strings = strings
        self._kids: dict[int, list[tuple[int, int, int]]] = {}

    def children(self, lo: int, hi: int, d: int) -> list[tuple[int, int, int]]:
        """(byte, lo, hi) of each child of node (lo, hi, d)."""
        key = lo << 16 | d
        kids = self._kids.get(key)
        if kids is None:
            s = self.strings
            kids = []
            i = lo + 1 if len(s[lo]) == d else lo
            while i < hi:
                b = s[i][d]
                j = hi if b == 255 else bisect_left(s, s[i][:d] + bytes((b + 1,)), i, hi)
                kids.append((b, i, j))
                i = j
            self._kids[key] = kids
        return kids


def _utf8_end(data: bytes, lex: int) -> int:
    """String-lexer state after `data` (plain string bytes) from `lex`, or -1."""
    for b in data:
        lex = _LEX[lex][b] if lex else (_LEAD[b] if b >= 0x80 else 0)
        if lex < 0:
            return -1
    return lex


class TokenTable:
    """Built once per model from the tokenizer: the byte string of every token id, plus the ids
    that end generation. Immutable after construction and shared by every `JsonConstraint` of
    that model (the only mutation is idempotent memoisation, safe under the GIL).

    Control and unknown tokens (other than end-of-generation ids) are never allowed inside
    JSON. User-defined tokens are allowed by their text: Gemma writes "\\n" and indentation
    with them, so excluding them would forbid the model's own newlines.
    """

    def __init__(self, pieces: list[bytes], eos_ids: Any = (), excluded: Any = ()) -> None:
        """`pieces[id]`: the bytes of token `id`; `eos_ids`: ids that end generation;
        `excluded`: ids never allowed (besides `eos_ids` and empty pieces)."""
        size = self.vocab_size = len(pieces)
        self.eos_ids = np.array(sorted(set(eos_ids)), dtype=np.int64)
        lens = np.fromiter(map(len, pieces), dtype=np.int64, count=size)
        keep = lens > 0
        keep[np.asarray(list(excluded), dtype=np.int64)] = False
        keep[self.eos_ids] = False
        # A raw NUL is never valid JSON; dropping such pieces also makes numpy's fixed-width
        # strings (NUL-padded) sort exactly like Python bytes, which the trie's bisection uses.
        blob = np.frombuffer(b"".join(pieces), dtype=np.uint8)
        keep[np.searchsorted(np.cumsum(lens), np.flatnonzero(blob == 0), side="right")] = False
        kept = np.flatnonzero(keep)
        width = max(1, int(lens.max(initial=1)))
        fixed, inverse = np.unique(np.array(pieces, dtype=f"S{width}")[kept], return_inverse=True)
        n = self.n_u = len(fixed)
        if n == 0:
            raise ValueError("the vocabulary has no usable tokens")
        self.token_to_u = np.full(size, n, dtype=np.int32)
        self.token_to_u[kept] = inverse.reshape(-1)
        self.token_u_list = self.token_to_u.tolist()  # faster than numpy for single lookups
        # Masks are built over token ids: each string's first id, plus the few ids that share
        # a string with an earlier one (copied from it), so no vocabulary-wide gather is needed.
        self.first_tok = np.full(n, size, dtype=np.int64)
        np.minimum.at(self.first_tok, inverse.reshape(-1), kept)
        dup = kept[self.first_tok[inverse.reshape(-1)] != kept]
        self.dup_tok, self.dup_first = dup, self.first_tok[self.token_to_u[dup]]
        self.strings = strings = fixed.tolist()
        self.trie = ByteTrie(strings)
        self._per_string_arrays(strings, fixed.view(np.uint8).reshape(n, width))
        self._string_tokens(strings)
        self.nchars_tok = self.nchars[self.token_to_u]
        self._base: dict[int, np.ndarray] = {}

    @classmethod
    def from_tokenizer(cls, tokenizer: Any) -> TokenTable:
        """The table for a `hearth.engine.tokenizer.Tokenizer` (0.6-1 s for Gemma 3's 262k
        tokens on a small machine; most of it is the tokenizer producing the token bytes)."""
        size = tokenizer.vocab_size
        vocab = getattr(tokenizer, "vocab", None)
        types = getattr(vocab, "types", None)
        if vocab is not None and types is not None and len(types) == size:
            # Same function `token_bytes` uses, minus its per-call caching overhead.
            model = [tokenizer.model] * size
            pieces = list(map(piece_bytes, vocab.tokens, types, model))
            kinds = np.asarray(types)
            control = np.flatnonzero((kinds == TokenType.CONTROL) | (kinds == TokenType.UNKNOWN))
        else:
            pieces = list(map(tokenizer.token_bytes, range(size)))
            is_control = getattr(tokenizer, "is_control", tokenizer.is_special)
            control = np.array([i for i in range(size) if is_control(i)], dtype=np.int64)
        return cls(pieces, tokenizer.eos_ids, control)

    def _per_string_arrays(self, strings: list[bytes], mat: np.ndarray) -> None:
        """Vectorised facts about each string (arrays have a sentinel entry at n_u). `mat` is
        the strings as a NUL-padded byte matrix."""
        n = self.n_u
        col = np.arange(mat.shape[1], dtype=np.int16)
        special = ((mat < 0x20) & (mat != 0)) | (mat == 0x22) | (mat == 0x5C)  # break a string
        # lse: 1 + index of the last special byte (0: none); fsp: index of the first one.
        self.lse = np.append(np.where(special, col + 1, 0).max(axis=1), 99).astype(np.int16)
        self.fsp = np.where(special.any(axis=1), special.argmax(axis=1), 99)
        char = ((mat & 0xC0) != 0x80) & (mat != 0)  # bytes that start a character
        self.nchars = np.append(char.sum(axis=1), 9999).astype(np.int32)
        # Whole-UTF-8 check for all strings at once: undecodable bytes become lone surrogates.
        text = b"\x00".join(strings).decode("utf-8", "surrogateescape")
        cps = np.frombuffer(text.encode("utf-32-le", "surrogatepass"), dtype=np.uint32)
        owner = np.cumsum(cps == 0)
        valid = np.ones(n + 1, dtype=bool)
        valid[owner[(cps >= 0xDC80) & (cps <= 0xDCFF)]] = False
        valid[n] = False
        self.valid = valid
        plain = self.lse[:n] == 0
        self.plain_valid = np.append(plain & valid[:n], False)
        self.max_nchars = int(self.nchars[:n].max(initial=0))
        self.plain_valid_list = self.plain_valid.tolist()
        self.nchars_list = self.nchars.tolist()
        # Plain strings that are not whole UTF-8 (byte-fallback pieces): their lexer state
        # after the string, from each lexer state 0..7 (-1: rejected).
        self.odd_plain = np.flatnonzero(plain & ~valid[:n])
        self.odd_plain_end = np.array(
            [[_utf8_end(strings[u], lex) for u in self.odd_plain.tolist()] for lex in range(8)],
            dtype=np.int8,
        ).reshape(8, len(self.odd_plain))

    def _string_tokens(self, strings: list[bytes]) -> None:
        """Whole-UTF-8 strings with a quote or backslash, split at the first special byte into
        a plain prefix and a suffix: inside a string their fate depends on the prefix length
        and the suffix only, so suffixes are walked once (as a trie) for all of them."""
        n = self.n_u
        lse, valid = self.lse[:n], self.valid[:n]
        cand = np.flatnonzero((lse > 0) & valid).tolist()
        self.odd_special = np.flatnonzero((lse > 0) & ~valid)
        sp_u: list[int] = []
        plen: list[int] = []
        suffixes: list[bytes] = []
        fsp = self.fsp
        for u in cand:
            s = strings[u]
            i = int(fsp[u])
            if s[i] in (0x22, 0x5C):  # a raw control character never fits in a string
                sp_u.append(u)
                plen.append(len(s[:i].decode("utf-8")))
                suffixes.append(s[i:])
        distinct = sorted(set(suffixes))
        where = {s: i for i, s in enumerate(distinct)}
        self.sp_u = np.array(sp_u, dtype=np.int64)
        self.sp_plen = np.array(plen, dtype=np.int32)
        self.sp_sfx = np.array([where[s] for s in suffixes], dtype=np.int64)
        self.sfx_trie = ByteTrie(distinct)
        self.n_sfx = len(distinct)
        self.sfx_max_len = max(map(len, distinct), default=0)
        self.sp_groups = [
            (int(c), np.flatnonzero(self.sp_plen == c)) for c in np.unique(self.sp_plen)
        ]
        # For keys whose text decides their schema: sp entries by their plain prefix bytes.
        self.sp_by_prefix: dict[bytes, list[int]] = {}
        for k, u in enumerate(sp_u):
            self.sp_by_prefix.setdefault(strings[u][: int(fsp[u])], []).append(k)

    def base_mask(self, lex: int) -> np.ndarray:
        """Token ids that may follow inside a string in lexer state `lex` (0..7) without
        ending or escaping it, ignoring length. Read-only; memoised."""
        m = self._base.get(lex)
        if m is None:
            by_u = self.plain_valid.copy() if lex == 0 else np.zeros(self.n_u + 1, dtype=bool)
            by_u[self.odd_plain[self.odd_plain_end[lex] >= 0]] = True
            m = by_u[self.token_to_u]
            m.flags.writeable = False
            self._base[lex] = m
        return m

    def set_strings(self, mask: np.ndarray, u: np.ndarray) -> None:
        """Allow in `mask` (over token ids) every token whose string index is in `u`."""
        mask[self.first_tok[u]] = True
        if len(self.dup_tok):
            mask[self.dup_tok[mask[self.dup_first]]] = True
