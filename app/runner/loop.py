"""The batching loop: many sequences served together on one model.

Each step builds one batch of at most `num_batch` inputs from the active sequences, round
robin: a sequence's prompt is split across steps when it does not fit, and the first sequence
left out entirely becomes the resume point of the next step, so a long prompt cannot starve a
short one. Rows are laid out in slot order (not round-robin order) so that steady decoding
keeps one batch shape and reuses its graph. Logits are computed only for the rows that need
sampling (a sequence's last input). A step is three parts: admission (which inputs of which
sequences go in: `_choose`), row layout (`_lay_out`) and the engine's planning (`_plan`).

The loop owns each active sequence's input side, an `InputFeed` (feed.py: its slot, the inputs
still to evaluate with their same-batch marks, placeholders); the Sequence owns its output.
The engine is any `RunnerEngine` (engine.py).

Determinism: a sequence's numbers never depend on what shares its batch or on how its prompt
was split (per-sequence attention, prompt pieces of at least two rows, see slots.py), so the
same request gives the same tokens alone, under load, or from the prompt cache.

Pipelining (when a CPU core is left over by the compute threads, and measured to pay:
pipelining.py): while batch N computes on the worker thread (ggml releases the GIL), the
loop builds batch N+1. Sequences sampling from N get a placeholder input in N+1 whose value
is filled in once N is sampled, or, where N's tokens are the engine's picks, by the compute
thread the moment N ends (chained passes, compute.py: N+1 then starts without waiting for
the loop to read N). A sequence that finished at N leaves its placeholder unread; its cache
cell is dropped when the slot is released.

Speculative decoding (speculation.py): the loop asks its `Speculator` for drafts after each
decoding sequence's sampled token (`add_drafts`), lays them out as rows that each compute as
a lone decoding row, and hands their logits back to it (`check`); a sequence that may draft
takes no pipelined placeholder (`drafts_next`), and each decoding pass's time is weighed
(`weigh`).

Failures stay local: an error in one sequence (a full cache, a broken grammar state) ends that
sequence with a message; the loop goes on serving the others.
"""

from __future__ import annotations

import logging
import threading
from collections import deque

import numpy as np

from ..engine.kvcache import CacheFullError
from ..engine.prompt_cache import InputCache, NoFreeSlotError, ReprocessInputs
from .compute import Computer, Flight
from .embedding import embed
from .engine import PassInput, RunnerEngine
from .feed import Chosen, Entry, InputFeed, Inputs
from .pipelining import PipelineChoice
from .sequence import Sequence
from .speculation import Speculator

__all__ = ["BatchLoop"]


_log = logging.getLogger("hearth.runner")

_NONE: frozenset[int] = frozenset()


