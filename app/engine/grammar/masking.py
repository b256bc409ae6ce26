"""Which tokens keep the output valid, computed without trying every token one by one.

Two strategies, chosen by where the automaton stands:

- Inside a free-form string (the common case by token count) nearly every token is allowed.
  The answer is built with numpy from per-token facts (no quote/backslash/control byte, whole
  UTF-8, character count): `TokenTable.base_mask`. Tokens that contain a quote or backslash
  are settled by walking the trie of their *suffixes* (from that byte on) once, with a prefix
  length as the only thing that varies, and memoised by the state with the character count
  reduced to what can still matter.
- Anywhere else the token trie is walked with the automaton; a rejected byte prunes a whole
  subtree, so a mask costs a few hundred to ~1,200 automaton steps on Gemma 3's 262k
  tokens. A subtree that enters a free string (e.g. below `"` or `\\n`) is settled with
  numpy the same way ("bulk") instead of walked.
"""

from __future__ import annotations

import json
from collections import OrderedDict
from typing import Any

import numpy as np

from .automaton import K_STR, K_TKEY, STEP, State, run, step_all
from .vocab import ByteTrie, TokenTable

_BULK_MIN = 24  # subtrees smaller than this are walked: numpy overhead would dominate


class LRU(OrderedDict[Any, Any]):
    """A small least-recently-used memo."""

    def __init__(self, size: int) -> None:
        super().__init__()
        self.size = size

    def get_or(self, key: Any, make: Any) -> Any:
        val = self.get(key)
        if val is None:
            val = self[key] = make()
            if len(self) > self.size:
                self.popitem(last=False)
        else:
            self.move_to_end(key)
        return val


def _free_string(state: State) -> tuple[int, int] | None:
    """(chars, max_chars) when the single stack is in plain lexer state of a free string."""
    if len(state) != 1:
        return None
    f = state[0][-1]
    if f[0] == K_STR and f[4] == 0:
        return f[3], f[1]
    if f[0] == K_TKEY and f[4] == 0:
        return f[3], f[2]
    return None


def _chars(data: bytes) -> int:
    return sum(1 for b in data if b & 0xC0 != 0x80)


class _Walk:
    """One walk of a trie; collects accepted indices."""

    def __init__(self, table: TokenTable, trie: ByteTrie, bulk: bool) -> None:
        self.table, self.trie, self.bulk = table, trie, bulk
        self.hits: list[int] = []
        self.arrays: list[np.ndarray] = []

    def result(self) -> np.ndarray:
        parts = [np.array(self.hits, dtype=np.int64), *self.arrays]
        return np.concatenate(parts) if len(parts) > 1 else parts[0]

    def walk(self, state: State, lo: int, hi: int, d: int) -> None:
        strings, hits = self.trie.strings, self.hits
        # Every child is tried from the same state: resolve the frame's step function once
        # (the usual single-stack case) instead of dispatching per byte.
        if len(state) == 1:
            stack = state[0]
            top = stack[-1]
            fn = STEP[top[0]]
        for b, clo, chi in self.trie.children(lo, hi, d):
            nxt = fn(stack, top, b) if len(state) == 1 else step_all(state, b)
            if not nxt:
                continue
            d1 = d + 1
            if chi - clo == 1:  # a single string below: just run its remaining bytes
                s = strings[clo]
                if len(s) == d1 or run(nxt, s[d1:]):
                    hits.append(clo)
                continue
            if self.bulk and chi - clo >= _BULK_MIN:
                fs = _free_string(nxt)
                if fs is not None:
                    self.bulk_range(nxt, clo, chi, d1, fs[1] - fs[0])
                    continue
            if len(strings[clo]) == d1:
                hits.append(clo)
            self.walk(nxt, clo, chi, d1)

    def bulk_range(self, state: State, lo: int, hi: int, d: int, room: int) -> None:
        """Strings[lo:hi] share a d-byte prefix after which the output is inside a free
        string: the ones whose rest is plain text that fits are accepted at once; the rest
        (a special byte after the prefix, or not whole UTF-8) are run one by one."""
        t = self.table
        lse, valid = t.lse[lo:hi], t.valid[lo:hi]
        ok = (lse <= d) & valid
        if room < t.max_nchars:
            ok &= t.nchars[lo:hi] - _chars(self.trie.strings[lo][:d]) <= room
        self.arrays.append(np.flatnonzero(ok) + lo)
        strings = self.trie.strings
        for i in np.flatnonzero((lse > d) | ~valid).tolist():
            if run(state, strings[lo + i][d:]):
                self.hits.append(lo + i)


