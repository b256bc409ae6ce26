"""A draft model: a smaller model with the target's vocabulary, loaded in the same runner,
that drafts tokens for speculative decoding by decoding greedily ahead (a `Drafter`,
drafting.py).

Its KV cache has one sequence per slot of the target's and follows the slot's content: before
drafting, each sequence's cache keeps the longest prefix it shares with the slot's tokens
(plus the token just sampled) and evaluates the rest; tokens the target rejected, a new
request's different prompt or a context shift are thus all a matter of that common prefix
(a sliding-window cache that cannot resume there starts again from the beginning). The
drafts of all sequences are decoded together, one pass per drafted position.

A draft never changes the output (the loop checks it exactly); a poor one only costs time.
It sees text only: a sequence whose context holds an image drafts nothing from it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from ..engine.input import PassInput
from ..engine.kvcache import CacheFullError, ShiftNotSupportedError
from ..engine.prompt_cache import common_prefix
from ..engine.tokenizer import Tokenizer
from .drafting import DraftAsk
from .engine import RunnerEngine

__all__ = ["DraftModel"]


class DraftModel:
    """The draft model's engine and what each of its cache sequences holds (by slot id): the
    `Drafter` (drafting.py) that follows each slot's content rather than each sequence's
    tokens."""

    name = "draft model"

    def __init__(self, engine: RunnerEngine, target: Tokenizer) -> None:
        """ValueError (a sentence) when `engine`'s vocabulary is not `target`'s: a draft
        model needs the same tokens (its size and, sampled, their bytes)."""
        mine = engine.tokenizer
        if mine.vocab_size != target.vocab_size:
            raise ValueError(
                f"the draft model's vocabulary has {mine.vocab_size} tokens but the model's "
                f"has {target.vocab_size}; a draft model needs the same vocabulary"
            )
        step = max(1, target.vocab_size // 997)
        if any(
            mine.token_bytes(i) != target.token_bytes(i) for i in range(0, mine.vocab_size, step)
        ):
            raise ValueError(
                "the draft model's tokens differ from the model's; a draft model needs the "
                "same vocabulary"
            )
        self.engine = engine
        self.held: dict[int, list[int]] = {}  # slot id -> the tokens its cache holds

    def begin(self, slot: int, prompt: Sequence[int]) -> None:
        """Nothing to do: `propose` follows the slot's content."""

    def added(self, slot: int, token: int) -> None:
        """Nothing to do: `propose` follows the slot's content."""

    def propose(self, asks: Mapping[int, DraftAsk]) -> dict[int, list[int]]:
        """Greedy drafts of `ask.k` tokens after each ask's context (the slot's tokens and the
        one just sampled), decoded together; a slot whose context holds an image, or whose
        cache is full, gets none."""
        rows: dict[int, list[int]] = {}  # slot -> inputs its next pass evaluates
        for slot, ask in asks.items():
            if ask.k <= 0:
                continue
            context = ask.context
            if min(context) >= 0:
                try:
                    rows[slot] = self._follow(slot, context)
                except CacheFullError:
                    self._clear(slot)
        drafts: dict[int, list[int]] = {slot: [] for slot in rows}
        limit = {slot: asks[slot].k for slot in rows}
        while rows:
            slots = sorted(rows)
            tokens = [t for s in slots for t in rows[s]]
            seqs = [s for s in slots for _ in rows[s]]
            positions = [
                p for s in slots for p in range(len(self.held[s]), len(self.held[s]) + len(rows[s]))
            ]
            ends = np.cumsum([len(rows[s]) for s in slots]) - 1
            try:
                logits = self.engine.forward(
                    PassInput(np.array(tokens), np.array(positions), np.array(seqs), ends)
                )
            except CacheFullError:
                for s in slots:
                    self._clear(s)
                break
            nxt: dict[int, list[int]] = {}
            for s, row in zip(slots, logits, strict=True):
                self.held[s] += rows[s]
                token = int(np.argmax(row))
                drafts[s].append(token)
                if len(drafts[s]) < limit[s]:
                    nxt[s] = [token]
            rows = nxt
        return {s: d for s, d in drafts.items() if d}

    def _follow(self, slot: int, context: list[int]) -> list[int]:
        """Make the slot's cache hold all of `context` but its last token (evaluating what
        it lacks, in passes of this sequence alone) and return that last token, which the
        drafting passes evaluate with the other sequences' (one row each)."""
        held = self.held.get(slot, [])
        keep = min(common_prefix(held, context), len(context) - 1)
        cache = self.engine.cache
        if keep > 0 and not cache.can_resume(slot, keep):
            keep = 0
        try:
            cache.remove(slot, keep)
        except ShiftNotSupportedError:
            cache.remove(slot, 0)
            keep = 0
        self.held[slot] = context[:keep]
        rest = context[keep:]
        batch = self.engine.num_batch
        while len(rest) > 1:
            cut = min(batch, len(rest) - 1)
            part, rest = rest[:cut], rest[cut:]
            at = len(self.held[slot])
            n = len(part)
            self.engine.forward(
                PassInput(
                    np.array(part), np.arange(at, at + n), np.full(n, slot), np.array([n - 1])
                )
            )
            self.held[slot] += part
        return rest

    def _clear(self, slot: int) -> None:
        self.engine.cache.remove(slot, 0)
        self.held[slot] = []

    def close(self) -> None:
        self.engine.close()
