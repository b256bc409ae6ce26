"""The scheduler: which models are loaded, in which runner processes, for how long.

One `hearth runner` subprocess per loaded model file. A request `acquire()`s a lease on the
model's runner (loading it on demand, one load at a time) and the lease's release starts the
keep-alive timer. The rules:

- Reuse: a loaded runner serves a request unless the request needs more context (`num_ctx`)
  than it was started with, a different flash-attention or K/V cache type, a vision projector
  the runner was not started with (two models may share a file, one with a projector and one
  without), or sets `num_batch` / `num_thread` itself to values other than the runner's. A
  request that asks for a smaller `num_ctx`, or for no projector, is served by the loaded
  runner. Otherwise the runner is retired (once its requests finish) and started again with
  the request's settings.
- Queue: at most HEARTH_MAX_QUEUE requests wait for a runner; more are refused (ServerBusy,
  answered with 503).
- Room: when the maximum number of models is loaded (HEARTH_MAX_LOADED_MODELS), or the new
  model's estimated memory does not fit in what the system has free, idle runners are
  unloaded, least recently used first; when none is idle, the load waits for one to become
  idle.
- Layout (with a `Placement`, as the service has): before anything is unloaded, a model whose
  FIT report (`LoadSpec.fit`) exceeds free memory + swap + what the loaded models hold is
  refused (`ModelTooLarge`, answered with 507, the numbers in the sentence); after the room
  above is made, the layout is planned from the file (`load_layout.py`), and a layout that needs
  more than is free while other models are loaded unloads one more and is planned again. Then
  the runner starts with it; a start that runs out of memory on a device is retried on the CPU.
- Keep-alive: a runner with no requests left stays loaded for the request's keep-alive, then
  is stopped; keep-alive 0 stops it at once, a negative one keeps it forever.
- Failure: a runner that dies fails only the requests that were using it and is replaced on
  the next request. A start that fails for lack of memory while other models are loaded
  unloads one of them and tries again.

This follows Ollama's scheduler (https://github.com/ollama/ollama/blob/main/server/sched.go:
one runner per model, a bounded queue, keep-alive timers, unloading idle runners to make room)
except that Ollama reloads a model for any change of its runner options, a smaller `num_ctx`
included.

Parallel slots: with HEARTH_NUM_PARALLEL unset, a spec carries the (slots, estimate) pairs to
try beside its one-slot fallback, and the load takes the first (4 slots) whose estimate fits in
the memory available once room for one slot has been made, else one slot (the rule Ollama used
while its OLLAMA_NUM_PARALLEL defaulted to "4 or 1, by memory").
A runner that fails to start with several slots is started again with one.

Everything here runs on the service's event loop; no locks other than the load lock.

The records (`LoadSpec`, `Loaded`, `Lease`, the errors) are in records.py; what one load
decides from its spec, the memory and the layout (FIT report, refusal, slots, the retries'
specs) in load_choices.py. This module keeps the table of loaded runners: leases, loading,
eviction, keep-alive.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import replace

from ...engine.ml.devices import system_available_memory
from ...runner.protocol import EngineKind, to_wire
from ..config import FOREVER, ServerConfig
from .layout import Layout, LoadRequiresEviction, MemoryReport, ModelTooLarge
from .load_choices import (
    choose_parallel,
    fit_report,
    on_llamacpp,
    refuse_if_too_large,
    system_memory_needed,
    with_layout,
)
from .load_layout import Placed, Placement
from .records import (
    Launcher,
    Lease,
    Loaded,
    LoadFailed,
    LoadSpec,
    RunnerHandle,
    ServerBusy,
    held,
    process_launcher,
)
from .runner_process import RunnerStartError

__all__ = ["Scheduler"]

log = logging.getLogger("hearth.scheduler")


class Scheduler:
    def __init__(
        self,
        config: ServerConfig,
        launcher: Launcher = process_launcher,
        available_memory: Callable[[], int | None] = system_available_memory,
        placement: Placement | None = None,
    ) -> None:
        self.config = config
        self._launcher = launcher
        self._available = available_memory
        self._placement = placement
        self._entries: dict[str, Loaded] = {}
        self._load_lock = asyncio.Lock()
        self._changed = asyncio.Event()  # set whenever a runner becomes idle or goes away
        self._waiting = 0
        self._tasks: set[asyncio.Task[None]] = set()
        # The memory report of the last runner per model file and projector (None: without
        # one; the projector's weights count): better than an estimate.
        self.measured: dict[tuple[str, str | None], dict[str, int]] = {}
        # Model file -> why Hearth's plugin refused it (the llama.cpp engine runs it since).
        self.plugin_refusals: dict[str, str] = {}

    # -- public ----------------------------------------------------------------------------

    async def preview(self, report: MemoryReport) -> tuple[Layout, MemoryReport]:
        """The layout a load would choose for `report` now (see `Placement.preview`); all on
        the CPU without a placement."""
        if self._placement is None:
            return Layout(), report
        return await self._placement.preview(report)

    def loaded(self) -> list[Loaded]:
        """Runners that are up, most recently used first (dead ones are dropped)."""
        for entry in [e for e in self._entries.values() if not e.runner.alive]:
            self._drop(entry)
        return sorted(self._entries.values(), key=lambda e: -e.last_used)

    async def acquire(self, spec: LoadSpec, keep_alive: float) -> Lease:
        """A lease on a runner for `spec`, loading it when needed. Raises ServerBusy when the
        queue is full and LoadFailed when the model cannot be loaded."""
        if self._waiting >= self.config.max_queue:
            raise ServerBusy(
                f"server busy: {self._waiting} requests are already waiting "
                "(HEARTH_MAX_QUEUE); try again shortly"
            )
        self._waiting += 1
        start = time.perf_counter_ns()
        try:
            entry = self._usable(spec) or await self._load(spec)
            entry.refs += 1
            entry.idle.clear()
            entry.keep_alive = keep_alive
            entry.expires_at = time.time() + keep_alive
            if entry.timer is not None:
                entry.timer.cancel()
                entry.timer = None
            try:
                await entry.slots.acquire()
            except BaseException:
                entry.refs -= 1
                self._after_idle(entry)
                raise
        finally:
            self._waiting -= 1
        return Lease(entry, time.perf_counter_ns() - start, self._release)

    async def unload(self, key: str) -> bool:
        """Unload the runner for `key` now if idle, else as soon as its requests finish."""
        entry = self._entries.get(key)
        if entry is None:
            return False
        entry.keep_alive = 0.0
        if entry.refs == 0:
            await self._stop(entry)
        return True

    def runner_failed(self, entry: Loaded, crashed: bool = False) -> None:
        """A request saw its runner die, or break off (`crashed`: a native abort may take a
        while to end the process): forget it, and end it, so the next request loads a new
        one."""
        if crashed or not entry.runner.alive:
            log.warning("runner for %s (pid %s) stopped", entry.spec.name, entry.runner.pid)
            self._drop(entry)

    async def close(self) -> None:
        entries = list(self._entries.values())
        self._entries.clear()
        await asyncio.gather(*(e.runner.stop() for e in entries), return_exceptions=True)
        for task in list(self._tasks):
            task.cancel()

    # -- internals -------------------------------------------------------------------------

    def _usable(self, spec: LoadSpec) -> Loaded | None:
        entry = self._entries.get(spec.key)
        return entry if entry is not None and entry.serves(spec) else None

    async def _load(self, spec: LoadSpec) -> Loaded:
        async with self._load_lock:
            entry = self._usable(spec)  # loaded by another request while this one waited
            if entry is not None:
                return entry
            old = self._entries.get(spec.key)
            if old is not None:
                await self._retire(old)
            report = await fit_report(spec, self._placement)  # read from the file once for both
            await refuse_if_too_large(
                spec, report, self._placement, sum(held(e) for e in self._entries.values())
            )
            await self._make_room(spec, report)
            spec, fallback = choose_parallel(spec, self._available())
            planned, fallback, placed = await self._place(spec, fallback)
            spec, runner = await self._start(planned, fallback)
            if placed is not None and spec is not planned:  # one slot, or the CPU, instead
                report = await fit_report(spec, self._placement)
                placed = replace(placed, memory=report) if report is not None else None
                if placed is not None and spec.options.layout is None and placed.layout.devices:
                    placed = Placed(Layout(), placed.memory, "CPU only")
            if placed is not None:
                placed = placed.with_measured(runner.info.devices)
            if self._placement is not None:
                self._placement.devices_changed()  # the next plan sees what this one holds
            log.info(
                "%s loaded with %d parallel slot%s (%s)",
                spec.name,
                spec.options.parallel,
                "" if spec.options.parallel == 1 else "s",
                spec.parallel_reason or "as asked",
            )
            self.measured[spec.key, spec.options.projector] = to_wire(runner.info.memory)
            options = spec.options
            entry = Loaded(spec, runner, asyncio.Semaphore(max(1, options.parallel)), placed=placed)
            self._entries[spec.key] = entry
            return entry

    async def _place(
        self, spec: LoadSpec, fallback: LoadSpec | None
    ) -> tuple[LoadSpec, LoadSpec | None, Placed | None]:
        """The layout planned before the runner starts (see `placement`): a layout that needs
        more memory than is free while other models are loaded first drops automatically
        chosen slots, then unloads the least recently used idle model, and is planned again.
        Returns the spec, its one-slot fallback and the layout chosen (None: none planned)."""
        while (
            report := await fit_report(spec, self._placement)
        ) is not None and self._placement is not None:
            try:
                placed = await self._placement.plan(
                    spec.name, report, spec.layout_options, others_loaded=bool(self._entries)
                )
                if placed is not None:
                    spec, fallback = with_layout(spec, placed), with_layout(fallback, placed)
                return spec, fallback, placed
            except (LoadRequiresEviction, ModelTooLarge) as e:
                if fallback is not None:
                    reason = f"automatic: {spec.options.parallel} slots do not fit in memory"
                    spec, fallback = replace(fallback, parallel_reason=reason), None
                elif isinstance(e, LoadRequiresEviction) and self._entries:
                    log.info("unloading a model to make room for %s: %s", spec.name, e)
                    await self._evict_one()
                else:
                    raise ModelTooLarge(f"{spec.name} cannot be loaded: {e}") from None
        return spec, fallback, None

    async def _retire(self, entry: Loaded) -> None:
        """Unload a runner that must be reloaded with other options, once it is idle."""
        entry.retiring = True
        if entry.refs and entry.runner.alive:
            await entry.idle.wait()
        await self._stop(entry)

    async def _make_room(self, spec: LoadSpec, report: MemoryReport | None) -> None:
        while len(self._entries) >= self.config.max_loaded_models:
            await self._evict_one()
        need = await system_memory_needed(spec, report, self._placement)
        while self._entries and need:
            available = self._available()
            if available is None or need <= available:
                return
            log.info("unloading a model to make room for %s", spec.name)
            await self._evict_one()
            need = await system_memory_needed(
                spec, report, self._placement
            )  # GPUs may have room now

    async def _evict_one(self) -> None:
        """Stop the least recently used idle runner, waiting for one to become idle."""
        while True:
            idle = [e for e in self._entries.values() if e.refs == 0 or not e.runner.alive]
            if idle:
                await self._stop(min(idle, key=lambda e: e.last_used))
                return
            self._changed.clear()
            await self._changed.wait()

    async def _start(
        self, spec: LoadSpec, fallback: LoadSpec | None = None
    ) -> tuple[LoadSpec, RunnerHandle]:
        """Start a runner for `spec`; a start that fails with automatically chosen slots is
        tried again with `fallback` (one slot). Returns the spec used and the runner."""
        while True:
            try:
                return spec, await self._launcher(spec.path, spec.options, self.config.load_timeout)
            except RunnerStartError as e:
                if spec.options.layout is not None:
                    # Hearth's layout search counts what a device needs from the file; when the
                    # device still runs out (or is gone: an RPC worker), run on the CPU.
                    log.warning(
                        "%s did not start with its layout on %s (%s); starting it on the CPU",
                        spec.name,
                        spec.options.layout,
                        e,
                    )
                    spec = with_layout(spec, None)
                    fallback = with_layout(fallback, None)
                    continue
                if fallback is not None:
                    log.warning(
                        "%s did not start with %d parallel slots (%s); trying one",
                        spec.name,
                        spec.options.parallel,
                        e,
                    )
                    reason = f"automatic: {spec.options.parallel} slots failed to start"
                    spec, fallback = replace(fallback, parallel_reason=reason), None
                    continue
                if e.refused and spec.engine_fallback and spec.options.engine == EngineKind.HEARTH:
                    log.warning(
                        "Hearth's plugin could not load %s (%s); running it on the llama.cpp "
                        "engine",
                        spec.name,
                        e,
                    )
                    self.plugin_refusals[spec.path] = str(e)
                    spec = on_llamacpp(spec)
                    continue
                # Out of memory with other models loaded: unload one and try again.
                if self._entries and "memory" in str(e).lower():
                    await self._evict_one()
                    continue
                raise LoadFailed(str(e)) from None
            except TimeoutError:
                raise LoadFailed(
                    f"loading {spec.name} stalled for {self.config.load_timeout:.0f}s "
                    "(HEARTH_LOAD_TIMEOUT)"
                ) from None

    def _release(self, entry: Loaded) -> None:
        entry.slots.release()
        entry.refs -= 1
        entry.last_used = time.monotonic()
        entry.expires_at = time.time() + entry.keep_alive
        self._after_idle(entry)

    def _after_idle(self, entry: Loaded) -> None:
        if entry.refs > 0:
            return
        entry.idle.set()
        self._changed.set()
        if self._entries.get(entry.spec.key) is not entry or entry.retiring:
            return
        if not entry.runner.alive:
            self._drop(entry)
        elif entry.keep_alive <= 0:
            self._spawn(self._stop(entry))
        elif entry.keep_alive != FOREVER:
            loop = asyncio.get_running_loop()
            entry.timer = loop.call_later(entry.keep_alive, self._expire, entry)

    def _expire(self, entry: Loaded) -> None:
        entry.timer = None
        if entry.refs == 0 and self._entries.get(entry.spec.key) is entry:
            self._spawn(self._stop(entry))

    def _drop(self, entry: Loaded) -> None:
        """Forget a runner and end its process in the background."""
        if self._entries.get(entry.spec.key) is entry:
            del self._entries[entry.spec.key]
        if entry.timer is not None:
            entry.timer.cancel()
        self._changed.set()
        self._spawn(entry.runner.stop())

    async def _stop(self, entry: Loaded) -> None:
        if self._entries.get(entry.spec.key) is entry:
            del self._entries[entry.spec.key]
        if entry.timer is not None:
            entry.timer.cancel()
            entry.timer = None
        self._changed.set()
        with contextlib.suppress(Exception):
            await entry.runner.stop()
        if self._placement is not None:
            self._placement.devices_changed()  # its memory is free again: probe afresh

    def _spawn(self, coro: Awaitable[None]) -> None:
        async def run() -> None:
            await coro

        task = asyncio.get_running_loop().create_task(run())
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
