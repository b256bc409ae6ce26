"""Passes on their way through the engine: the batching loop's `Flight`s and the `Computer`
that runs them, on the loop's thread or on a compute thread of its own.

A `Flight` is one planned pass with what the loop needs to read it back (which entry samples
which output row). The loop (loop.py) runs a pass where it stands (`run_here`) or, when it
pipelines, hands it to the compute thread (`hand_over`) and plans the next one while it
computes; the thread tells it when the pass has started (its inputs are uploaded, so the
graph's inputs may be refilled for the next pass) and when it is done.

Chained passes. A pipelined pass N+1 has a placeholder row for each sequence sampling from
pass N. Where N's tokens are the engine's picks (`Flight.picks`: greedy sequences, the
token is an output of the pass itself), N+1 does not wait for the loop to sample N: the loop
hands N+1 over before N is done, naming N as its source (`after`) and which of its rows take
which of N's picks (`fills`), and the compute thread fills them in and starts N+1 the moment
N ends. The loop's reading of N (each sequence's token, text, stop strings, events) then
overlaps N+1's compute instead of lying between the two passes. A placeholder whose
sequence ended at N (an end-of-generation token, a stop string, its limit) computes a row
nobody reads, as it does when the loop fills placeholders itself; its cell is dropped when
the slot is released. If N failed, N+1 is not computed and fails with N's error.

Threads: `Flight.plan`'s tokens are written by the compute thread for a chained flight (and
by the loop, before handing it over, otherwise); the loop reads a flight's results only
after its `done` is set.
"""

from __future__ import annotations

import _thread
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .engine import RunnerEngine
from .feed import Entry

__all__ = ["Computer", "Flight"]

_RATE_ROWS = 32  # a pass of at least this many rows measures prompt evaluation's cost


class Signal:
    """That something happened, set once by one thread and awaited by others: a lock held
    until it is set. What `threading.Event` does for this, at a fraction of its cost (an
    Event is a Condition: a pass handed over sets and waits on two per token)."""

    __slots__ = ("_lock", "_set")

    def __init__(self) -> None:
        self._lock = _thread.allocate_lock()
        self._lock.acquire()
        self._set = False

    def set(self) -> None:
        """(From one thread only: the compute thread.)"""
        if not self._set:
            self._set = True
            self._lock.release()

    def wait(self) -> None:
        self._lock.acquire()
        self._lock.release()


@dataclass(slots=True)
class Flight:
    """One planned pass (module docstring)."""

    plan: Any  # the engine's planned pass (its `tokens` may still change)
    entries: list[Entry]
    rows: dict[int, int]  # entry index -> output row
    picks: bool = False  # the engine returns each output row's token (PassInput.greedy)
    size: int = 0  # its rows
    # A pass the compute thread runs tells the loop when it started and ended; one the loop
    # thread runs itself needs no signals.
    started: Signal | None = None
    done: Signal | None = None
    # A chained pass: the pass whose picks fill its placeholder rows, and which ones:
    # (row of this pass's tokens, output row of `after`).
    after: Flight | None = None
    fills: list[tuple[int, int]] = field(default_factory=list)
    logits: np.ndarray | None = None
    error: BaseException | None = None
    seconds: float = 0.0  # the pass's compute time
    drafting: float = 0.0  # the drafter's time drafting for it

    @property
    def chained(self) -> bool:
        return bool(self.fills)


class PassBeforeFailed(RuntimeError):
    """A chained pass was not computed: the pass its placeholders come from failed."""


