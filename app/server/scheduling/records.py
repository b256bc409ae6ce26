"""The scheduler's records: what a request needs loaded (`LoadSpec`), a runner it loaded
(`Loaded`, over a `RunnerHandle` that a `Launcher` starts), a request's hold on one (`Lease`),
and the two ways `Scheduler.acquire` fails (`ServerBusy`, `LoadFailed`).

`Loaded.serves` is the reuse rule of the scheduler (see scheduler.py): whether a loaded runner
can take a request as it is, read from the runner options' reload rules
(`hearth.runner.protocol.RunnerOptions.reloads`) and the request's placement.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from ...runner.protocol import (
    CompletionChunk,
    CompletionDone,
    CompletionRequest,
    RunnerInfo,
    RunnerOptions,
)
from .layout import LayoutOptions, MemoryReport
from .load_layout import Placed
from .runner_process import RunnerProcess

__all__ = [
    "Launcher",
    "Lease",
    "LoadFailed",
    "LoadSpec",
    "Loaded",
    "RunnerHandle",
    "ServerBusy",
    "held",
    "process_launcher",
]


class RunnerHandle(Protocol):
    """The service's handle on one runner process: what the scheduler needs from it
    (RunnerProcess, or a fake in tests). The process itself runs hearth.runner.core.Runner."""

    info: RunnerInfo

    @property
    def pid(self) -> int: ...

    @property
    def alive(self) -> bool: ...

    def completion(
        self, request: CompletionRequest
    ) -> AsyncIterator[CompletionChunk | CompletionDone]: ...

    async def embedding(self, text: str | list[int], truncate: bool = True) -> dict[str, Any]: ...

    async def tokenize(self, content: str, add_special: bool = True) -> list[int]: ...

    async def detokenize(self, tokens: list[int]) -> str: ...

    async def health(self) -> dict[str, Any]: ...

    async def stop(self) -> None: ...


Launcher = Callable[[str, RunnerOptions, float], Awaitable[RunnerHandle]]


async def process_launcher(path: str, options: RunnerOptions, timeout: float) -> RunnerHandle:
    return await RunnerProcess.start(path, options, timeout=timeout)


class ServerBusy(RuntimeError):
    """Too many requests are waiting (HEARTH_MAX_QUEUE); answered with 503."""


class LoadFailed(RuntimeError):
    """The model could not be loaded; the message says why."""


@dataclass(frozen=True)
class LoadSpec:
    """What a request needs loaded. `key` identifies the runner (the model file)."""

    key: str
    path: str
    name: str  # the model name the request used (shown by /api/ps)
    digest: str
    options: RunnerOptions
    explicit: frozenset[str] = frozenset()  # runtime options the request set itself
    estimate: int = 0  # bytes, for eviction decisions
    details: dict[str, Any] = field(default_factory=dict)
    # HEARTH_NUM_PARALLEL unset: (parallel, estimate) pairs to try, most slots first, before
    # falling back to `options` and `estimate` as they are (one slot).
    parallel_choices: tuple[tuple[int, int], ...] = ()
    parallel_reason: str = ""  # why `options.parallel` is what it is (for /api/ps and the log)
    # The model's all-CPU memory report (FIT) for these runner options, from its file (blocking:
    # called in a thread); None: the model is not planned or refused before it starts.
    fit: Callable[[RunnerOptions], MemoryReport] | None = field(default=None, compare=False)
    # The request's placement (num_gpu, main_gpu); the planning adds the service's part.
    layout_options: LayoutOptions = LayoutOptions()
    # Hearth's engine was chosen automatically (a plugin registers the architecture): when
    # the plugin refuses the file, the runner starts on the llama.cpp engine instead.
    engine_fallback: bool = False


@dataclass(eq=False)
class Loaded:
    spec: LoadSpec
    runner: RunnerHandle
    slots: asyncio.Semaphore
    loaded_at: float = field(default_factory=time.time)
    refs: int = 0
    keep_alive: float = 300.0
    expires_at: float = math.inf  # wall clock
    last_used: float = field(default_factory=time.monotonic)
    retiring: bool = False
    timer: asyncio.TimerHandle | None = None
    idle: asyncio.Event = field(default_factory=asyncio.Event)
    placed: Placed | None = None  # the layout planned for the runner (None: not planned)

    def serves(self, spec: LoadSpec) -> bool:
        """Whether this runner can take the request as it is (no reload)."""
        if self.retiring or not self.runner.alive:
            return False
        # The runner options' reload rules (protocol.RunnerOptions: num_ctx larger, flash
        # attention, KV type or engine different, a projector or draft model asked for and
        # different, num_batch or num_thread set and different).
        if self.spec.options.reloads(spec.options, spec.explicit) is not None:
            return False
        want_layout, have_layout = spec.layout_options, self.spec.layout_options
        if "num_gpu" in spec.explicit and want_layout.num_gpu != have_layout.num_gpu:
            return False
        return not ("main_gpu" in spec.explicit and want_layout.main_gpu != have_layout.main_gpu)


class Lease:
    """A request's hold on a runner; release it exactly once (it is an async context manager)."""

    def __init__(
        self, entry: Loaded, load_duration: int, release: Callable[[Loaded], None]
    ) -> None:
        self.entry = entry
        self.runner = entry.runner
        self.load_duration = load_duration  # nanoseconds spent waiting for the load
        self._release = release  # the scheduler's: the slot back, the keep-alive timer started
        self._released = False

    def release(self) -> None:
        if not self._released:
            self._released = True
            self._release(self.entry)

    async def __aenter__(self) -> Lease:
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.release()


def held(entry: Loaded) -> int:
    """Bytes a loaded runner holds: its own report, else the estimate it was loaded with."""
    total = entry.runner.info.memory.total
    return total if total > 0 else entry.spec.estimate
