"""Grammar nodes: a JSON Schema compiled for the automaton, plus the generation limits."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

__all__ = ["Limits", "Node"]

N_ANY, N_OBJ, N_ARR, N_STR, N_NUM, N_LIT, N_UNION, N_REF = range(8)


@dataclass(frozen=True)
class Limits:
    """Bounds that make every constrained generation terminate (all configurable).

    Whitespace between tokens is limited to one run of at most `max_ws_newlines` newlines and
    `max_ws_spaces` spaces/tabs, so a model cannot loop on whitespace.
    """

    max_string_chars: int = 2048  # strings without maxLength
    max_key_chars: int = 256  # free-form object keys
    max_number_chars: int = 32
    max_ws_spaces: int = 20
    max_ws_newlines: int = 1
    max_depth: int = 32  # nesting of objects/arrays

    def __post_init__(self) -> None:
        if self.max_number_chars < 3 or self.max_string_chars < 1 or self.max_key_chars < 1:
            raise ValueError("grammar limits are too small to write a value")
        if self.max_depth < 2:
            raise ValueError("max_depth must allow at least one container")


class Node:
    """A compiled schema node; compared by identity (states hold references to nodes)."""

    __slots__ = ("kind",)
    kind: int


class AnyNode(Node):
    """Any JSON value. `obj`/`arr`/... are the free containers and scalars it dispatches to."""

    __slots__ = ("obj", "arr", "str", "num", "kw")

    def __init__(self, lim: Limits) -> None:
        self.kind = N_ANY
        # Only these free containers obey max_depth: a scalar is always possible instead, so
        # the cap can never leave the output without a way to continue.
        self.obj = ObjNode((), 0, self, lim, capped=True)
        self.arr = ArrNode(self, 0, None, lim, capped=True)
        self.str = StrNode(0, lim.max_string_chars)
        self.num = NumNode(False, lim.max_number_chars)
        self.kw = LitNode([b"true", b"false", b"null"], [True, False, None])


class ObjNode(Node):
    """An object. Key handling: `free` (no properties: keys are not tracked), `closed` (only
    the listed properties, matched through a key trie) or tracked (listed + additional)."""

    __slots__ = (
        "props", "index", "req", "all", "additional", "lim", "free", "closed", "capped",
        "knext", "kterm", "ksub", "longest",
    )  # fmt: skip

    def __init__(self, props: tuple[tuple[str, Node], ...], req: int, additional: Node | None,
                 lim: Limits, capped: bool = False) -> None:  # fmt: skip
        self.kind = N_OBJ
        self.capped = capped
        self.props = props
        self.index = {name: i for i, (name, _) in enumerate(props)}
        self.req, self.all = req, (1 << len(props)) - 1
        self.additional, self.lim = additional, lim
        # closed: only the listed keys; free: no listed keys, so keys need no tracking.
        self.closed = additional is None
        self.free = not props and not self.closed
        # Key trie over the canonical escaped names: next byte -> node, the property a node
        # completes, and the properties below a node (so a key can never lead into a dead end).
        self.knext: list[dict[int, int]] = [{}]
        self.kterm: list[int] = [-1]
        self.ksub: list[int] = [self.all]
        self.longest = 0
        for i, (name, _) in enumerate(props):
            t = 0
            raw = json.dumps(name, ensure_ascii=False)[1:-1].encode()
            self.longest = max(self.longest, len(raw))
            for b in raw:
                nxt = self.knext[t].get(b)
                if nxt is None:
                    nxt = self.knext[t][b] = len(self.knext)
                    self.knext.append({})
                    self.kterm.append(-1)
                    self.ksub.append(0)
                t = nxt
                self.ksub[t] |= 1 << i
            self.kterm[t] = i


class ArrNode(Node):
    __slots__ = ("items", "min", "max", "lim", "counted", "capped")

    def __init__(
        self, items: Node, mn: int, mx: int | None, lim: Limits, capped: bool = False
    ) -> None:
        self.kind = N_ARR
        self.capped = capped
        self.items, self.min, self.max, self.lim = items, mn, mx, lim
        self.counted = mn > 0 or mx is not None  # untracked counts keep states cacheable


class StrNode(Node):
    __slots__ = ("min", "max")

    def __init__(self, mn: int, mx: int) -> None:
        self.kind, self.min, self.max = N_STR, mn, mx


class NumNode(Node):
    __slots__ = ("integer", "cap")

    def __init__(self, integer: bool, cap: int) -> None:
        self.kind, self.integer, self.cap = N_NUM, integer, cap


class LitNode(Node):
    """A fixed set of JSON texts (enum/const/true/false/null) as a byte trie."""

    __slots__ = ("next", "term", "values")

    def __init__(self, texts: list[bytes], values: list[Any]) -> None:
        self.kind, self.values = N_LIT, values
        self.next: list[dict[int, int]] = [{}]
        self.term: list[bool] = [False]
        for text in texts:
            t = 0
            for b in text:
                nxt = self.next[t].get(b)
                if nxt is None:
                    nxt = self.next[t][b] = len(self.next)
                    self.next.append({})
                    self.term.append(False)
                t = nxt
            self.term[t] = True


class UnionNode(Node):
    __slots__ = ("alts",)

    def __init__(self, alts: tuple[Node, ...]) -> None:
        self.kind, self.alts = N_UNION, alts


class RefNode(Node):
    """A `$ref`, filled in after its target compiled (lets schemas recurse)."""

    __slots__ = ("target",)

    def __init__(self) -> None:
        self.kind = N_REF
        self.target: Node | None = None
