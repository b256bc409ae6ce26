"""Drafting for speculative decoding: tokens proposed cheaply, checked by the model in one pass.

The loop (loop.py) asks a sequence's `Drafter` for a few tokens that may follow its last
sampled one, evaluates that token and the drafted ones together (each row computed as a lone
decoding row is: `PassInput.lone_rows`, so each row's logits have exactly the bits of decoding
one token at a time), and then samples position by position as decoding would, accepting a
drafted token while it equals the sample. Nothing about the output depends on the drafts:
the sampler draws once per position actually sampled, penalties, grammar and stop strings
see only the accepted tokens, and the first sample that differs from the draft is the next
token, as it would have been. A good draft only saves passes.

`PromptLookup` drafts from the sequence's own context: the longest recent n-gram (3 tokens
down to 1) that ends the context and occurred before proposes what followed it there. That
pays where the output repeats its input (edits of code or text, summaries that quote,
structured output) and costs nothing where no n-gram matches.

The draft length adapts (`Drafter.checked`): it doubles while every drafted token is
accepted and falls back to one past the accepted ones otherwise. Drafting pauses when it does
not pay: after `_MISSES` checks in a row that accepted nothing (or, where waiting for the
sampled token costs the loop its pipelining, passes with nothing to draft), for a pause (in
sampled tokens) that doubles each time up to `_MAX_PAUSE` and resets after a check that
accepts.
"""

from __future__ import annotations

from collections.abc import Iterable

__all__ = ["Drafter", "PromptLookup", "MAX_DRAFT"]

# Drafted tokens per pass (16 rows with the sampled one). Where drafts are accepted they are
# accepted in long runs, and a 16-row pass of quantized weights costs little more than an
# 8-row one: bench/speculative.py on gemma3 270M, 2 threads, edit workload: 2.15x decoding
# without speculation at 7 drafts growing by 2, 2.2-2.3x at 15, 2.5x at 15 doubling.
MAX_DRAFT = 15
_NGRAM_MAX = 3
_MISSES = 3  # checks in a row that accepted nothing before drafting pauses
_FIRST_PAUSE = 8
_MAX_PAUSE = 128


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


class Drafter:
    """One sequence's drafting: its prompt lookup and the adaptive length and pause (module
    docstring). `context` is the sequence's prompt; `added()` extends it with each token
    the sequence accepts."""

    def __init__(
        self, context: Iterable[int], max_draft: int = MAX_DRAFT, costly_wait: bool = False
    ) -> None:
        """`costly_wait`: waiting for the sampled token to draft costs the loop its pipelining
        (loop.py), so a pass with nothing to draft counts as a miss too."""
        self.lookup = PromptLookup(context)
        self.costly_wait = costly_wait
        self.max_draft = max_draft
        self.length = min(4, max_draft)  # tokens to draft next time
        self.paused = 0  # sampled tokens left before drafting again
        self._pause = _FIRST_PAUSE
        self._misses = 0

    @property
    def active(self) -> bool:
        """Whether the next pass may draft (the loop then waits for the sampled token rather
        than planning it as a pipelined placeholder)."""
        return self.paused == 0

    def added(self, token: int) -> None:
        """The sequence's next token (sampled or accepted)."""
        self.lookup.append(token)
        if self.paused:
            self.paused -= 1

    def wanted(self, limit: int) -> int:
        """How many tokens to draft now, at most `limit`: 0 while paused."""
        return min(self.length, limit) if self.active else 0

    def propose(self, limit: int) -> list[int]:
        """Prompt lookup's tokens to check after the last one added, at most `limit`; []
        while paused."""
        k = self.wanted(limit)
        draft = self.lookup.propose(k)
        if not draft and k > 0:
            self.nothing_drafted()
        return draft

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
            self.paused = self._pause
            self._pause = min(_MAX_PAUSE, 2 * self._pause)
            self._misses = 0
