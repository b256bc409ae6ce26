"""The load loop between service and runner: fit, re-plan, alloc, back off, commit.

Learned from Ollama's `ollamaServer.Load`: every report a runner sends knows more than the last
(graphs appear on the GPUs that got layers), so layouts only shrink; a layout seen before, or
one with more layers, means the search has converged. When plans swing by more than one layer
(a graph moving on and off a GPU), the counts in between are tried with `num_gpu` forced. A
failed allocation makes the failing GPU keep 10% more of its free memory to itself; when it
fails with all of it set aside, the load gives up.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Protocol

from .memory import (
    CPU,
    DeviceId,
    Gpu,
    Layout,
    LoadOperation,
    LoadReply,
    MemoryReport,
    SystemMemory,
    human_bytes,
)
from .search import LayoutOptions, LayoutRequestError, Plan, explain, plan_layout

__all__ = ["LayoutError", "LayoutRunner", "Negotiated", "negotiate", "BACKOFF_STEPS"]

log = logging.getLogger("hearth.layout")

BACKOFF_STEPS = 10  # a failed allocation sets aside 1/10 more of that GPU's free memory; the
# load gives up when an allocation fails with all of it set aside
MAX_REQUESTS = 200  # a guard: far above what convergence and backoff can take


class LayoutError(RuntimeError):
    """The runner could not allocate any layout the search proposed."""


class LayoutRunner(Protocol):
    """The runner's side of the load protocol (see the package docstring)."""

    async def load(self, operation: LoadOperation, layout: Layout) -> LoadReply: ...


@dataclass(frozen=True)
class Negotiated:
    """The committed layout, the runner's last report for it, and what the log was told."""

    layout: Layout
    memory: MemoryReport
    notes: tuple[str, ...]


class _Session:
    def __init__(
        self,
        runner: LayoutRunner,
        gpus: Sequence[Gpu],
        system: SystemMemory,
        options: LayoutOptions,
        say: Callable[[str], None],
    ) -> None:
        self.runner, self.gpus, self.system, self.options = runner, gpus, system, options
        self.steps: dict[DeviceId, int] = {}  # failed allocations per GPU
        self.notes: list[str] = []
        self.requests = 0
        self._say = say

    def say(self, sentence: str) -> None:
        if not self.notes or self.notes[-1] != sentence:
            self.notes.append(sentence)
            self._say(sentence)

    def plan(self, report: MemoryReport, num_gpu: int | None = None) -> Plan:
        options = self.options if num_gpu is None else replace(self.options, num_gpu=num_gpu)
        return plan_layout(self.gpus, self.system, report, options, self.backoff)

    @property
    def backoff(self) -> dict[DeviceId, float]:
        return {device: steps / BACKOFF_STEPS for device, steps in self.steps.items()}

    async def load(self, operation: LoadOperation, layout: Layout) -> LoadReply:
        self.requests += 1
        if self.requests > MAX_REQUESTS:
            raise LayoutError(f"the memory layout did not settle after {MAX_REQUESTS} tries")
        return await self.runner.load(operation, layout)

    def back_off(self, reply: LoadReply, layout: Layout) -> None:
        """After a failed allocation: the failing GPU (every GPU in use when the runner did not
        say) keeps more of its memory free, or the load gives up."""
        failed = reply.failed_device
        if failed == CPU:
            raise LayoutError(
                "the model could not be allocated in system memory "
                f"({human_bytes(reply.memory.cpu.size + reply.memory.input_weights)} needed)"
            )
        devices = [failed] if failed is not None else list(layout.devices)
        if not devices:
            raise LayoutError("the model could not be allocated")
        for device in devices:
            steps = self.steps.get(device, 0)
            if steps >= BACKOFF_STEPS:
                raise LayoutError(
                    f"the model could not be allocated on {device}, not even with all of its "
                    "free memory set aside (another program may be using it)"
                )
            self.steps[device] = steps + 1
            self.say(
                f"allocation failed on {device}: setting aside "
                f"{(steps + 1) / BACKOFF_STEPS:.0%} of its free memory and trying again"
            )


async def negotiate(
    runner: LayoutRunner,
    gpus: Sequence[Gpu],
    system: SystemMemory,
    layers: int,
    options: LayoutOptions = LayoutOptions(),
    vision: bool = False,
    say: Callable[[str], None] = log.info,
) -> Negotiated:
    """Fit, allocate and commit a layout of a model with `layers` layers (blocks + output) and,
    with `vision`, a projector/encoder on `runner`. Raises what `plan_layout` raises (a model
    too large is refused after the first fit, before anything is allocated) and `LayoutError`;
    the runner is told to close on any failure."""
    session = _Session(runner, gpus, system, options, say)
    try:
        layout, memory = await _converge(session, layers, vision)
        reply = await session.load(LoadOperation.COMMIT, layout)
        if not reply.success:
            raise LayoutError(f"the runner could not load the weights ({layout.describe(layers)})")
    except BaseException:
        try:
            await runner.load(LoadOperation.CLOSE, Layout())
        except Exception:  # the runner may be gone; the first error is the one to report
            log.debug("closing the runner after a failed load failed too", exc_info=True)
        raise
    return Negotiated(layout, reply.memory if reply.memory.layers else memory, tuple(session.notes))


async def _converge(session: _Session, layers: int, vision: bool) -> tuple[Layout, MemoryReport]:
    memory = MemoryReport.empty(layers, vision)
    layout = session.plan(memory).layout
    seen: set[Layout] = set()  # shared by fit and alloc, as Ollama's pastAllocations
    for operation in (LoadOperation.FIT, LoadOperation.ALLOC):
        layout, memory = await _settle(session, operation, layout, seen)
    session.say(explain(session.gpus, memory, session.options, layout, session.backoff))
    return layout, memory


async def _settle(
    session: _Session, operation: LoadOperation, layout: Layout, seen: set[Layout]
) -> tuple[Layout, MemoryReport]:
    """One operation until the layout stops changing; returns the layout and its report."""
    num_gpu = session.options.num_gpu
    while True:
        reply = await session.load(operation, layout)
        seen.add(layout)
        while True:
            new = session.plan(reply.memory).layout
            if new not in seen and new.offloaded <= layout.offloaded:
                layout = new
                break  # try the smaller layout
            if num_gpu < 0 and new.offloaded - layout.offloaded > 1:
                found = await _between(session, operation, reply.memory, layout, new)
                if found is not None:
                    seen.clear()  # a larger layout was taken: let later plans come back down
                    return found
            if reply.success:
                return layout, reply.memory
            if num_gpu >= 0:
                raise LayoutRequestError(
                    f"the memory layout cannot be allocated with num_gpu = {num_gpu} "
                    "(use fewer GPU layers, or -1 to let Hearth choose)"
                )
            session.back_off(reply, layout)


async def _between(
    session: _Session,
    operation: LoadOperation,
    memory: MemoryReport,
    layout: Layout,
    new: Layout,
) -> tuple[Layout, MemoryReport] | None:
    """Plans swing between `layout` and a larger `new` (a graph that moves with the output
    layer, say): try `new`'s count and the counts down to `layout`'s with num_gpu forced, and keep
    the first the runner accepts and a fresh plan from its report does not shrink. (Ollama starts
    one below `new`'s count; starting at it keeps a layout that fits exactly.)"""
    for count in range(new.offloaded, layout.offloaded - 1, -1):
        trial = session.plan(memory, num_gpu=count).layout
        reply = await session.load(operation, trial)
        if reply.success and trial.offloaded <= session.plan(reply.memory).layout.offloaded:
            return trial, reply.memory
    return None
