"""Drafting for speculative decoding: tokens proposed cheaply, checked by the model in one pass.

A `Drafter` proposes, for the decoding sequences of a pass, tokens that may follow each one's
last sampled token; `Speculator` (speculation.py) asks it, has the drafts evaluated and checks
them exactly. Two drafters implement the protocol: `PromptLookups` here, and the draft model
(draft_model.py). Each sequence's `DraftPace` says how many tokens it drafts next. Nothing
about the output depends on the drafts: a good draft only saves passes.

`PromptLookup` drafts from the sequence's own context: the longest recent n-gram (3 tokens
down to 1) that ends the context and occurred before proposes what followed it there. That
pays where the output repeats its input (edits of code or text, summaries that quote,
structured output) and costs nothing where no n-gram matches.

The draft length adapts (`DraftPace.checked`): it doubles while every drafted token is
accepted and falls back to one past the accepted ones otherwise. Drafting backs off when it
does not pay: after `_MISSES` checks in a row that accepted nothing (or, where waiting for
the sampled token costs the loop its pipelining, passes with nothing to draft), it pauses for
`_FIRST_PAUSE` sampled tokens, twice as many each time it misses again (up to `_MAX_PAUSE`),
and from the first pause again after a check that accepts. A sequence whose drafts are never
accepted so checks twice in a row about 1 + log2(N / 8 + 1) times in N tokens, drafting 4
tokens the first time and 1 each time after: at most 11 drafted tokens in 128. Whether drafting pays
with as many sequences as a pass has is the runner's measure (`DraftCost`, draft_cost.py).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

__all__ = [
    "DraftAsk",
    "Drafter",
    "DraftPace",
    "PromptLookup",
    "PromptLookups",
    "MAX_DRAFT",
]

# Drafted tokens per pass (16 rows with the sampled one). Where drafts are accepted they are
# accepted in long runs, and a 16-row pass of quantized weights costs little more than an
# 8-row one: bench/speculative.py on gemma3 270M, 2 threads, edit workload: 2.15x decoding
# without speculation at 7 drafts growing by 2, 2.2-2.3x at 15, 2.5x at 15 doubling.
MAX_DRAFT = 15
_NGRAM_MAX = 3
_FIRST_LENGTH = 4  # tokens drafted the first time
_MISSES = 2  # checks in a row that accepted nothing before drafting pauses
_FIRST_PAUSE = 8  # sampled tokens drafting pauses for after a miss (doubling)
_MAX_PAUSE = 1024


class PromptLookup:
    """An index of a token sequence's n-grams (1 to `_NGRAM_MAX` tokens): for each, where it
    last ended. `propose(k)` drafts the tokens that followed the latest earlier occurrence of
    the longest n-gram ending the sequence."""

    def __init__(self, tokens: Iterable[int] = ()) -> None:
        self.tokens: list[int] = []
        # n-gram -> the index just past its latest occurrence, not counting the sequence's end
        self._seen: dict[tuple[int, ...], int] = {}
        for t in tokens:
            self.append(t)

    def append(self, token: int) -> None:
        """Add the sequence's next token (an image placeholder, negative, breaks n-grams)."""
        toks = self.tokens
        end = len(toks)
        # The n-grams ending at the old end now have a continuation: index them.
        for n in range(1, _NGRAM_MAX + 1):
            if end < n:
                break
            gram = tuple(toks[end - n : end])
            if min(gram) < 0:
                break
            self._seen[gram] = end
        toks.append(token)

    def propose(self, k: int) -> list[int]:
        """Up to `k` tokens that followed the longest n-gram ending the sequence where it
        last occurred before; [] when none occurred."""
        toks = self.tokens
        if k <= 0:
            return []
        for n in range(min(_NGRAM_MAX, len(toks)), 0, -1):
            gram = tuple(toks[-n:])
            at = self._seen.get(gram)
            if at is not None:
                draft = toks[at : at + k]
                cut = next((i for i, t in enumerate(draft) if t < 0), len(draft))
                if cut:
                    return draft[:cut]
        return []


