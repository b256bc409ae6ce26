"""Prompt-cache slots (`engine/prompt_cache.py`), ported from Ollama's
`runner/ollamarunner/cache_test.go` (https://github.com/ollama/ollama): TestShiftDiscard (exact
vectors), TestFindCacheSlot and TestLoadCacheSlot (through `InputCache.acquire`) and
TestShiftCacheSlot (through `InputCache.shift`)."""

from __future__ import annotations

import time

import numpy as np
import pytest

from hearth.engine.input import Batch
from hearth.engine.kvcache import MAX_POS, Causal
from hearth.engine.ml import CacheConfig, DType
from hearth.engine.ml.reference import NumpyBackend
from hearth.engine.prompt_cache import (
    InputCache,
    NoFreeSlotError,
    ReprocessInputs,
    Slot,
    common_prefix,
    shift_discard,
)

from support.slots import RecordingCache


# -- TestShiftDiscard -----------------------------------------------------------------------
def _runs(n: int, at: dict[int, int]) -> list[int]:
    """`same_batch` of n inputs: input i keeps the next at[i] inputs in its batch."""
    return [at.get(i, 0) for i in range(n)]


SHIFT_DISCARD = {
    # name: (num_ctx, num_keep, same_batch, expected)
    "Shift": (2048, 5, _runs(2048, {}), 1021),
    "Max Keep": (2048, 2047, _runs(2048, {}), 1),
    "No Keep": (2048, 0, _runs(2048, {}), 1024),
    "Truncate": (2048, 5, _runs(5000, {}), 3973),
    "Truncate Keep": (2048, 2047, _runs(5000, {}), 2953),
    "No Op": (2048, 5, _runs(512, {}), 0),
    "Same Batch": (2048, 5, _runs(2048, {1024: 512 - 1}), 1531),
    "Same Batch Near Start": (2048, 5, _runs(2048, {10: 512 - 1}), 1021),
    "Consecutive Same Batch": (32, 0, _runs(32, {i: 10 - 1 for i in range(0, 32, 10)}), 20),
    "Overlapping Same Batch": (32, 0, _runs(32, {4: 10 - 1, 8: 10 - 1, 14: 10 - 1}), 24),
}


@pytest.mark.parametrize("name", list(SHIFT_DISCARD))
def test_shift_discard(name):
    num_ctx, num_keep, same_batch, expected = SHIFT_DISCARD[name]
    assert shift_discard(same_batch, num_ctx, num_keep) == expected


def test_common_prefix():
    assert common_prefix([], [1]) == 0
    assert common_prefix([1, 2, 3], [1, 2]) == 2
    assert common_prefix([1, 2, 3], [1, 5, 3]) == 1
    assert common_prefix([4], [1]) == 0


# -- a cache that records what the slots ask of it --------------------------------------------
def make_slots(
    specs: list[tuple[list[int], bool, float | None]], multi_user: bool, cache=None
) -> tuple[InputCache, RecordingCache]:
    """specs: (tokens, in use, seconds since last use; None = never used) per slot."""
    cache = cache or RecordingCache()
    slots = InputCache(cache, len(specs), 2048, multi_user=multi_user)  # type: ignore[arg-type]
    now = time.monotonic()
    for slot, (tokens, in_use, age) in zip(slots.slots, specs, strict=True):
        slot.set(tokens)
        slot.in_use = in_use
        slot.last_used = 0.0 if age is None else now - age
    return slots, cache


