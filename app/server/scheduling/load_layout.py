"""Before a runner starts: the layout planned from the model file on the devices this machine
has, and the refusal of a model that fits nowhere (see `hearth.server.scheduling.layout`).

Every method plans with `plan_from_file` from the model's FIT report (computed from its file,
`layout.fit`); no runner is asked (the runner's start is the real allocation, retried on the
CPU by the scheduler when it runs out of memory). `Placement.check` refuses a model that fits
neither on the GPUs nor in system memory (`plan_layout`'s `ModelTooLarge`). `Placement.plan`
plans the layout a runner starts with and logs one line: "layout for NAME: 0/N layers on GPU
(no GPU found): running on the CPU". `Placement.preview` says where a load would put the model
now, without logging (for /api/show and the scheduler's room-making).
System memory is read live; GPUs (local ones and the RPC workers of HEARTH_RPC_SERVERS) come
from the service's device probe (the service passes one that reuses a report up to 30 s old and
counts a failed probe as no GPU, with a warning). The layout chosen reaches the runner as its
`--layout` (`layout_json`), where the engine places each layer on its device.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, replace

from ...engine.ml.devices import system_free_swap
from ...engine.ml.placement import DevicePlacement
from .layout import (
    CPU,
    FilePlan,
    Gpu,
    Layout,
    LayoutOptions,
    MemoryReport,
    SystemMemory,
    plan_from_file,
)
from .layout.usage import DeviceUsage, device_usage, gpu_bytes

__all__ = ["Placement", "Placed", "layout_json", "system_memory"]

log = logging.getLogger("hearth.scheduler")

GpuSource = Callable[[], Awaitable[Sequence[Gpu]]]


async def no_gpus() -> Sequence[Gpu]:
    return ()


def system_memory(free: int | None) -> SystemMemory | None:
    """This machine's memory with `free` bytes available (None: unknown) and its free swap."""
    if free is None:
        return None
    total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    return SystemMemory(total=total, free=free, free_swap=system_free_swap())


def layout_json(layout: Layout) -> str | None:
    """`layout` as the runner's `--layout` (device names as ggml's: "CUDA0", "RPC1"), in the
    shape the runner reads back (`DevicePlacement`, which owns it both ways); None for the
    all-CPU layout."""
    if not layout.devices:
        return None
    placement = DevicePlacement(
        {str(g.device): g.layers for g in layout.gpus},
        str(layout.projector) if layout.projector is not None else None,
    )
    return json.dumps(placement.as_json(), separators=(",", ":"))


@dataclass(frozen=True)
class Placed:
    """The layout planned for a model and its report: what /api/ps shows.
    `where` is the layout in words ("CPU only", "18/19 layers on CUDA0"). `measured`: once the
    runner has loaded, the bytes it holds per device (its `/info` "devices"), which replace the
    plan's figures."""

    layout: Layout
    memory: MemoryReport
    where: str
    measured: Mapping[str, Mapping[str, int]] | None = None

    def with_measured(self, devices: object) -> Placed:
        """This placement with the runner's per-device report (ignored unless well-formed)."""
        if not isinstance(devices, dict) or not devices:
            return self
        clean = {
            str(name): {k: int(v) for k, v in row.items() if isinstance(v, int)}
            for name, row in devices.items()
            if isinstance(row, dict)
        }
        return replace(self, measured=clean)

    @property
    def devices(self) -> tuple[DeviceUsage, ...]:
        planned = device_usage(self.memory, self.layout)
        if self.measured is None:
            return planned
        rows = []
        for usage in planned:
            got = self.measured.get(str(usage.device), {})
            rows.append(
                DeviceUsage(
                    usage.device,
                    usage.layers,
                    got.get("weights", 0),
                    got.get("cache", 0),
                    got.get("graph", 0),
                )
            )
        return tuple(rows)

    @property
    def vram(self) -> int:
        """Bytes on GPUs (0 for a CPU-only layout)."""
        if self.measured is not None:
            return sum(u.total for u in self.devices if u.device != CPU)
        return gpu_bytes(self.memory, self.layout)

    def as_json(self) -> dict[str, object]:
        """The "layout", "devices" and "projector" keys of Hearth's extension object;
        "projector" is the device of the vision projector/encoder ("CPU", "CUDA0"), None for a
        model without one."""
        projector = None
        if self.memory.vision:
            projector = str(self.layout.projector) if self.layout.projector is not None else "CPU"
        return {
            "layout": self.where,
            "devices": [u.as_json() for u in self.devices],
            "projector": projector,
        }


@dataclass
class Placement:
    """The service's layout planning on this machine. `system` gives system memory now (None:
    unknown, and then nothing is planned or refused)."""

    system: Callable[[], SystemMemory | None]
    gpus: GpuSource = no_gpus
    overhead: int = 0  # HEARTH_GPU_OVERHEAD
    context: int | None = None  # HEARTH_GPU_CONTEXT (None: each library's measured constant)
    # Called when a runner started or stopped: the GPUs' free memory changed, so a report
    # the source keeps (the device monitor's) must not serve the next plan.
    forget: Callable[[], None] = lambda: None

    def devices_changed(self) -> None:
        self.forget()

    async def _plan(
        self, report: MemoryReport, system: SystemMemory, options: LayoutOptions
    ) -> FilePlan:
        """`plan_from_file` on the GPUs found now, with this service's HEARTH_GPU_OVERHEAD and
        HEARTH_GPU_CONTEXT."""
        gpus = await self.gpus()
        options = replace(options, overhead=self.overhead, context=self.context)
        return plan_from_file(gpus, system, report, options)

    async def check(self, report: MemoryReport, reclaimable: int = 0) -> None:
        """Raise `ModelTooLarge` when `report` fits neither on the GPUs found nor in system
        memory, even with `reclaimable` more bytes free (what unloading every other model
        would give back)."""
        system = self.system()
        if system is not None:
            system = replace(system, free=system.free + reclaimable)
            await self._plan(report, system, LayoutOptions())

    async def preview(
        self, report: MemoryReport, options: LayoutOptions = LayoutOptions()
    ) -> tuple[Layout, MemoryReport]:
        """Where `report`'s model would go now (with the request's `options`) and what each
        device would hold (for /api/show and the scheduler's room-making; nothing is logged).
        All on the CPU when memory is unknown or the model fits nowhere."""
        system = self.system()
        if system is None:
            return Layout(), report
        try:
            done = await self._plan(report, system, options)
        except ValueError:  # too large, or options that cannot be honoured
            return Layout(), report
        return done.layout, done.memory

    async def plan(
        self,
        name: str,
        report: MemoryReport,
        options: LayoutOptions = LayoutOptions(),
        others_loaded: bool = False,
    ) -> Placed | None:
        """The layout of `report` (the model `name`) with the request's `options`: logged
        (where it runs) and returned with its report; None when system memory is unknown.
        `others_loaded` makes a layout that needs more than is free now raise
        `LoadRequiresEviction`; a model that does not fit in free memory + swap raises
        `ModelTooLarge` with the numbers."""
        system = self.system()
        if system is None:
            return None
        done = await self._plan(report, system, replace(options, require_full=others_loaded))
        reason, _, where = done.note.rpartition(": ")
        count = f"{done.layout.offloaded}/{report.layers} layers on GPU"
        line = f"layout for {name}: {count}" + (f" ({reason}): {where}" if reason else f": {where}")
        log.info("%s", line)
        return Placed(done.layout, done.memory, done.layout.describe(done.memory.layers))
