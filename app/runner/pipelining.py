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
sequences, may have changed), sooner where what it was made on no longer holds: decoding
steps of another number of sequences, or steps of the chosen way whose median over the last
`window` has grown past what the trial measured for the other way, by a margin (a growing
context makes each pass longer, and a longer pass hides more behind it: a step that was
cheaper serially at the start of a chat may not be a few hundred tokens on). Only steps that
decode one token per sequence (no prompt rows, no drafts) with the same number of sequences
count; a step of another kind is not counted and neither is the one after it (its time
carries the other kind's), nor the first two steps after a switch (the compute thread wakes
up).

Pipelining never changes a sequence's numbers (loop.py), so the choice is about speed only.
A loop told to pipeline (`forced` True) or not (False) does so always.
"""

from __future__ import annotations

import statistics
import time
from collections import deque

__all__ = ["PipelineChoice"]

_ORDER = (False, True, True, False)  # the ways of consecutive blocks of a trial
# A held choice is measured again once its steps take this much longer than the other way's
# did (less would measure again on noise where both ways cost about the same).
_MARGIN = 1.1


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
        self._skip = 1  # steps not to count: after a switch, or after another kind
        self._recent: deque[float] = deque(maxlen=window)  # the chosen way's latest steps
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
        if decoding == 0:
            self._skip = max(self._skip, 1)
            return
        if decoding != self._width:  # other sequences: measure for them
            self._start(decoding)
            return
        if self._skip or since is None:
            self._skip = max(self._skip - 1, 0)
            return
        if not self._measuring:
            self._hold(now - since)
            return
        times = self._times[self.pipelining]
        times.append(now - since)
        self._in_block += 1
        if all(len(t) >= self.window for t in self._times.values()):
            self._decide()
        elif self._in_block >= self.block or len(times) >= self.window:
            self._next_block()

    def _hold(self, seconds: float) -> None:
        """A counted step of the chosen way: measure again after `hold` steps, or as soon as
        the chosen way's steps take longer than the other way's did in the trial."""
        self._held += 1
        self._recent.append(seconds)
        if self._held >= self.hold or (
            self._held % self.window == 0  # (a median every step would cost a token)
            and statistics.median(self._recent) > _MARGIN * self.last[not self.pipelining]
        ):
            self._start(self._width)

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
        if pipelining != self.pipelining:
            self._skip = 2
        self.pipelining = pipelining
        self._in_block = 0

    def _decide(self) -> None:
        self.last = {way: statistics.median(t) for way, t in self._times.items()}
        self.trials += 1
        self._switch(self.last[True] < self.last[False])
        self._measuring = False
        self._held = 0
        self._recent.clear()