# -- TestFindCacheSlot ----------------------------------------------------------------------
# Ollama tests findLongestCacheSlot (single-user) and findBestCacheSlot (multi-user) and their
# prefix lengths; we test both through acquire(). The prompt gets two extra tokens (98, 99) so
# that the rule "evaluate at least two prompt tokens" (see TestLoadCacheSlot below) does not
# blur the prefix length.
# Translation: on ties single-user mode takes the least recently used free slot (our
# documented choice) where Ollama's findLongestCacheSlot takes the first; that changes the
# single-user answer for "New" and "Evict" (from slot 0 to slot 1, the one Ollama's
# multi-user mode picks too).
FIND = {
    # name: (slots, prompt, (single-user slot, len), (multi-user slot, len))
    "Empty": ([([], False, None), ([], False, None)], [1], (0, 0), (0, 0)),
    "Extend": ([([1], False, 1.0), ([1, 2], False, 2.0)], [1, 2], (1, 2), (1, 2)),
    "New": ([([1, 2], False, 1.0), ([], False, None)], [2], (1, 0), (1, 0)),  # Ollama: (0, 0)
    "Fork": ([([1, 2], False, 1.0), ([], False, None)], [1], (0, 1), (1, 1)),
    "Evict": ([([1], False, 1.0), ([1, 2], False, 2.0)], [2, 3], (1, 0), (1, 0)),  # (0, 0)
    "In use": ([([1, 2], True, 1.0), ([1], False, 2.0)], [1, 2], (1, 1), (1, 2)),
}


@pytest.mark.parametrize("multi_user", [False, True], ids=["longest", "best"])
@pytest.mark.parametrize("name", list(FIND))
def test_find_cache_slot(name, multi_user):
    specs, prompt, longest, best = FIND[name]
    slots, cache = make_slots(specs, multi_user)
    slot, keep = slots.acquire([*prompt, 98, 99])
    assert (slot.id, keep) == (best if multi_user else longest)
    assert slot.in_use
    assert slot.tokens == prompt[:keep]
    forks = [c for c in cache.calls if c[0] == "copy_prefix"]
    if multi_user and name in ("Fork", "In use"):
        # The longest prefix lives in another slot (busy, for "In use"): shared, not copied.
        assert forks == [("copy_prefix", 0, 1, keep)]
    else:
        assert forks == []
    assert ("remove", slot.id, keep, MAX_POS) in cache.calls


@pytest.mark.parametrize("multi_user", [False, True])
def test_all_slots_in_use(multi_user):
    slots, _ = make_slots([([1, 2], True, 1.0), ([1], True, 2.0)], multi_user)
    with pytest.raises(NoFreeSlotError):
        slots.acquire([1, 2, 3])


# -- TestLoadCacheSlot ----------------------------------------------------------------------
# Translation: Ollama keeps one input back when the whole prompt is cached (its logits are
# needed); ours evaluates at least two prompt tokens (all of a one-token prompt), because ggml
# computes a lone row with other kernels than a batch of rows, so the last prompt token would
# get slightly different numbers from a cached prompt than from a fresh one. `remaining` is
# ours; Ollama's value is in the comment.
LOAD = {
    # name: (multi_user, slots, prompt, slot id, inputs left to evaluate)
    "Basic cache hit - single user": (  # Ollama: 1 left
        False, [([1, 2], False, 1.0), ([], False, 2.0)], [1, 2, 3], 0, 2,
    ),
    "Basic cache hit - multi user": (  # Ollama: 1 left
        True, [([1, 2], False, 1.0), ([], False, 2.0)], [1, 2, 3], 0, 2,
    ),
    "Long cache hit": (False, [([1, 2, 3, 4], False, 1.0)], [1, 2, 3, 4, 5, 6], 0, 2),
    "Exact match - leave one input": (False, [([1, 2], False, 1.0)], [1, 2], 0, 2),  # Ollama: 1
    "Exact match - multi user": (True, [([1, 2, 3], False, 1.0)], [1, 2, 3], 0, 2),  # Ollama: 1
    "One-token prompt": (False, [([1], False, 1.0)], [1], 0, 1),
}  # fmt: skip


@pytest.mark.parametrize("name", list(LOAD))
def test_load_cache_slot(name):
    multi_user, specs, prompt, slot_id, remaining = LOAD[name]
    slots, cache = make_slots(specs, multi_user)
    slot, keep = slots.acquire(prompt)
    assert slot.id == slot_id and slot.in_use
    assert len(prompt) - keep == remaining
    assert slot.tokens == prompt[:keep]
    assert cache.calls[-1] == ("remove", slot_id, keep, MAX_POS)