class Computer:
    """Runs the loop's passes (module docstring). `on_prompt_rate(seconds_per_row)` hears what
    each pass of at least `_RATE_ROWS` rows measured (what the prompt cache weighs loading a
    prefix from disk against)."""

    def __init__(self, engine: RunnerEngine, on_prompt_rate: Callable[[float], None]) -> None:
        self.engine = engine
        self._on_prompt_rate = on_prompt_rate
        self._jobs: queue.SimpleQueue[Flight | None] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._work, name="compute", daemon=True)
        self._handed: Flight | None = None  # the last pass handed to the thread
        self.chained = 0  # passes handed over to start on the picks of the one before

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        if self._thread.is_alive():
            self._jobs.put(None)
            self._thread.join(timeout=10)

    def run_here(self, flight: Flight) -> None:
        """Compute `flight` on the calling thread."""
        self._execute(flight)

    def hand_over(self, flight: Flight) -> None:
        """Queue `flight` for the compute thread; its `started` and `done` tell the rest."""
        flight.started, flight.done = Signal(), Signal()
        self._handed = flight
        self._jobs.put(flight)

    def chain(self, flight: Flight, after: Flight) -> bool:
        """Hand `flight` over to start once `after` (handed over before it) ends, its
        placeholder rows filled with `after`'s picks. False, and nothing handed over, where
        that cannot be: `after` is not a picking pass, or a placeholder's sequence has no
        picked row in it."""
        if not after.picks:
            return False
        source = {id(after.entries[i].feed): row for i, row in after.rows.items()}
        fills = []
        for entry in flight.entries:
            if entry.placeholder:
                row = source.get(id(entry.feed))
                if row is None:
                    return False
                fills.append((entry.start, row))
        if not fills:
            return False
        flight.after, flight.fills = after, fills
        self.chained += 1
        self.hand_over(flight)
        return True

    def settle(self) -> None:
        """Wait until no pass handed over is computing (before work that writes the cache
        the way a pass does, or hands out cells a pass still writes: a context shift, an
        admission)."""
        handed = self._handed
        if handed is not None and handed.done is not None:
            handed.done.wait()

    # -- the compute thread ---------------------------------------------------------------
    def _work(self) -> None:
        """Run the passes handed over, in order. A pass that computed is reported done only
        when the next one, chained to it, has started (or when none is waiting): the loop,
        woken to read it, then finds the interpreter free at once instead of waking to wait
        for this thread's preparing of the next pass (one thread wake-up a token less)."""
        held: Flight | None = None  # computed, its `done` not yet set
        while True:
            if held is None:
                flight = self._jobs.get()
            else:
                try:
                    flight = self._jobs.get_nowait()
                except queue.Empty:
                    _report(held)
                    held = None
                    continue
            if held is not None and (flight is None or flight.after is not held):
                _report(held)
                held = None
            if flight is None:
                return
            self._execute(flight, release=held)  # (`held` reported once `flight` started)
            held = flight if flight.error is None else None
            if held is None:
                _report(flight)

    def _execute(self, flight: Flight, release: Flight | None = None) -> None:
        """Compute `flight` (its placeholders filled first if chained); `release`: a pass
        to report done once this one has started (or failed). Sets `flight.started`, not
        `flight.done` (the caller reports it)."""
        try:
            after, flight.after = flight.after, None  # (no chain of flights kept alive)
            if after is not None:
                if after.error is not None:
                    raise PassBeforeFailed(str(after.error))
                picks = after.logits
                assert picks is not None
                tokens = flight.plan.tokens
                for at, row in flight.fills:
                    tokens[at] = picks[row]
            on_started = None
            if flight.started is not None:
                on_started = flight.started.set if release is None else _both(flight, release)
            began = time.perf_counter()
            flight.logits = self.engine.run(flight.plan, on_started=on_started)
            flight.seconds = time.perf_counter() - began
            if flight.size >= _RATE_ROWS:
                self._on_prompt_rate(flight.seconds / flight.size)
        except BaseException as e:  # handed to the loop thread
            flight.error = e
        finally:
            if flight.started is not None:
                flight.started.set()
            if release is not None:
                _report(release)


def _report(flight: Flight) -> None:
    """The pass has ended (its results, or its error, may be read)."""
    assert flight.started is not None and flight.done is not None
    flight.started.set()
    flight.done.set()


def _both(flight: Flight, release: Flight) -> Callable[[], None]:
    """`flight` has started, and so `release` may be reported done."""

    def started() -> None:
        assert flight.started is not None
        flight.started.set()
        _report(release)

    return started
