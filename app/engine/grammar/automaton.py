"""A byte-level pushdown automaton for JSON documents that match a compiled schema.

A *stack* is a tuple of frames (innermost last); a frame is a small tuple whose first item is
its kind. Everything is immutable, so a state can be shared, copied for free, hashed (mask
caches are keyed by state) and advanced speculatively while walking the token trie. A *state*
is a tuple of stacks: several only while `anyOf` alternatives are all still possible.

`step(stack, byte)` returns the stacks that can follow (none: the byte is rejected). A value
that has no closing delimiter (a number, a literal like `12`) ends when a byte that cannot
continue it arrives; that byte is then fed to the enclosing frame.

Frames:
    (K_ROOT, node, phase, ws, limits)          phase 0: before the value, 1: done
    (K_OBJ, objnode, phase, ws, seen, prop)    seen: bit mask of written properties
    (K_ARR, arrnode, phase, ws, count)
    (K_STR, max_chars, min_chars, chars, lex)  a string value or a free-form key
    (K_TKEY, objnode, max_chars, chars, lex, text)  a key whose text decides its schema
    (K_CKEY, objnode, trie_node)               a key of a closed object (names only)
    (K_NUM, integer, phase, chars, cap)
    (K_LIT, litnode, trie_node)                enum / const / true / false / null
"""

from __future__ import annotations

import json
from typing import Any

from .nodes import N_ANY, N_ARR, N_LIT, N_NUM, N_OBJ, N_REF, N_STR, Limits, Node

K_ROOT, K_OBJ, K_ARR, K_STR, K_TKEY, K_CKEY, K_NUM, K_LIT = range(8)
OS_START, OS_KEY, OS_COLON, OS_VALUE, OS_AFTER = range(5)  # object phases
AS_START, AS_VALUE, AS_AFTER = range(3)  # array phases
P_SIGN, P_ZERO, P_INT, P_DOT, P_FRAC, P_E, P_ESIGN, P_EXP = range(8)  # number phases
_NUM_END = (False, True, True, False, True, False, False, True)  # phases a number may stop in
LEX_ESC = 8  # string lexer: 0 plain, 1..7 inside a UTF-8 sequence, 8.. escapes

Frame = tuple[Any, ...]
Stack = tuple[Frame, ...]
State = tuple[Stack, ...]

_WS = frozenset(b" \t\n")
_HEX = frozenset(b"0123456789abcdefABCDEF")


def _lexer_tables() -> tuple[list[int], list[list[int]]]:
    """UTF-8 lead-byte table (plain state -> state after the byte) and the next-state table
    for every other lexer state. Strict UTF-8: no overlongs, no surrogates, <= U+10FFFF."""
    lead = [-1] * 256
    for b in range(0xC2, 0xE0):
        lead[b] = 1
    for b in range(0xE1, 0xF0):
        lead[b] = 2
    lead[0xE0], lead[0xED], lead[0xF0], lead[0xF4] = 4, 5, 6, 7
    for b in (0xF1, 0xF2, 0xF3):
        lead[b] = 3
    table = [[-1] * 256 for _ in range(14)]
    ranges = {1: (0x80, 0xBF, 0), 2: (0x80, 0xBF, 1), 3: (0x80, 0xBF, 2), 4: (0xA0, 0xBF, 1)}
    ranges.update({5: (0x80, 0x9F, 1), 6: (0x90, 0xBF, 2), 7: (0x80, 0x8F, 2)})
    for state, (lo, hi, nxt) in ranges.items():
        for b in range(lo, hi + 1):
            table[state][b] = nxt
    for b in b'"\\/bfnrt':
        table[LEX_ESC][b] = 0
    table[LEX_ESC][ord("u")] = 9
    for b in _HEX:
        # \uXXXX: 9 first digit, 10/11 second (11: after 'd', so not a surrogate D800-DFFF),
        # 12 third, 13 fourth. Refusing surrogates keeps escapes == code points.
        table[9][b] = 11 if b in b"dD" else 10
        table[10][b], table[12][b], table[13][b] = 12, 13, 0
        if b in b"01234567":
            table[11][b] = 12
    return lead, table


_LEAD, _LEX = _lexer_tables()


def initial_state(root: Node, lim: Limits) -> State:
    """The state before any output."""
    return (((K_ROOT, root, 0, 0, lim),),)


def _ws(ws: int, b: int, lim: Limits) -> int:
    """Whitespace run counter (newlines << 8 | spaces) after `b`, or -1 when over the limit."""
    if b == 10:
        return ws + 256 if ws >> 8 < lim.max_ws_newlines else -1
    return ws + 1 if ws & 255 < lim.max_ws_spaces else -1