def test_load_cache_slot_no_free_slot():
    slots, _ = make_slots([([1, 2], True, 1.0)], multi_user=False)
    with pytest.raises(NoFreeSlotError):
        slots.acquire([1, 2, 3])


def test_load_cache_slot_cannot_resume_starts_over():
    """A sliding-window cache that no longer holds the window: evaluate from the start."""
    cache = RecordingCache(resumable=False)
    slots, _ = make_slots([([1, 2, 3], False, 1.0)], multi_user=False, cache=cache)
    slot, keep = slots.acquire([1, 2, 3, 4, 5])
    assert keep == 0 and slot.tokens == []
    assert cache.calls == [("can_resume", 0, 3), ("remove", 0, 0, MAX_POS)]


# -- TestShiftCacheSlot ---------------------------------------------------------------------
def test_shift_cache_slot():
    cache = RecordingCache()
    slots = InputCache(cache, 1, 10)  # type: ignore[arg-type]
    slot = slots.slots[0]
    slot.set(range(1, 11))
    assert slots.shift(slot, 2) == 4
    assert slot.tokens == [1, 2, 7, 8, 9, 10]  # 6 inputs left, as Ollama's "Normal shift"
    assert cache.calls == [("remove", 0, 2, 6)]


def test_shift_cache_slot_removal_fails():
    """No shift function: the slot is cleared and the kept inputs come back to evaluate."""
    cache = RecordingCache(shift_fails=True)
    slots = InputCache(cache, 1, 10)  # type: ignore[arg-type]
    slot = slots.slots[0]
    slot.set(range(1, 11))
    with pytest.raises(ReprocessInputs) as err:
        slots.shift(slot, 2)
    assert err.value.kept == [1, 2, 7, 8, 9, 10]
    assert slot.tokens == []  # Ollama: "Original inputs should be cleared"
    assert cache.calls == [("remove", 0, 2, 6), ("remove", 0, 0, MAX_POS)]


# -- with a real cache -----------------------------------------------------------------------
def test_multi_user_fork_shares_cells_in_a_real_cache():
    """The fork of TestFindCacheSlot on a Causal cache: the new slot's sequence holds the
    shared prefix (same cells, nothing copied), and its old content is gone."""
    backend = NumpyBackend()
    cache = Causal()
    cache.set_config(CacheConfig(padding=1, permuted_v=False, mask_dtype=DType.F32))
    cache.init(backend, DType.F16, 2, 16, 16)

    def fill(seq: int, n: int) -> None:
        ctx = backend.new_context()
        try:
            pos = np.arange(n, dtype=np.int32)
            batch = Batch(
                ctx.from_numpy(np.zeros(n, np.int32)),
                ctx.from_numpy(pos),
                ctx.from_numpy(pos),
                pos,
                np.full(n, seq, np.int32),
                pos,
            )
            cache.start_forward(ctx, batch)
            cache.set_layer(0)
            t = ctx.from_numpy(np.ones((n, 1, 4), np.float32))
            cache.put(ctx, t, t)
            ctx.compute()
        finally:
            ctx.close()

    fill(0, 4)
    fill(1, 2)
    slots = InputCache(cache, 2, 16, multi_user=True)
    slots.slots[0] = Slot(0, [1, 2, 3, 4], in_use=True, last_used=time.monotonic())
    slots.slots[1] = Slot(1, [7, 8], in_use=False, last_used=0.0)
    slot, keep = slots.acquire([1, 2, 3, 9, 9])
    assert (slot.id, keep) == (1, 3)
    assert cache.positions(1).tolist() == [0, 1, 2]
    assert cache.positions(0).tolist() == [0, 1, 2, 3]
    shared = (cache.cell_seqs & np.uint64(0b11)) == np.uint64(0b11)
    assert np.flatnonzero(shared).tolist() == [0, 1, 2]