def walk_mask(table: TokenTable, state: State) -> np.ndarray:
    """Indices (u) of every string that keeps `state` valid, by walking the token trie."""
    w = _Walk(table, table.trie, bulk=True)
    w.walk(state, 0, table.n_u, 0)
    return w.result()


def _suffix_hits(table: TokenTable, state: State) -> np.ndarray:
    """bool over suffixes: which keep `state` (a string right after a plain prefix) valid."""
    w = _Walk(table, table.sfx_trie, bulk=False)
    w.walk(state, 0, table.n_sfx, 0)
    out = np.zeros(table.n_sfx, dtype=bool)
    out[w.result()] = True
    return out


def string_mask(table: TokenTable, state: State, memo: LRU) -> np.ndarray:
    """bool over token ids for a state whose single stack is inside a free string (lexer
    0..7); end-of-sequence ids are left False."""
    stack = state[0]
    f = stack[-1]
    tkey = f[0] == K_TKEY
    mx, n, lex = (f[2], f[3], f[4]) if tkey else (f[1], f[3], f[4])
    mn = 0 if tkey else f[2]
    room = mx - n
    m = table.base_mask(lex).copy()
    if room < table.max_nchars:
        m &= table.nchars_tok <= room
    if lex == 0 and len(table.sp_u):
        parent = stack[:-1]
        cap = table.sfx_max_len + 1
        groups: list[tuple[int, np.ndarray | None]] = list(table.sp_groups)
        if n >= mn and n + groups[-1][0] + cap <= mx:
            # Far from both length bounds for every prefix length: one walk decides all.
            groups = [(0, None)]
        ok = np.zeros(len(table.sp_u), dtype=bool)
        for c, idx in groups:
            if c > room:
                break
            nn = n + c
            # The suffix walk only sees the count through these two clamped numbers (a suffix
            # is shorter than `cap`), so states equal in them share one walk.
            deficit, left = min(max(mn - nn, 0), cap), min(mx - nn, cap)
            if tkey:
                frame: tuple[Any, ...] = (K_TKEY, f[1], mx, nn, 0, None)
            else:
                frame = (K_STR, mx, mn, nn, 0)
            key = (parent, frame[:3], deficit, left)
            hits = memo.get_or(key, lambda fr=frame: _suffix_hits(table, (parent + (fr,),)))
            if idx is None:
                ok = hits[table.sp_sfx]
            else:
                ok[idx] = hits[table.sp_sfx[idx]]
        if tkey:
            _retry_named_keys(table, state, f[5], ok)
        table.set_strings(m, table.sp_u[ok])
    odd = [u for u in table.odd_special.tolist() if run(state, table.strings[u])]
    if odd:
        table.set_strings(m, np.array(odd, dtype=np.int64))
    return m


def _retry_named_keys(table: TokenTable, state: State, text: bytes, ok: np.ndarray) -> None:
    """The suffix walk treated the key as "not a listed property". Tokens whose plain prefix
    could still complete a listed name are decided exactly, token by token."""
    on = state[0][-1][1]
    typed = json.loads(b'"' + text + b'"')
    for name in on.index:
        if not name.startswith(typed):
            continue
        rest = name[len(typed) :].encode()
        for i in range(len(rest) + 1):
            for k in table.sp_by_prefix.get(rest[:i], ()):
                ok[k] = bool(run(state, table.strings[int(table.sp_u[k])]))
