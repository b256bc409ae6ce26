"""Chained passes (hearth.runner.compute): where the loop pipelines and a pass's tokens are
the engine's picks, the next pass starts on the compute thread as soon as that pass ends, its
placeholders filled with the picks there, while the loop reads the first. Proved on a
recorded engine (tests/recorded_engine.py): what each pass computed is what the serial loop
computes, the answer streams, and a failing pass ends its sequences (and the pass chained
to it) with a sentence while the loop goes on serving."""

from __future__ import annotations

import numpy as np
import pytest
from recorded_engine import RecordedEngine

from hearth.engine.sampling import SamplingOptions
from hearth.runner.loop import BatchLoop
from hearth.runner.protocol import CompletionChunk, CompletionDone, CompletionError
from hearth.runner.sequence import Sequence, SequenceSettings

from tiny_models import byte_token

PROMPTS = [[1, *range(300, 306)], [1, *range(400, 409)]]


def _greedy(num_predict: int) -> SequenceSettings:
    """Greedy without a penalty: the sequence takes the engine's picks (`takes_picks`)."""
    return SequenceSettings(
        sampling=SamplingOptions(temperature=0.0, repeat_penalty=1.0), num_predict=num_predict
    )


def _serve(loop: BatchLoop, seqs: list[Sequence]) -> list[list]:
    for seq in seqs:
        loop.submit(seq)
    return [[*iter(seq.events.get, None)] for seq in seqs]


def _text(events: list) -> str:
    return "".join(e.content for e in events if isinstance(e, CompletionChunk))


def _fed(engine: RecordedEngine) -> dict[int, list[int]]:
    """Each slot's inputs in the order the passes computed them."""
    fed: dict[int, list[int]] = {0: [], 1: []}
    for p in engine.recorded.passes:
        for slot in fed:
            rows = np.flatnonzero(np.asarray(p.sequences) == slot)
            assert np.asarray(p.positions)[rows].tolist() == list(
                range(len(fed[slot]), len(fed[slot]) + len(rows))
            )
            fed[slot] += np.asarray(p.tokens)[rows].tolist()
    return fed


@pytest.mark.parametrize("pipelined", [False, True])
def test_a_pass_on_the_picks_of_the_one_before_computes_what_the_serial_loop_does(tok, pipelined):
    answer = byte_token(tok, ord("A"))
    engine = RecordedEngine(tok, answer, num_batch=16, pipelined=pipelined)
    loop = BatchLoop(engine, pipelined=pipelined)
    loop.start()
    try:
        seqs = [Sequence(p, _greedy(n), tok, 64) for p, n in zip(PROMPTS, (6, 3), strict=True)]
        assert all(s.takes_picks for s in seqs)
        events = _serve(loop, seqs)
    finally:
        loop.stop()
    assert [_text(e) for e in events] == ["AAAAAA", "AAA"]
    assert all(isinstance(e[-1], CompletionDone) and e[-1].done_reason == "length" for e in events)
    fed = _fed(engine)
    for slot, (prompt, n) in enumerate(zip(PROMPTS, (6, 3), strict=True)):
        # The prompt, then the answers that were fed back; a placeholder planned for the
        # token that ended the sequence may have been computed, with the pick, unread.
        assert fed[slot][: len(prompt) + n - 1] == prompt + [answer] * (n - 1)
        assert fed[slot][len(prompt) + n - 1 :] in ([], [answer])
    chained = loop._computer.chained
    assert chained > 0 if pipelined else chained == 0


def test_a_failing_pass_ends_its_sequences_and_the_pass_chained_to_it_and_the_loop_goes_on(tok):
    answer = byte_token(tok, ord("A"))
    # Pass 1: both prompts; 2 and 3 decode; 3 fails while 4, chained to it, is handed over.
    engine = RecordedEngine(tok, answer, num_batch=32, pipelined=True, fail_at=3)
    loop = BatchLoop(engine, pipelined=True)
    acquire, taken = loop.slots.acquire, []

    def acquire_free(*args, **kw):  # a slot is given to one sequence at a time
        slot, cached = acquire(*args, **kw)
        taken.append(any(feed.slot is slot for feed in loop._active))
        return slot, cached

    loop.slots.acquire = acquire_free  # type: ignore[method-assign]
    loop.start()
    try:
        # Three more wait for a slot: two take the failed ones' slots while the pass chained
        # to the failed one is still to be read (whose failure must not free them again),
        # the last one must wait for one of them to end.
        seqs = [Sequence(p, _greedy(8), tok, 64) for p in PROMPTS]
        seqs += [Sequence(p, _greedy(4), tok, 64) for p in (*PROMPTS, [1, *range(500, 505)])]
        events = _serve(loop, seqs)
    finally:
        loop.stop()
    for got in events[:2]:
        assert _text(got) == "AA"  # what came before the failure still arrives
        assert isinstance(got[-1], CompletionError)
        assert got[-1].error == "computing failed: pass 3 broke"
    for got in events[2:]:
        assert _text(got) == "AAAA"
        assert isinstance(got[-1], CompletionDone)
    assert len(taken) == 5 and not any(taken)
    for p in engine.recorded.passes:  # one sequence per slot at a time: one run each
        for slot in (0, 1):
            positions = p.positions[p.sequences == slot]
            assert (np.diff(positions) == 1).all()
    # The pass chained to the failed one was never computed: the next one computed holds
    # the two waiting prompts, each from position 0 in a freed slot.
    nxt = engine.recorded.passes[3]
    assert sorted(nxt.tokens.tolist()) == sorted(PROMPTS[0] + PROMPTS[1])
    assert [nxt.positions[nxt.sequences == slot][0] for slot in (0, 1)] == [0, 0]
    assert loop._computer.chained > 0
