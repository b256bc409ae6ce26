"""Prompt-cache slots: which KV-cache sequence a request uses, and how much of it is reusable.

There is one slot per parallel sequence of the KV cache (slot id == cache sequence id). A slot
remembers the tokens its sequence holds in the cache, so a follow-up request that starts with
the same tokens (the chat so far) only evaluates what is new.

* Single-user mode (default): a request takes the free slot sharing the longest prefix with
  its prompt (least recently used on ties).
* Multi-user mode: a request takes a free slot whose whole content is a prefix of its prompt;
  otherwise the least recently used free slot, and if any slot (even a busy one) shares a
  longer prefix, those cells are shared into the new slot with `copy_prefix` (no data copied).

Sliding-window caches can only resume where the window still holds what is needed
(`can_resume`); otherwise the prompt is evaluated from the start.

SameBatch: beside its tokens a slot keeps each input's `same_batch` mark (the next N inputs
must share this input's batch: an image's positions). Reuse never stops inside such a run
(the whole run is evaluated again) and a context shift never cuts one.

On disk (`disk`, `SavedPrefixes`: a `DiskPromptCache`, optional): a slot whose content is
about to be lost (reused for another prompt, or the model unloading: `save_all`) is copied to
host memory (`Cache.snapshot`, fast) and queued for the disk's writer thread. Only the prefix
before the first image is saved (an image's positions are never on disk). A request whose
prompt continues a saved sequence further than any slot does loads it (`Cache.restore`)
instead of evaluating those tokens, when reading the file is cheaper than evaluating them
(`seconds_per_token`, measured by the loop, against the disk's measured read rate).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from .kvcache import Cache, SequenceState, ShiftNotSupportedError

__all__ = [
    "Slot",
    "InputCache",
    "NoFreeSlotError",
    "ReprocessInputs",
    "common_prefix",
    "shift_discard",
    "group_start",
    "SavedPrefixes",
    "SavedPrefix",
]


_log = logging.getLogger("hearth.prompt_cache")


class SavedPrefix(Protocol):
    """One saved sequence (`disk_prompt_cache.DiskEntry`)."""

    @property
    def path(self) -> Path: ...
    @property
    def tokens(self) -> np.ndarray: ...
    @property
    def size(self) -> int: ...


class SavedPrefixes(Protocol):
    """Where slots save and find sequences beyond memory (`disk_prompt_cache.DiskPromptCache`)."""

    min_tokens: int
    read_rate: float  # bytes per second of the last load (0: not known yet)

    def best(self, prompt: Sequence[int], limit: int) -> tuple[SavedPrefix, int] | None: ...
    def load(self, entry: Any) -> SequenceState | None:
        """The state of an entry `best` gave."""

    def holds(self, tokens: Sequence[int]) -> bool: ...
    def save(self, tokens: Sequence[int], state: SequenceState) -> None: ...


class NoFreeSlotError(RuntimeError):
    pass


class ReprocessInputs(Exception):
    """A shift was impossible: the slot was cleared; evaluate `kept` (with their same_batch
    `marks`) again from position 0."""

    def __init__(self, kept: list[int], marks: list[int]) -> None:
        super().__init__("the model cannot shift its cache; the kept context is re-evaluated")
        self.kept = kept
        self.marks = marks


def common_prefix(a: Sequence[int] | np.ndarray, b: Sequence[int] | np.ndarray) -> int:
    """Length of the longest common prefix of two token sequences."""
    n = min(len(a), len(b))
    if n == 0:
        return 0
    diff = np.flatnonzero(np.asarray(a[:n]) != np.asarray(b[:n]))
    return int(diff[0]) if len(diff) else n


def shift_discard(same_batch: Sequence[int], num_ctx: int, num_keep: int) -> int:
    """How many inputs after `num_keep` a context shift discards.

    `same_batch[i]` says the next N inputs must stay in input i's batch (images); the cut
    never lands inside such a run. The target leaves half of the room after `num_keep` free.
    """
    target = max((num_ctx - num_keep) // 2, 1)
    needed = target - (num_ctx - len(same_batch))
    if needed <= 0:
        return 0
    discard = 0
    run_end = -1
    for i in range(num_keep, len(same_batch)):
        run_end = max(run_end, i + same_batch[i])
        discard += 1
        if discard >= needed and i >= run_end:
            break
    return discard


def group_start(marks: Sequence[int], n: int) -> int:
    """The largest cut <= n that keeps every same_batch run whole: inputs [0, cut) then hold
    no run that continues past them."""
    cut = n
    if not any(marks[:n]):
        return cut
    for i in range(min(n, len(marks))):
        if marks[i] and i + marks[i] >= cut:
            return group_start(marks, i)
    return cut


@dataclass
class Slot:
    id: int
    tokens: list[int] = field(default_factory=list)  # what the cache holds for this sequence
    in_use: bool = False
    last_used: float = 0.0
    marks: list[int] = field(default_factory=list)  # same_batch of each of `tokens`

    def set(self, tokens: Sequence[int], marks: Sequence[int] | None = None) -> None:
        self.tokens = list(tokens)
        self.marks = list(marks) if marks is not None else [0] * len(self.tokens)

    def extend(self, tokens: Sequence[int], marks: Sequence[int]) -> None:
        self.tokens.extend(tokens)
        self.marks.extend(marks)

    def keep(self, n: int) -> None:
        del self.tokens[n:]
        del self.marks[n:]


class InputCache:
    """The slots of one KV cache (see the module docstring). Used by the runner thread only."""

    def __init__(
        self,
        cache: Cache,
        parallel: int,
        num_ctx: int,
        multi_user: bool = False,
        disk: SavedPrefixes | None = None,
    ):
        self.cache = cache
        self.num_ctx = num_ctx
        self.multi_user = multi_user
        self.slots = [Slot(i) for i in range(parallel)]
        self.disk = disk  # may be attached later (the runner digests the model file first)
        self.seconds_per_token = 0.0  # prompt evaluation's measured cost (0: not yet known)

    def acquire(
        self, prompt: Sequence[int], reuse: bool = True, marks: Sequence[int] | None = None
    ) -> tuple[Slot, int]:
        """Take a slot for `prompt` (with its same_batch `marks`, default none); returns it
        and how many prompt tokens it already holds. At least two tokens (all of a shorter
        prompt) are left to evaluate. With `reuse=False` (embeddings) the least recently used
        slot is emptied and taken, so the prefixes other slots hold for chats stay cached."""
        free = [s for s in self.slots if not s.in_use]
        if not free:
            raise NoFreeSlotError("all sequences are busy")
        marks = list(marks) if marks is not None else [0] * len(prompt)
        if not reuse:
            slot = min(free, key=lambda s: s.last_used)
            self._save(slot, lost=len(slot.tokens))
            self.cache.remove(slot.id, 0)
            slot.set([])
            slot.in_use = True
            slot.last_used = time.monotonic()
            return slot, 0
        if self.multi_user:
            slot, keep = self._pick_multi_user(prompt, free)
        else:
            slot = max(free, key=lambda s: (common_prefix(s.tokens, prompt), -s.last_used))
            keep = common_prefix(slot.tokens, prompt)
        # Evaluate at least two prompt tokens (one if the prompt is one token): ggml computes
        # a lone row with other kernels than a batch of rows, so the prompt's last token would
        # get slightly different numbers from a cached prompt than from a fresh one.
        keep = min(keep, len(prompt) - min(2, len(prompt)))
        keep = group_start(marks, keep)
        if keep > 0 and not self.cache.can_resume(slot.id, keep):
            keep = 0
        loaded = self._load(slot, prompt, marks, keep)
        if loaded is not None:
            slot.in_use = True
            slot.last_used = time.monotonic()
            return slot, loaded
        self._save(slot, lost=len(slot.tokens) - keep)
        try:
            self.cache.remove(slot.id, keep)
        except ShiftNotSupportedError:
            self.cache.remove(slot.id, 0)
            keep = 0
        slot.set(prompt[:keep], marks[:keep])
        slot.in_use = True
        slot.last_used = time.monotonic()
        return slot, keep

    def _pick_multi_user(self, prompt: Sequence[int], free: list[Slot]) -> tuple[Slot, int]:
        best = max(self.slots, key=lambda s: common_prefix(s.tokens, prompt))
        best_len = common_prefix(best.tokens, prompt)
        if not best.in_use and best_len == len(best.tokens) and best_len > 0:
            return best, best_len
        slot = min(free, key=lambda s: s.last_used)
        if best is not slot and best_len > common_prefix(slot.tokens, prompt):
            self._save(slot, lost=len(slot.tokens))  # its content gives way to the shared one
            self.cache.copy_prefix(best.id, slot.id, best_len)
            slot.set(best.tokens[:best_len], best.marks[:best_len])
            return slot, best_len
        return slot, common_prefix(slot.tokens, prompt)

    def release(self, slot: Slot, keep: int | None = None) -> None:
        """Give the slot back; the cache keeps its first `keep` tokens (all by default) for the
        next request to reuse."""
        if keep is not None and keep < len(slot.tokens):
            slot.keep(keep)
        self.cache.remove(slot.id, len(slot.tokens))  # drops any cell beyond what is recorded
        slot.in_use = False
        slot.last_used = time.monotonic()

    def shift(self, slot: Slot, num_keep: int) -> int:
        """Make room by discarding tokens after `num_keep` (re-RoPEing later keys).

        Returns how many were discarded. When the model cannot shift, the slot is cleared and
        ReprocessInputs carries the tokens to evaluate again instead.
        """
        num_keep = group_start(slot.marks, num_keep)
        discard = shift_discard(slot.marks, self.num_ctx, num_keep)
        if discard <= 0:
            return 0
        kept = slot.tokens[:num_keep] + slot.tokens[num_keep + discard :]
        kept_marks = slot.marks[:num_keep] + slot.marks[num_keep + discard :]
        try:
            self.cache.remove(slot.id, num_keep, num_keep + discard)
        except ShiftNotSupportedError:
            self.cache.remove(slot.id, 0)
            slot.set([])
            raise ReprocessInputs(kept, kept_marks) from None
        slot.set(kept, kept_marks)
        return discard

    # -- on disk --------------------------------------------------------------------------
    def _load(self, slot: Slot, prompt: Sequence[int], marks: list[int], keep: int) -> int | None:
        """If the disk holds a longer usable prefix of `prompt` than the `keep` tokens `slot`
        gives, and reading it is cheaper than evaluating the difference: replace the slot's
        content with it (saving what the slot held first) and return its length. None: the
        slot is untouched. 0: the load failed after the slot was emptied."""
        disk = self.disk
        limit = len(prompt) - min(2, len(prompt))
        if disk is None or keep >= limit:
            return None
        found = disk.best(prompt, limit)
        if found is None:
            return None
        entry, n = found
        n = group_start(marks, n)
        gain = n - keep
        if gain <= 0 or not self._worth_loading(entry.size, gain):
            return None
        state = disk.load(entry)
        if state is None:
            return None
        # What the slot holds beyond the saved sequence is lost.
        self._save(slot, lost=len(slot.tokens) - common_prefix(slot.tokens, entry.tokens))
        self.cache.remove(slot.id, 0)
        slot.set([])
        if not self.cache.restore(slot.id, state):
            _log.warning("prompt cache file %s does not fit this cache; not used", entry.path)
            return 0
        self.cache.remove(slot.id, n)
        if not self.cache.can_resume(slot.id, n):
            self.cache.remove(slot.id, 0)
            return 0
        slot.set(prompt[:n], marks[:n])
        _log.info("prompt cache: %d tokens loaded from %s", n, entry.path.name)
        return n

    def _worth_loading(self, size: int, gain: int) -> bool:
        """Whether reading `size` bytes costs less than evaluating `gain` prompt tokens (yes
        while either rate is still unknown)."""
        rate = self.disk.read_rate if self.disk is not None else 0.0
        if rate <= 0 or self.seconds_per_token <= 0:
            return True
        return size / rate < gain * self.seconds_per_token

    def _save(self, slot: Slot, lost: int) -> None:
        """Queue the slot's content for the disk when `lost` of its tokens are about to go
        (at least the disk's `min_tokens`): its prefix before the first image."""
        disk = self.disk
        if disk is None or lost < disk.min_tokens:
            return
        image = next((i for i, t in enumerate(slot.tokens) if t < 0), len(slot.tokens))
        n = group_start(slot.marks, image)
        if n < disk.min_tokens or disk.holds(slot.tokens[:n]):
            return
        state = self.cache.snapshot(slot.id, n)
        if state is None or state.resume_from > n:
            return  # this cache (or this sequence's cells) cannot be saved
        disk.save(slot.tokens[:n], state)

    def save_all(self) -> None:
        """Queue every slot's content for the disk (the model is unloading); the loop must
        have stopped."""
        for slot in self.slots:
            self._save(slot, lost=len(slot.tokens))
