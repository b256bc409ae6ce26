"""The batching loop: many sequences served together on one model.

Each step builds one batch of at most `num_batch` inputs from the active sequences, round
robin: a sequence's prompt is split across steps when it does not fit, and the first sequence
left out entirely becomes the resume point of the next step, so a long prompt cannot starve a
short one. Rows are laid out in slot order (not round-robin order) so that steady decoding
keeps one batch shape and reuses its graph. Logits are computed only for the rows that need
sampling (a sequence's last input).

Determinism: a sequence's numbers never depend on what shares its batch or on how its prompt
was split (per-sequence attention, prompt pieces of at least two rows, see slots.py), so the
same request gives the same tokens alone, under load, or from the prompt cache.

Pipelining (when a CPU core is left over by the compute threads): while batch N computes on
the worker thread (ggml releases the GIL), the loop builds batch N+1. Sequences sampling from
N get a placeholder input in N+1 whose value is filled in once N is sampled. A sequence that
finished at N leaves its placeholder unused; its cache cell is dropped when the slot is
released.

Failures stay local: an error in one sequence (a full cache, a broken grammar state) ends that
sequence with a message; the loop goes on serving the others.
"""

from __future__ import annotations

import logging
import os
import queue
import threading
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from ..engine.kvcache import CacheFullError
from ..engine.prompt_cache import InputCache, NoFreeSlotError, ReprocessInputs, group_start
from .sequence import Sequence

__all__ = ["BatchLoop", "PassEngine"]


class PassEngine(Protocol):
    """What the loop uses of an engine: `hearth.engine.forward.ForwardEngine` (Hearth's own)
    or `hearth.engine.llamacpp.LlamaCppEngine`. `plan()` returns a pass whose `tokens` array
    may still change before `run()` (tokens being sampled); `cache` is the per-sequence cache
    the prompt cache (`InputCache`) edits; `pooling` ("mean", "first", "last") is how the
    loop pools `hidden=True` rows into an embedding."""

    num_ctx: int
    num_batch: int
    parallel: int
    pooling: str

    @property
    def cache(self) -> Any: ...

    def plan(
        self,
        tokens: np.ndarray,
        positions: np.ndarray,
        sequences: np.ndarray,
        outputs: np.ndarray,
        hidden: bool = False,
    ) -> Any: ...

    def run(self, p: Any, on_started: Callable[[], None] | None = None) -> np.ndarray: ...

    def forward(
        self,
        tokens: np.ndarray,
        positions: np.ndarray,
        sequences: np.ndarray,
        outputs: np.ndarray,
        hidden: bool = False,
    ) -> np.ndarray: ...

    def replaces_state(self, token: int) -> bool: ...

    def close(self) -> None: ...


_log = logging.getLogger("hearth.runner")


@dataclass
class _Entry:
    seq: Sequence
    start: int  # batch row of the first input
    count: int
    sample: bool  # the last input's logits are sampled
    placeholder: bool = False  # the single input is a token still being sampled


@dataclass
class _Flight:
    plan: Any  # the engine's planned pass (its `tokens` may still change)
    entries: list[_Entry]
    rows: dict[int, int]  # entry index -> output row
    # A pass the compute worker runs (pipelined) tells the loop when it started and ended;
    # one the loop thread runs itself needs no signals (two Events per token cost time).
    started: threading.Event | None = None
    done: threading.Event | None = None
    logits: np.ndarray | None = None
    error: BaseException | None = None


