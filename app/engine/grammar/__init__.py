"""Grammar-constrained sampling for structured JSON output.

`TokenTable.from_tokenizer(tok)` once per model; `JsonConstraint(table, schema)` per generation.
The sampler samples a token as usual, keeps it if `constraint.accepts(tok)` (the fast path),
otherwise sets `logits[~constraint.mask()] = -inf` and samples again; then
`constraint.advance(tok)`. When `constraint.complete` the runner ends the sequence.
`constraint.reader()` follows the *streamed text* with the same grammar, so the runner can tell
where that text is a whole document (a stop string may only end the output there).

Output is checked byte by byte by a pushdown automaton (`automaton.py`) built from the schema
(`schema.py` documents the supported subset), so whatever the model does, the text is always
a prefix of a document that parses and validates, and end-of-sequence is only allowed once the
document is whole. Strings, numbers, whitespace runs and nesting are bounded (`Limits`) so a
generation cannot run forever inside one value.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .automaton import K_STR, K_TKEY, State, can_end, initial_state, is_done, run
from .masking import LRU, string_mask, walk_mask
from .nodes import Limits
from .schema import compile_schema, schema_from_format
from .vocab import TokenTable

__all__ = ["DocumentReader", "JsonConstraint", "Limits", "TokenTable", "schema_from_format"]


class DocumentReader:
    """Follows a text with a constraint's grammar to tell where it is a whole document.

    The runner reads the text it streams, not the constraint's bytes: the detokenizer may have
    tidied that text (a leading space dropped, spaces cleaned up), and the client parses what
    it was sent. A text that leaves the grammar is never whole again.
    """

    def __init__(self, state: State) -> None:
        self._state = state

    def whole_at(self, text: str) -> list[int]:
        """Every offset p (0..len(text), ascending) at which what was fed plus `text[:p]` is a
        whole document. The reader does not move."""
        state = self._state
        out: list[int] = []
        for i, ch in enumerate(text):
            if not state:
                return out
            if can_end(state):
                out.append(i)
            state = run(state, ch.encode())
        if can_end(state):
            out.append(len(text))
        return out

    def feed(self, text: str) -> None:
        if self._state:
            self._state = run(self._state, text.encode())


class JsonConstraint:
    """The state of one generation constrained to JSON (schema=None: any JSON object).

    Not thread-safe (one per sequence); the `TokenTable` it reads is shared.
    """

    def __init__(
        self, table: TokenTable, schema: dict[str, Any] | None = None, limits: Limits | None = None
    ) -> None:
        """Raises `ValueError` naming the problem for an unsupported or invalid schema."""
        self.table = table
        self.limits = limits or Limits()
        self._start = initial_state(compile_schema(schema, self.limits), self.limits)
        self._state = self._start
        self._eos = frozenset(table.eos_ids.tolist())
        self._out = bytearray()
        self._ended = False  # an end-of-sequence token was advanced
        self._walks = LRU(256)  # state -> accepted u (trie walks)
        self._suffixes = LRU(256)  # reduced string state -> accepted suffixes

    # -- the sampler's interface --------------------------------------------------------------

    def accepts(self, token_id: int) -> bool:
        """Would appending `token_id` keep the output valid? (microseconds)"""
        if self._ended:
            return False
        if token_id in self._eos:
            return can_end(self._state)
        t = self.table
        if not 0 <= token_id < t.vocab_size:
            return False
        u = t.token_u_list[token_id]
        if u == t.n_u:
            return False
        fast = self._plain_chars(u)
        if fast is not None:
            return fast >= 0
        return bool(run(self._state, t.strings[u]))

    def advance(self, token_id: int) -> None:
        """Commit `token_id`; raises `ValueError` if it was not acceptable."""
        if not self.accepts(token_id):
            raise ValueError(f"token {token_id} is not allowed here (output so far: {self.text!r})")
        if token_id in self._eos:
            self._ended = True
            return
        t = self.table
        u = t.token_u_list[token_id]
        n = self._plain_chars(u)
        if n is not None:  # plain text inside a string: only the character count moves
            s = self._state[0]
            f = s[-1]
            self._state = (s[:-1] + ((K_STR, f[1], f[2], f[3] + n, 0),),)
        else:
            self._state = run(self._state, t.strings[u])
        self._out += t.strings[u]

    def mask(self) -> np.ndarray:
        """bool[vocab_size]: every token that keeps the output valid; end-of-sequence ids only
        once the document is whole. A new array each call (the caller may modify it)."""
        t = self.table
        state = self._state
        if self._ended:
            return np.zeros(t.vocab_size, dtype=bool)
        f = state[0][-1]
        if len(state) == 1 and f[0] in (K_STR, K_TKEY) and f[4] < 8:
            out = string_mask(t, state, self._suffixes)
        else:
            idx = self._walks.get_or(state, lambda: walk_mask(t, state))
            out = np.zeros(t.vocab_size, dtype=bool)
            t.set_strings(out, idx)
        if can_end(state):
            out[t.eos_ids] = True
        return out

    @property
    def complete(self) -> bool:
        """A whole document has been produced and nothing but end-of-sequence may follow.
        (A top-level number is never `complete` by itself: end-of-sequence, allowed by
        `mask()` as soon as the number is whole, ends it.)"""
        return self._ended or is_done(self._state)

    @property
    def can_end(self) -> bool:
        """The output so far is a whole document (end-of-sequence is allowed)."""
        return not self._ended and can_end(self._state)

    def reader(self) -> DocumentReader:
        """A reader of output text from its start, with this constraint's schema and limits."""
        return DocumentReader(self._start)

    @property
    def text(self) -> str:
        """What was generated so far (an unfinished UTF-8 character at the end is left out)."""
        return self._out.decode("utf-8", "ignore")

    # -- helpers -------------------------------------------------------------------------------

    def _plain_chars(self, u: int) -> int | None:
        """For plain text inside a free string value: its character count, or -1 when it would
        pass the length limit. None when the fast path does not apply."""
        state = self._state
        if len(state) != 1:
            return None
        f = state[0][-1]
        t = self.table
        if f[0] != K_STR or f[4] or not t.plain_valid_list[u]:
            return None
        n = t.nchars_list[u]
        return n if f[3] + n <= f[1] else -1