class BatchLoop:
    """See the module docstring. `submit()` from any thread; everything else is internal."""

    def __init__(
        self,
        engine: RunnerEngine,
        slots: InputCache | None = None,
        pipelined: bool | None = None,
        speculator: Speculator | None = None,
    ) -> None:
        """`slots`: the prompt cache over `engine.cache` (None: one in single-user mode, not
        on disk). `pipelined` None: where a core is spare (`engine.spare_core`) and measured
        to pay (pipelining.py); True or False: always or never. An engine that cannot plan
        while it computes (`engine.can_pipeline`: llama.cpp's) never pipelines.
        `speculator`: speculative decoding (None: prompt lookup, weighed)."""
        self.engine = engine
        # Building the next batch while one computes can only pay when a core is free for
        # it; otherwise the Python work slows the compute threads down more than it saves.
        allowed = engine.can_pipeline and (pipelined or (pipelined is None and engine.spare_core))
        self.pipelining = PipelineChoice(allowed, pipelined)
        pipelined = allowed
        self.num_batch = engine.num_batch
        self.num_ctx = engine.num_ctx
        if slots is None:
            slots = InputCache(engine.cache, engine.parallel, engine.num_ctx)
        self.slots = slots
        self.speculator = speculator if speculator is not None else Speculator(engine)
        self.pipelined = pipelined
        self._incoming: deque[Sequence] = deque()
        self._active: list[InputFeed] = []
        self._next = 0
        self._wake = threading.Condition()
        self._stopping = False
        self._computer = Computer(engine, self._prompt_rate)
        self._thread = threading.Thread(target=self._run, name="batch-loop", daemon=True)
        self.steps = 0
        self.max_batch_seen = 0

    # -- public ---------------------------------------------------------------------------
    def start(self) -> None:
        if self.pipelined:
            self._computer.start()
        self._thread.start()

    def submit(self, seq: Sequence) -> None:
        with self._wake:
            self._incoming.append(seq)
            self._wake.notify()

    def stop(self) -> None:
        with self._wake:
            self._stopping = True
            self._wake.notify()
        self._thread.join(timeout=10)
        self._computer.stop()

    def _prompt_rate(self, seconds_per_row: float) -> None:
        """A prompt pass's measured cost: what the prompt cache weighs loads against."""
        self.slots.seconds_per_token = seconds_per_row

    # -- loop -----------------------------------------------------------------------------
    def _run(self) -> None:
        inflight: Flight | None = None
        while True:
            with self._wake:
                while not self._stopping and not self._has_work(inflight):
                    self._wake.wait()
                if self._stopping:
                    break
            try:
                inflight = self._step(inflight)
            except Exception as e:  # never let one bug stop every sequence
                _log.exception("batch loop step failed")
                for feed in list(self._active):
                    self._end(feed, error=f"internal error in the runner: {e}")
                inflight = None
        self._computer.settle()

    def _has_work(self, inflight: Flight | None) -> bool:
        return bool(inflight or self._incoming or self._active)

    def _step(self, inflight: Flight | None) -> Flight | None:
        nxt, composed = self._step_pass(inflight)
        self.pipelining.step(self._decoding_width(composed))
        return nxt

    @staticmethod
    def _decoding_width(flight: Flight | None) -> int:
        """Sequences a pass decodes one token each, or 0 when it is not such a pass."""
        if flight is None:
            return 0
        for e in flight.entries:
            if e.count != 1 or e.drafts:
                return 0
        return len(flight.entries)

    def _step_pass(self, inflight: Flight | None) -> tuple[Flight | None, Flight | None]:
        """One step: admit, sample the pass in flight, compose the next and compute it
        here or hand it to the worker (pipelining). Returns the pass now in flight and the
        pass this step composed (None for either where there is none)."""
        pipelining = self.pipelining.now()
        if self._incoming:
            # Admission may write the cache (a prefix loaded from disk; an encoder cache
            # copies an image's keys from slot to slot on the backend) and hand out cells the
            # pass in flight still writes (a finished sequence's placeholder): that pass ends
            # first (once per request admitted).
            self._computer.settle()
        self._admit()
        for feed in self._active:
            if feed.seq.cancelled.is_set() and not feed.seq.done:
                feed.seq.finish("stop")
        embedding = next((f for f in self._active if f.seq.embedding and not f.seq.done), None)
        if inflight is not None:
            assert inflight.started is not None  # only pipelined passes are in flight
            inflight.started.wait()
        nxt = None
        if embedding is None:
            nxt = self._compose(inflight if pipelining else None)
        # A pass whose placeholders take the engine's picks starts when the pass in flight
        # ends, without waiting for it to be read (compute.py: chained passes).
        chained = (
            pipelining
            and nxt is not None
            and inflight is not None
            and self._computer.chain(nxt, inflight)
        )
        if inflight is not None:
            assert inflight.done is not None
            inflight.done.wait()
            self._sample(inflight, nxt)
        self._reap()
        if embedding is not None:
            self._embed(embedding)
            return None, None
        if nxt is None:
            return None, None
        if not chained and all(e.feed.seq.done for e in nxt.entries):
            return None, None
        self.steps += 1
        if any(e.count > 1 for e in nxt.entries):
            # A pass with prompt inputs takes long: text held for the next chunk goes now.
            for feed in self._active:
                feed.seq.flush_stream()
        if chained:
            return nxt, nxt
        if not pipelining:  # compute here: no thread hand-over per token
            self._computer.run_here(nxt)
            self._sample(nxt, None)
            self._reap()
            return None, nxt
        self._computer.hand_over(nxt)
        return nxt, nxt

    def _admit(self) -> None:
        """Give waiting sequences a slot (with the prompt cache's reusable prefix), in order,
        while slots are free."""
        while True:
            with self._wake:
                if not self._incoming:
                    return
                seq = self._incoming[0]
                if seq.cancelled.is_set():
                    self._incoming.popleft()
                    seq.fail("cancelled")
                    continue
                try:
                    slot, cached = self.slots.acquire(
                        seq.prompt, reuse=not seq.embedding, marks=seq.marks
                    )
                except NoFreeSlotError:
                    return
                self._incoming.popleft()
            feed = InputFeed(seq, slot, Inputs(seq.prompt[cached:], seq.marks[cached:]))
            self.speculator.begin(feed, costly_wait=self.pipelined)
            seq.started(cached, evaluated=len(feed.pending))
            self._active.append(feed)

    # -- building a batch -----------------------------------------------------------------
    def _compose(self, inflight: Flight | None) -> Flight | None:
        """The next pass: which inputs go in (`_choose`), their rows (`_lay_out`), the
        engine's plan of it (`_plan`). `inflight`: the pass computing now, whose sampled
        tokens get placeholders in this one."""
        chosen, room = self._choose(inflight)
        if not chosen:
            return None
        drafting = self.speculator.add_drafts(chosen, room)
        entries, rows, inputs = self._lay_out(chosen)
        flight = self._plan(entries, rows, inputs)
        if flight is not None:
            flight.drafting = drafting
        return flight

    def _choose(self, inflight: Flight | None) -> tuple[list[Chosen], int]:
        """Admission to the pass: round robin from the resume point, each sequence taking
        what the room left and its own limits allow (`_take`); a sequence awaiting a token
        from `inflight` takes a placeholder for it. Moves the inputs out of their feeds.
        Returns them and the rows the pass has left."""
        spec = self.speculator
        awaiting = {
            id(e.feed)
            for e in (inflight.entries if inflight else [])
            if e.sample and not e.drafts and not (e.feed.pace and spec.drafts_next(e.feed))
        }
        active = [f for f in self._active if not f.seq.done and not f.seq.embedding]
        if not active:
            return [], 0
        chosen: list[Chosen] = []
        n = len(active)
        start = self._next % n
        left_out = None  # the first sequence with inputs that got no room
        partial = None  # the first one whose inputs were only partly taken
        used = 0  # inputs chosen so far
        for k in range(n):
            feed = active[(start + k) % n]
            placeholder = id(feed) in awaiting
            want = 1 if placeholder else len(feed.pending)
            if want == 0:
                continue
            room = self.num_batch - used
            if room <= 0:
                left_out = left_out or feed
                continue
            if len(feed.slot.tokens) + 1 > self.num_ctx and not self._make_room(feed, placeholder):
                continue
            if placeholder and feed.pending:  # reprocessing after a failed shift
                continue
            take = self._take(feed, room, want, placeholder)
            if take is None:
                left_out = left_out or feed
                continue
            if take <= 0:
                continue
            inputs = feed.plan_placeholder() if placeholder else feed.pending.take(take)
            chosen.append(Chosen(feed, inputs, placeholder))
            used += take
            if feed.pending:
                partial = partial or feed
        if chosen:
            # The next step starts with whoever got nothing this time, so no one starves.
            resume = left_out or partial
            self._next = active.index(resume) if resume is not None else (start + 1) % n
        return chosen, self.num_batch - used

    def _take(self, feed: InputFeed, room: int, want: int, placeholder: bool) -> int | None:
        """How many of the `want` inputs of `feed` go into this pass, `room` rows being left:
        0 for none now, None for none for lack of room (the sequence resumes the next pass).
        Ends a sequence whose next inputs can never fit a batch."""
        take = min(room, want, self.num_ctx - len(feed.slot.tokens))
        if placeholder:
            return take
        pending = feed.pending
        if want == 1 and take == 1 and pending.ids[0] >= 0 and not pending.marks[0]:
            return 1  # (a sampled token: no run to keep whole, no image to cut before)
        take = pending.group_start(take)  # SameBatch runs stay whole
        state_cut = feed.state_cut(take, self.engine.replaces_state)
        if state_cut:
            return state_cut  # even one lone row: what precedes a new image goes first
        if want >= 2:
            # Prompt rows go in runs of two or more: ggml computes a lone row with other
            # kernels, which would make the numbers depend on how the prompt was split.
            # With the whole batch (room == num_batch) and still no run of two (num_batch 1,
            # or 2 on an odd prompt) the rows go as they fit: waiting would wait for ever.
            fits = take
            if want - take == 1:
                take = pending.group_start(take - 1)
            if take < 2:
                if pending.group_start(self.num_batch) == 0:  # can never fit
                    self._end(feed, error=self._unbatchable(feed))
                    return 0
                if room < self.num_batch:  # others took part: this one goes first next pass
                    return None
                take = fits
        return take

    def _lay_out(self, chosen: list[Chosen]) -> tuple[list[Entry], dict[int, int], PassInput]:
        """The pass's rows: each sequence's inputs together, at the positions that follow its
        slot's content (which they extend), and the rows to sample (entry index -> output
        row). Rows go in slot order, whatever the round robin's starting point: the batch
        then has the same shape step after step, so its built (and allocated) graph is
        reused."""
        tokens: list[int] = []
        positions: list[int] = []
        seqs: list[int] = []
        entries: list[Entry] = []
        drafted = False
        if len(chosen) > 1:
            chosen = sorted(chosen, key=lambda c: c.feed.slot.id)
        for c in chosen:
            slot = c.feed.slot
            take = len(c.inputs)
            pos0 = len(slot.tokens)
            sample = not c.feed.pending
            entries.append(Entry(c.feed, len(tokens), take, sample, c.placeholder, c.drafts))
            drafted = drafted or bool(c.drafts)
            tokens.extend(c.inputs.ids)
            positions.extend(range(pos0, pos0 + take))
            seqs.extend([slot.id] * take)
            slot.extend(c.inputs.ids, c.inputs.marks)
        # Each sampling entry's output rows: its last input's, or all of a drafting one's.
        rows: dict[int, int] = {}  # entry index -> its first output row
        out: list[int] = []
        for i, e in enumerate(entries):
            if e.sample:
                rows[i] = len(out)
                first = e.start if e.drafts else e.start + e.count - 1
                out.extend(range(first, e.start + e.count))
        outputs = np.array(out or [len(tokens) - 1], dtype=np.int32)
        drafting = frozenset(e.feed.slot.id for e in entries if e.drafts) if drafted else _NONE
        # Where every sampled row only wants its argmax, the engine picks the tokens (on a
        # device only their ids then cross to the host); drafts are checked on logits.
        picks = (
            bool(out) and not drafting and all(e.feed.seq.takes_picks for e in entries if e.sample)
        )
        inputs = PassInput(
            np.array(tokens, dtype=np.int32),
            np.array(positions, dtype=np.int32),
            np.array(seqs, dtype=np.int32),
            outputs,
            lone_rows=drafting,
            greedy=picks,
        )
        return entries, rows, inputs

    def _plan(self, entries: list[Entry], rows: dict[int, int], inputs: PassInput) -> Flight | None:
        """The engine's plan of the pass; a full cache ends the pass's sequences."""
        try:
            plan = self.engine.plan(inputs)
        except CacheFullError as e:
            for entry in entries:
                self._end(entry.feed, error=f"{e}; the request was stopped")
            return None
        self.max_batch_seen = max(self.max_batch_seen, len(inputs.tokens))
        return Flight(plan, entries, rows, picks=inputs.greedy, size=len(inputs.tokens))

    def _unbatchable(self, feed: InputFeed) -> str:
        """Why a sequence's next inputs can never be batched (a SameBatch run too long)."""
        run = feed.pending.marks[0] + 1
        return (
            f"{run} inputs (an image) must be evaluated in one batch but a batch holds "
            f"{self.num_batch}; raise num_batch"
        )

    def _make_room(self, feed: InputFeed, placeholder: bool) -> bool:
        """The sequence's context is full: shift (or reprocess), or end it with 'length'
        (after the token being sampled now, if any, has been sent)."""
        seq = feed.seq
        if not seq.settings.shift:
            if placeholder:
                feed.limit_reached = True
            else:
                seq.finish("length")
            return False
        self._computer.settle()  # a shift rewrites the keys a pass in flight may be using
        try:
            self.slots.shift(feed.slot, seq.num_keep)
        except ReprocessInputs as r:
            feed.reprocess(Inputs(r.kept, r.marks))
        seq.context_shifted()
        return True

    # -- after a batch --------------------------------------------------------------------
    def _sample(self, flight: Flight, nxt: Flight | None) -> None:
        if flight.error is not None:
            message = f"computing failed: {flight.error}"
            for entry in flight.entries:
                self._end(entry.feed, error=message)
            return
        assert flight.logits is not None
        patches: dict[int, tuple[InputFeed, int]] = {}  # id(feed) -> its sampled token
        for i, entry in enumerate(flight.entries):
            seq = entry.feed.seq
            if not entry.sample or seq.done:
                continue
            if seq.cancelled.is_set():
                seq.finish("stop")
                continue
            try:
                if entry.drafts:
                    token, entry.produced = self.speculator.check(
                        entry.feed, entry.drafts, flight.logits, flight.rows[i]
                    )
                else:
                    row = flight.logits[flight.rows[i]]
                    if flight.picks:  # the engine's pick
                        token = seq.accept_logits(None, picked=int(row))
                    else:
                        token = seq.accept_logits(row)
                    if token is not None and entry.feed.pace is not None:
                        self.speculator.sampled(entry.feed, token)
            except Exception as e:  # a broken sampler state ends one sequence
                seq.fail(f"sampling failed: {e}")
                continue
            if token is not None:
                patches[id(entry.feed)] = (entry.feed, token)
        if nxt is not None:
            for entry in nxt.entries:
                if entry.placeholder and id(entry.feed) in patches:
                    # A placeholder is its sequence's only input and the slot's last token.
                    _, token = patches.pop(id(entry.feed))
                    if not nxt.chained:  # (a chained pass's compute thread fills it)
                        nxt.plan.tokens[entry.start] = token
                    entry.feed.fill_placeholder(token)
        for feed, token in patches.values():  # not planned yet: evaluate next step
            if feed.limit_reached:
                feed.seq.finish("length")
                continue
            feed.add_sampled(token)
        self.speculator.weigh(flight.entries, flight.seconds, flight.drafting, self._active)

    def _reap(self) -> None:
        for feed in [f for f in self._active if f.seq.done]:
            self._active.remove(feed)
            if feed.placeholder_planned:  # it ended before its next token existed
                feed.drop_placeholder()
            self.slots.release(feed.slot, keep=feed.tokens_to_keep())

    def _end(self, feed: InputFeed, error: str) -> None:
        """End an active sequence with `error` (a sequence already gone is left alone: its
        slot may be another's by now, e.g. a chained pass failing after the one before)."""
        feed.seq.fail(error)
        if feed in self._active:
            self._active.remove(feed)
            self.slots.release(feed.slot, keep=0)

    # -- embeddings -----------------------------------------------------------------------
    def _embed(self, feed: InputFeed) -> None:
        """The sequence's embedding (embedding.py), then its slot is free."""
        try:
            vector = embed(self.engine, feed.pending.ids, feed.slot.id)
        except CacheFullError as e:
            self._end(feed, error=str(e))
            return
        feed.seq.embedded(vector, len(feed.pending))
        self._active.remove(feed)
        self.slots.release(feed.slot, keep=0)