@dataclass
class DraftAsk:
    """One sequence's request for drafts in the pass being composed."""

    held: list[int]  # what its slot's cache holds (the slot's tokens; read, never changed)
    token: int  # the token just sampled, evaluated with the drafts
    limit: int  # the most tokens it may draft (the context's room, the tokens left to it)
    k: int  # how many its pace wants now (0 to `limit`; 0 while paused)

    @property
    def context(self) -> list[int]:
        """Everything the drafts follow: the slot's tokens and the one just sampled."""
        return [*self.held, self.token]


class Drafter(Protocol):
    """What proposes drafts, by slot id (a sequence holds its slot from `begin` to its end).
    `propose` returns at most `ask.k` tokens for a slot, or none (the slot missing, or
    empty); drafts are checked exactly, so a poor drafter only costs time."""

    name: str  # what the runner's `/info` says drafts ("prompt lookup", "draft model")

    def begin(self, slot: int, prompt: Sequence[int]) -> None:
        """A drafting sequence with `prompt` starts in `slot`."""

    def added(self, slot: int, token: int) -> None:
        """The sequence in `slot` sampled (or accepted) its next token."""

    def propose(self, asks: Mapping[int, DraftAsk]) -> dict[int, list[int]]:
        """Drafts for the sequences of one pass: slot id -> ask."""

    def close(self) -> None:
        """Free what the drafter loaded."""


class PromptLookups:
    """The `Drafter` that drafts by prompt lookup: one `PromptLookup` per drafting slot,
    over the sequence's prompt and every token it added."""

    name = "prompt lookup"

    def __init__(self) -> None:
        self.lookups: dict[int, PromptLookup] = {}

    def begin(self, slot: int, prompt: Sequence[int]) -> None:
        self.lookups[slot] = PromptLookup(prompt)

    def added(self, slot: int, token: int) -> None:
        self.lookups[slot].append(token)

    def propose(self, asks: Mapping[int, DraftAsk]) -> dict[int, list[int]]:
        return {slot: self.lookups[slot].propose(ask.k) for slot, ask in asks.items()}

    def close(self) -> None:
        self.lookups.clear()


class DraftPace:
    """One drafting sequence's adaptive draft length and pause (module docstring)."""

    def __init__(self, max_draft: int = MAX_DRAFT, costly_wait: bool = False) -> None:
        """`costly_wait`: waiting for the sampled token to draft costs the loop its pipelining
        (loop.py), so a pass with nothing to draft counts as a miss too."""
        self.costly_wait = costly_wait
        self.max_draft = max_draft
        self.length = min(_FIRST_LENGTH, max_draft)  # tokens to draft next time
        self.paused = 0  # sampled tokens left before drafting again
        self._pause = _FIRST_PAUSE
        self._misses = 0

    @property
    def active(self) -> bool:
        """Whether the next pass may draft (the loop then waits for the sampled token rather
        than planning it as a pipelined placeholder)."""
        return self.paused == 0

    def added(self) -> None:
        """The sequence sampled (or accepted) its next token."""
        if self.paused:
            self.paused -= 1

    def wanted(self, limit: int) -> int:
        """How many tokens to draft now, at most `limit`: 0 while paused."""
        return min(self.length, limit) if self.active else 0

    def nothing_drafted(self) -> None:
        """A pass that could have drafted had nothing to draft."""
        if self.costly_wait:
            self._missed()

    def checked(self, drafted: int, accepted: int) -> None:
        """A pass checked `drafted` tokens and `accepted` of them were the samples."""
        if accepted == drafted:
            self.length = min(self.max_draft, 2 * self.length)
        else:
            self.length = max(1, min(self.max_draft, accepted + 1))
        if accepted:
            self._misses = 0
            self._pause = _FIRST_PAUSE
        else:
            self._missed()

    def _missed(self) -> None:
        self._misses += 1
        if self._misses >= _MISSES:
            self._misses = 0
            self.paused = self._pause
            self._pause = min(_MAX_PAUSE, 2 * self._pause)