def start_value(node: Node, b: int, base: Stack) -> tuple[Stack, ...]:
    """The stacks after `b`, the first byte of a value of `node`, on top of `base`."""
    k = node.kind
    while k == N_REF:
        node = node.target  # type: ignore[attr-defined]
        k = node.kind
    if k == N_ANY:
        if b == 0x22:
            node = node.str  # type: ignore[attr-defined]
        elif b == 0x7B:
            node = node.obj  # type: ignore[attr-defined]
        elif b == 0x5B:
            node = node.arr  # type: ignore[attr-defined]
        elif b == 0x2D or 0x30 <= b <= 0x39:
            node = node.num  # type: ignore[attr-defined]
        else:
            node = node.kw  # type: ignore[attr-defined]
        k = node.kind
    if k == N_STR:
        if b != 0x22:
            return ()
        return (base + ((K_STR, node.max, node.min, 0, 0),),)  # type: ignore[attr-defined]
    if k == N_OBJ:
        if b != 0x7B or (node.capped and len(base) >= node.lim.max_depth):  # type: ignore[attr-defined]
            return ()
        return (base + ((K_OBJ, node, OS_START, 0, 0, -1),),)
    if k == N_ARR:
        if b != 0x5B or (node.capped and len(base) >= node.lim.max_depth):  # type: ignore[attr-defined]
            return ()
        return (base + ((K_ARR, node, AS_START, 0, 0),),)
    if k == N_NUM:
        integer, cap = node.integer, node.cap  # type: ignore[attr-defined]
        if b == 0x2D:
            return (base + ((K_NUM, integer, P_SIGN, 1, cap),),)
        if 0x30 <= b <= 0x39:
            return (base + ((K_NUM, integer, P_ZERO if b == 0x30 else P_INT, 1, cap),),)
        return ()
    if k == N_LIT:
        j = node.next[0].get(b)  # type: ignore[attr-defined]
        if j is None:
            return ()
        if node.term[j] and not node.next[j]:  # type: ignore[attr-defined]
            return (base,)
        return (base + ((K_LIT, node, j),),)
    out: list[Stack] = []
    for alt in node.alts:  # type: ignore[attr-defined]
        out.extend(start_value(alt, b, base))
    return tuple(dict.fromkeys(out))


def _root(stack: Stack, f: Frame, b: int) -> tuple[Stack, ...]:
    _, node, phase, ws, lim = f
    if phase:
        return ()
    if b in _WS:
        ws = _ws(ws, b, lim)
        return (stack[:-1] + ((K_ROOT, node, 0, ws, lim),),) if ws >= 0 else ()
    return start_value(node, b, stack[:-1] + ((K_ROOT, node, 1, 0, lim),))


def _obj(stack: Stack, f: Frame, b: int) -> tuple[Stack, ...]:
    _, on, ph, ws, seen, prop = f
    if b in _WS:
        ws = _ws(ws, b, on.lim)
        return (stack[:-1] + ((K_OBJ, on, ph, ws, seen, prop),),) if ws >= 0 else ()
    if ph == OS_VALUE:
        node = on.props[prop][1] if prop >= 0 else on.additional
        return start_value(node, b, stack[:-1] + ((K_OBJ, on, OS_AFTER, 0, seen, -1),))
    if ph == OS_COLON:
        return (stack[:-1] + ((K_OBJ, on, OS_VALUE, 0, seen, prop),),) if b == 0x3A else ()
    if b == 0x7D:  # '}' once every required property is there
        if ph == OS_KEY or on.req & ~seen:
            return ()
        return (stack[:-1],)
    if ph == OS_AFTER:
        if b != 0x2C or (on.closed and not on.all & ~seen):
            return ()  # no ',' when a closed object has nothing left to add
        return (stack[:-1] + ((K_OBJ, on, OS_KEY, 0, seen, -1),),)
    if b != 0x22:
        return ()
    parent = stack[:-1] + ((K_OBJ, on, OS_COLON, 0, seen, -1),)
    if on.free:
        return (parent + ((K_STR, on.lim.max_key_chars, 0, 0, 0),),)
    if on.closed:
        return (parent + ((K_CKEY, on, 0),),) if on.all & ~seen else ()
    # Longer than every property name, so a key at the cap can always close as "additional".
    cap = max(on.lim.max_key_chars, on.longest + 1)
    return (parent + ((K_TKEY, on, cap, 0, 0, b""),),)


def _arr(stack: Stack, f: Frame, b: int) -> tuple[Stack, ...]:
    _, an, ph, ws, n = f
    if b in _WS:
        ws = _ws(ws, b, an.lim)
        return (stack[:-1] + ((K_ARR, an, ph, ws, n),),) if ws >= 0 else ()
    if ph == AS_AFTER:
        if b == 0x2C:
            ok = an.max is None or n < an.max
            return (stack[:-1] + ((K_ARR, an, AS_VALUE, 0, n),),) if ok else ()
        return (stack[:-1],) if b == 0x5D and n >= an.min else ()
    if b == 0x5D and ph == AS_START and an.min == 0:
        return (stack[:-1],)
    if an.max is not None and n >= an.max:
        return ()
    after = (K_ARR, an, AS_AFTER, 0, n + 1 if an.counted else 0)
    return start_value(an.items, b, stack[:-1] + (after,))


