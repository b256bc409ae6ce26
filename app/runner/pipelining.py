"""Whether the batching loop plans pass N+1 while pass N computes, decided by measuring.

Pipelining (loop.py) hides the loop's planning of the next pass behind the current pass's
compute (and, for passes chained on the engine's picks, compute.py, its reading of the
pass too), but hands every pass to the compute thread: thread wake-ups and two threads
taking turns at Python's interpreter lock. Which costs more depends on the machine (a
wake-up takes a few microseconds on bare metal and tens on a virtual machine), on whether
the core it needs is really free (other processes), the model (a tiny model's pass is
shorter than the planning) and how many sequences share the pass: neither can be the fixed
default.

`PipelineChoice` times steady decoding both ways and keeps the faster. A trial alternates
blocks of `block` steps without and with pipelining, in the order without, with, with,
without, ... until each way has `window` counted steps (so that a steady drift in speed, a
warm-up or a change of load, weighs on both ways alike), and compares the medians of their
step times; the choice then holds for `hold` steps and is measured again (the load, or the
sequences, may have changed). Only steps that decode one token per sequence (no prompt rows,
no drafts) with the same number of sequences count; a step of another kind is not counted
and neither is the one after it (its time carries the other kind's), nor the first step
after a switch.

Pipelining never changes a sequence's numbers (loop.py), so the choice is about speed only.
A loop told to pipeline (`forced` True) or not (False) does so always.
"""

from __future__ import annotations

import statistics
import time

__all__ = ["PipelineChoice"]

_ORDER = (False, True, True, False)  # the ways of consecutive blocks of a trial


class PipelineChoice:
    """See the module docstring. Used by the loop thread only."""

    def __init__(
        self,
        allowed: bool,
        forced: bool | None,
        window: int = 24,
        hold: int = 2048,
        block: int = 6,
    ) -> None:
        """`allowed`: the engine can plan while it computes and a core is left for it.
        `forced`: a fixed choice (None: measure)."""
        self.allowed = allowed
        self.forced = forced if allowed else False
        self.window = window
        self.hold = hold
        self.block = block
        self.pipelining = bool(self.forced)
        self.trials = 0  # measurements made (each compares both ways)
        self.last: dict[bool, float] = {}  # the last trial's median step time, each way
        self._times: dict[bool, list[float]] = {False: [], True: []}
        self._held = 0  # steps since the last decision
        self._measuring = self.forced is None
        self._width = 0  # sequences decoding in the trial's steps
        self._since: float | None = None  # the end of the previous step
        self._skip = True  # the next step carries a switch (or follows another kind)
        self._in_block = 0  # counted steps in the current block
        self._blocks = 0  # blocks of the trial so far

    def now(self) -> bool:
        """Whether this step pipelines."""
        return self.pipelining

    def step(self, decoding: int) -> None:
        """A step ended. `decoding`: sequences it decoded one token each, or 0 for a step of
        another kind (prompt rows, drafts, nothing computed)."""
        if self.forced is not None:
            return
        now = time.perf_counter()
        since, self._since = self._since, now
        if not self._measuring:
            self._held += 1
            if self._held >= self.hold:
                self._start()
            return
        if decoding == 0:
            self._skip = True
            return
        if decoding != self._width:  # other sequences: start over
            self._start(decoding)
            return
        if self._skip or since is None:
            self._skip = False
            return
        times = self._times[self.pipelining]
        times.append(now - since)
        self._in_block += 1
        if all(len(t) >= self.window for t in self._times.values()):
            self._decide()
        elif self._in_block >= self.block or len(times) >= self.window:
            self._next_block()

    def _next_block(self) -> None:
        """Blocks go without, with, with, without, ... (ABBA: a steady drift in speed
        cancels), skipping a way that has its window already."""
        self._blocks += 1
        way = _ORDER[self._blocks % len(_ORDER)]
        if len(self._times[way]) >= self.window:
            way = not way
        self._switch(way)

    def _start(self, width: int = 0) -> None:
        self._measuring = True
        self._width = width
        self._times = {False: [], True: []}
        self._blocks = 0
        self._switch(_ORDER[0])

    def _switch(self, pipelining: bool) -> None:
        self.pipelining = pipelining
        self._skip = True
        self._in_block = 0

    def _decide(self) -> None:
        self.last = {way: statistics.median(t) for way, t in self._times.items()}
        self.trials += 1
        self.pipelining = self.last[True] < self.last[False]
        self._measuring = False
        self._held = 0
        self._skip = True