class BatchLoop:
    """See the module docstring. `submit()` from any thread; everything else is internal."""

    def __init__(
        self,
        engine: PassEngine,
        multi_user: bool = False,
        pipelined: bool | None = None,
    ) -> None:
        """`pipelined` None: when a core is spare (the engine's `backend.num_threads`); an
        engine without such a backend (llama.cpp, whose cache must not change while it
        computes) is never pipelined."""
        self.engine = engine
        if pipelined is None:
            # Building the next batch while one computes only pays when a core is free for
            # it; otherwise the Python work slows the compute threads down more than it saves.
            backend = getattr(engine, "backend", None)
            pipelined = backend is not None and (os.cpu_count() or 1) > backend.num_threads
        self.num_batch = engine.num_batch
        self.num_ctx = engine.num_ctx
        self.slots = InputCache(engine.cache, engine.parallel, engine.num_ctx, multi_user)
        self.pipelined = pipelined
        self._incoming: deque[Sequence] = deque()
        self._active: list[Sequence] = []
        self._next = 0
        self._wake = threading.Condition()
        self._stopping = False
        self._jobs: queue.Queue[_Flight | None] = queue.Queue()
        self._worker = threading.Thread(target=self._compute_worker, name="compute", daemon=True)
        self._thread = threading.Thread(target=self._run, name="batch-loop", daemon=True)
        self.steps = 0
        self.max_batch_seen = 0

    # -- public ---------------------------------------------------------------------------
    def start(self) -> None:
        if self.pipelined:
            self._worker.start()
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
        if self._worker.is_alive():
            self._jobs.put(None)
            self._worker.join(timeout=10)

    # -- worker ---------------------------------------------------------------------------
    def _compute_worker(self) -> None:
        while (flight := self._jobs.get()) is not None:
            self._execute(flight)

    def _state_cut(self, seq: Sequence, take: int) -> int:
        """Where `seq`'s inputs in this pass must end (0: nowhere) so that a whole multimodal
        item replacing an earlier one of the sequence (`ForwardEngine.replaces_state`: a second
        mllama image) starts a pass: the inputs before it still attend to the earlier item,
        which the new one replaces in the cache during its pass."""
        pending = seq.pending
        if not any(t < 0 for t in pending[:take]):
            return 0
        assert seq.slot is not None
        replaces = self.engine.replaces_state
        held = any(replaces(t) for t in seq.slot.tokens if t < 0)
        for i in range(take):
            if replaces(pending[i]):
                if i and held:
                    return i
                held = True
        return 0

    def _execute(self, flight: _Flight) -> None:
        try:
            on_started = flight.started.set if flight.started is not None else None
            flight.logits = self.engine.run(flight.plan, on_started=on_started)
        except BaseException as e:  # handed to the loop thread
            flight.error = e
        finally:
            if flight.started is not None and flight.done is not None:
                flight.started.set()
                flight.done.set()

    # -- loop -----------------------------------------------------------------------------
    def _run(self) -> None:
        inflight: _Flight | None = None
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
                for seq in list(self._active):
                    self._end(seq, error=f"internal error in the runner: {e}")
                inflight = None
        if inflight is not None and inflight.done is not None:
            inflight.done.wait()

    def _has_work(self, inflight: _Flight | None) -> bool:
        return bool(inflight or self._incoming or self._active)

    def _step(self, inflight: _Flight | None) -> _Flight | None:
        self._admit()
        for seq in [s for s in self._active if s.cancelled.is_set() and not s.done]:
            seq.finish("stop")
        embedding = next((s for s in self._active if s.embedding and not s.done), None)
        if inflight is not None:
            assert inflight.started is not None  # only pipelined passes are in flight
            inflight.started.wait()
        nxt = None
        if embedding is None:
            nxt = self._compose(inflight if self.pipelined else None)
        if inflight is not None:
            assert inflight.done is not None
            inflight.done.wait()
            self._sample(inflight, nxt)
        self._reap()
        if embedding is not None:
            self._embed(embedding)
            return None
        if nxt is None:
            return None
        live = [e for e in nxt.entries if not e.seq.done]
        if not live:
            return None
        self.steps += 1
        if any(e.count > 1 for e in nxt.entries):
            # A pass with prompt inputs takes long: text held for the next chunk goes now.
            for seq in self._active:
                seq.flush_stream()
        if not self.pipelined:  # compute here: no thread hand-over per token
            self._execute(nxt)
            self._sample(nxt, None)
            self._reap()
            return None
        nxt.started, nxt.done = threading.Event(), threading.Event()
        self._jobs.put(nxt)
        return nxt

    def _admit(self) -> None:
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
            seq.start(slot, cached)
            self._active.append(seq)

    # -- building a batch -----------------------------------------------------------------
    def _compose(self, inflight: _Flight | None) -> _Flight | None:
        awaiting = {id(e.seq) for e in (inflight.entries if inflight else []) if e.sample}
        tokens: list[int] = []
        positions: list[int] = []
        seqs: list[int] = []
        entries: list[_Entry] = []
        # (sequence, inputs, their same_batch marks, placeholder)
        chosen: list[tuple[Sequence, list[int], list[int], bool]] = []
        active = [s for s in self._active if not s.done and not s.embedding]
        if not active:
            return None
        n = len(active)
        start = self._next % n
        left_out = None  # the first sequence with inputs that got no room
        partial = None  # the first one whose inputs were only partly taken
        used = 0  # inputs chosen so far
        for k in range(n):
            seq = active[(start + k) % n]
            slot = seq.slot
            assert slot is not None
            placeholder = id(seq) in awaiting
            want = 1 if placeholder else len(seq.pending)
            if want == 0:
                continue
            room = self.num_batch - used
            if room <= 0:
                left_out = left_out or seq
                continue
            if len(slot.tokens) + 1 > self.num_ctx and not self._make_room(seq, placeholder):
                continue
            if placeholder and seq.pending:  # reprocessing after a failed shift
                continue
            take = min(room, want, self.num_ctx - len(slot.tokens))
            if not placeholder:
                take = group_start(seq.pending_marks, take)  # SameBatch runs stay whole
            state_cut = 0 if placeholder else self._state_cut(seq, take)
            if state_cut:
                take = state_cut  # even one lone row: what precedes a new image goes first
            elif want >= 2:
                # Prompt rows go in runs of two or more: ggml computes a lone row with other
                # kernels, which would make the numbers depend on how the prompt was split.
                # With the whole batch (used == 0) and still no run of two (num_batch 1 or 2)
                # the rows go as they fit: waiting would wait for ever.
                fits = take
                if want - take == 1:
                    take = group_start(seq.pending_marks, take - 1)
                if take < 2:
                    if group_start(seq.pending_marks, self.num_batch) == 0:  # can never fit
                        self._end(seq, error=self._unbatchable(seq))
                        continue
                    if used:  # others took part of the batch: this one goes first next step
                        left_out = left_out or seq
                        continue
                    take = fits
            if take <= 0:
                continue
            items = [0] if placeholder else seq.pending[:take]
            marks = [0] if placeholder else seq.pending_marks[:take]
            if placeholder:
                seq.fed += 1
                seq.placeholder_planned = True
            else:
                del seq.pending[:take]
                del seq.pending_marks[:take]
            chosen.append((seq, items, marks, placeholder))
            used += take
            if seq.pending:
                partial = partial or seq
        # Rows in slot order, whatever the round robin's starting point: the batch then has
        # the same shape step after step, so its built (and allocated) graph is reused.
        chosen.sort(key=lambda c: c[0].slot.id)  # type: ignore[union-attr]
        for seq, items, marks, placeholder in chosen:
            slot = seq.slot
            assert slot is not None
            take = len(items)
            pos0 = len(slot.tokens)
            entries.append(
                _Entry(seq, len(tokens), take, sample=not seq.pending, placeholder=placeholder)
            )
            tokens.extend(items)
            positions.extend(range(pos0, pos0 + take))
            seqs.extend([slot.id] * take)
            slot.extend(items, marks)
        if not entries:
            return None
        # The next step starts with whoever got nothing this time, so no one starves.
        resume = left_out or partial
        self._next = active.index(resume) if resume is not None else (start + 1) % n
        rows = {i: e.start + e.count - 1 for i, e in enumerate(entries) if e.sample}
        out_rows = np.array(list(rows.values()) or [len(tokens) - 1], dtype=np.int32)
        rows = {i: r for r, i in enumerate(rows)}
        try:
            plan = self.engine.plan(
                np.array(tokens, dtype=np.int32),
                np.array(positions, dtype=np.int32),
                np.array(seqs, dtype=np.int32),
                out_rows,
            )
        except CacheFullError as e:
            for entry in entries:
                self._end(entry.seq, error=f"{e}; the request was stopped")
            return None
        self.max_batch_seen = max(self.max_batch_seen, len(tokens))
        return _Flight(plan, entries, rows)

    def _unbatchable(self, seq: Sequence) -> str:
        """Why a sequence's next inputs can never be batched (a SameBatch run too long)."""
        run = seq.pending_marks[0] + 1
        return (
            f"{run} inputs (an image) must be evaluated in one batch but a batch holds "
            f"{self.num_batch}; raise num_batch"
        )

    def _make_room(self, seq: Sequence, placeholder: bool) -> bool:
        """The sequence's context is full: shift (or reprocess), or end it with 'length'
        (after the token being sampled now, if any, has been sent)."""
        assert seq.slot is not None
        if not seq.settings.shift:
            if placeholder:
                seq.limit_reached = True
            else:
                seq.finish("length")
            return False
        try:
            self.slots.shift(seq.slot, seq.num_keep)
        except ReprocessInputs as r:
            seq.pending = r.kept + seq.pending
            seq.pending_marks = r.marks + seq.pending_marks
            seq.slot.set([])
        seq.shifted = True
        return True

    # -- after a batch --------------------------------------------------------------------
    def _sample(self, flight: _Flight, nxt: _Flight | None) -> None:
        if flight.error is not None:
            message = f"computing failed: {flight.error}"
            for entry in flight.entries:
                self._end(entry.seq, error=message)
            return
        assert flight.logits is not None
        patches: dict[int, int] = {}
        for i, entry in enumerate(flight.entries):
            seq = entry.seq
            if not entry.sample or seq.done:
                continue
            if seq.cancelled.is_set():
                seq.finish("stop")
                continue
            try:
                token = seq.accept_logits(flight.logits[flight.rows[i]])
            except Exception as e:  # a broken sampler state ends one sequence
                seq.fail(f"sampling failed: {e}")
                continue
            if token is not None:
                patches[id(seq)] = token
        if nxt is not None:
            for entry in nxt.entries:
                if entry.placeholder and id(entry.seq) in patches:
                    # A placeholder is its sequence's only input and the slot's last token.
                    token = patches.pop(id(entry.seq))
                    nxt.plan.tokens[entry.start] = token
                    entry.seq.slot.tokens[-1] = token  # type: ignore[union-attr]
                    entry.seq.placeholder_planned = False
        for seq_id, token in patches.items():  # not planned yet: evaluate next step
            seq = next(s for s in self._active if id(s) == seq_id)
            if seq.limit_reached:
                seq.finish("length")
                continue
            seq.pending.append(token)
            seq.pending_marks.append(0)
            seq.fed += 1

    def _reap(self) -> None:
        for seq in [s for s in self._active if s.done]:
            self._active.remove(seq)
            if seq.slot is None:
                continue
            if seq.placeholder_planned:  # it ended before its next token existed
                seq.slot.keep(len(seq.slot.tokens) - 1)
                seq.fed -= 1
                seq.placeholder_planned = False
            self.slots.release(seq.slot, keep=seq.tokens_to_keep())

    def _end(self, seq: Sequence, error: str) -> None:
        seq.fail(error)
        if seq in self._active:
            self._active.remove(seq)
        if seq.slot is not None and seq.slot.in_use:
            self.slots.release(seq.slot, keep=0)

    # -- embeddings -----------------------------------------------------------------------
    def _embed(self, seq: Sequence) -> None:
        """Pooled, L2-normalised hidden states of the whole input, evaluated in batches."""
        assert seq.slot is not None
        tokens = seq.pending
        n = len(tokens)
        pooling = self.engine.pooling
        total = np.zeros(0, dtype=np.float32)
        vec = None
        try:
            for start in range(0, n, self.num_batch):
                part = tokens[start : start + self.num_batch]
                m = len(part)
                rows = np.arange(m) if pooling == "mean" else np.array([m - 1])
                hidden = self.engine.forward(
                    np.array(part),
                    np.arange(start, start + m),
                    np.full(m, seq.slot.id),
                    rows,
                    hidden=True,
                )
                if pooling == "mean":
                    total = hidden.sum(axis=0) if not len(total) else total + hidden.sum(axis=0)
                elif pooling == "first" and start == 0:
                    vec = hidden[0]
                elif pooling == "last":
                    vec = hidden[-1]
        except CacheFullError as e:
            self._end(seq, error=str(e))
            return
        if pooling == "mean":
            vec = total / n
        assert vec is not None
        norm = float(np.linalg.norm(vec)) or 1.0
        seq.events.put({"embedding": (vec / norm).tolist(), "prompt_eval_count": n})
        seq.events.put(None)
        seq.done = True
        self._active.remove(seq)
        self.slots.release(seq.slot, keep=0)