def _str(stack: Stack, f: Frame, b: int) -> tuple[Stack, ...]:
    _, mx, mn, n, lex = f
    if lex:
        lex = _LEX[lex][b]
        return (stack[:-1] + ((K_STR, mx, mn, n, lex),),) if lex >= 0 else ()
    if b == 0x22:
        return (stack[:-1],) if n >= mn else ()
    if n >= mx or b < 0x20:
        return ()
    lex = (LEX_ESC if b == 0x5C else 0) if b < 0x80 else _LEAD[b]
    return (stack[:-1] + ((K_STR, mx, mn, n + 1, lex),),) if lex >= 0 else ()


def _tkey(stack: Stack, f: Frame, b: int) -> tuple[Stack, ...]:
    """A key that may be a listed property or an additional one. `text` None stands for "not
    a listed property, whatever follows" (used by mask computation to share work)."""
    _, on, mx, n, lex, text = f
    if lex:
        lex = _LEX[lex][b]
    elif b == 0x22:
        prop = -1 if text is None else on.index.get(json.loads(b'"' + text + b'"'), -1)
        seen = stack[-2][4]
        if prop >= 0:
            if seen >> prop & 1:
                return ()  # a duplicate of a listed key
            seen |= 1 << prop
        return (stack[:-2] + ((K_OBJ, on, OS_COLON, 0, seen, prop),),)
    elif n >= mx or b < 0x20:
        return ()
    else:
        n += 1
        lex = (LEX_ESC if b == 0x5C else 0) if b < 0x80 else _LEAD[b]
    if lex < 0:
        return ()
    if text is not None:
        text += bytes((b,))
    return (stack[:-1] + ((K_TKEY, on, mx, n, lex, text),),)


def _ckey(stack: Stack, f: Frame, b: int) -> tuple[Stack, ...]:
    _, on, t = f
    seen = stack[-2][4]
    if b == 0x22:
        prop = on.kterm[t]
        if prop < 0 or seen >> prop & 1:
            return ()
        return (stack[:-2] + ((K_OBJ, on, OS_COLON, 0, seen | 1 << prop, prop),),)
    t = on.knext[t].get(b)
    if t is None or not on.ksub[t] & ~seen:
        return ()  # not a prefix of a property name that is still unwritten
    return (stack[:-1] + ((K_CKEY, on, t),),)


def _num(stack: Stack, f: Frame, b: int) -> tuple[Stack, ...]:
    # A character that needs a digit after it ('-', '.', 'e', '+') is only taken when there
    # is room for that digit under the cap, so a number can always be finished.
    _, integer, ph, n, cap = f
    nph = -1
    if 0x30 <= b <= 0x39:
        if ph != P_ZERO and n < cap:
            nph = (P_ZERO if b == 0x30 else P_INT, 0, P_INT, P_FRAC, P_FRAC, P_EXP, P_EXP, P_EXP)[
                ph
            ]
    elif integer or n + 2 > cap:
        pass
    elif b == 0x2E:
        nph = P_DOT if ph in (P_ZERO, P_INT) else -1
    elif b in (0x65, 0x45):
        nph = P_E if ph in (P_ZERO, P_INT, P_FRAC) else -1
    elif b in (0x2B, 0x2D):
        nph = P_ESIGN if ph == P_E else -1
    if nph >= 0:
        return (stack[:-1] + ((K_NUM, integer, nph, n + 1, cap),),)
    return step(stack[:-1], b) if _NUM_END[ph] else ()


def _lit(stack: Stack, f: Frame, b: int) -> tuple[Stack, ...]:
    _, ln, t = f
    j = ln.next[t].get(b)
    if j is not None:
        if ln.term[j] and not ln.next[j]:
            return (stack[:-1],)
        return (stack[:-1] + ((K_LIT, ln, j),),)
    return step(stack[:-1], b) if ln.term[t] else ()


STEP = (_root, _obj, _arr, _str, _tkey, _ckey, _num, _lit)  # by frame kind


def step(stack: Stack, b: int) -> tuple[Stack, ...]:
    """The stacks that follow `stack` after byte `b` (empty: rejected)."""
    f = stack[-1]
    return STEP[f[0]](stack, f, b)


def step_all(state: State, b: int) -> State:
    """`step` for every alternative stack of a state."""
    if len(state) == 1:
        s = state[0]
        f = s[-1]
        return STEP[f[0]](s, f, b)
    out: list[Stack] = []
    for s in state:
        out.extend(step(s, b))
    return tuple(dict.fromkeys(out))


def run(state: State, data: bytes) -> State:
    """The state after all of `data` (empty as soon as a byte is rejected)."""
    for b in data:
        state = step_all(state, b)
        if not state:
            break
    return state


def can_end(state: State) -> bool:
    """True when the output so far is a whole document (end-of-sequence may follow)."""
    for s in state:
        f = s[-1]
        if f[0] == K_ROOT:
            if f[2] == 1:
                return True
        elif len(s) == 2 and (
            (f[0] == K_NUM and _NUM_END[f[2]]) or (f[0] == K_LIT and f[1].term[f[2]])
        ):
            return True
    return False


def is_done(state: State) -> bool:
    """True when the document is finished and nothing but end-of-sequence may follow."""
    return all(s[-1][0] == K_ROOT and s[-1][2] == 1 for s in state)
