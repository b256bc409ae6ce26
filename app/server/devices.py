"""The service's view of the devices: ggml's backend devices and NVIDIA GPUs, enumerated in a
subprocess (`python -m hearth.engine.ml.devices`).

A subprocess, not this process: asking a GPU backend for its memory initialises it (a CUDA
context on every GPU holds memory and takes seconds), which the service, whose runners do the
computing, must neither pay at start nor keep. `report()` runs a fresh probe (free memory
is live) unless the caller accepts one up to `max_age` seconds old (the layout search before a
load: the probe made at start then serves the first load); concurrent callers share one run.
At start, `log_at_start` probes in the background, so readiness never waits for it, and logs
one line ("devices: CPU (AMD EPYC, 23.5 GiB); no NVIDIA GPU (pynvml: driver not found)").
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable

from ..engine.ml.devices import DeviceReport, probe_command, system_free_swap
from .scheduling.layout.memory import DeviceId, Gpu, SystemMemory

__all__ = [
    "DeviceMonitor",
    "DeviceProbeError",
    "DeviceProbe",
    "layout_devices",
    "probe_in_subprocess",
]

log = logging.getLogger("hearth.server")

DeviceProbe = Callable[[], Awaitable[DeviceReport]]


class DeviceProbeError(RuntimeError):
    """The device enumeration failed (the sentence says how)."""


async def probe_in_subprocess(timeout: float = 120.0) -> DeviceReport:
    """Run the probe command and parse its report; killed on timeout or cancellation."""
    proc = await asyncio.create_subprocess_exec(
        *probe_command(),
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        out, err = await asyncio.wait_for(proc.communicate(), timeout)
    except BaseException:
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
        await asyncio.shield(proc.wait())
        raise
    lines = out.decode("utf-8", "replace").strip().splitlines()
    if proc.returncode != 0 or not lines:
        tail = err.decode("utf-8", "replace").strip().splitlines()[-1:] or ["no output"]
        raise DeviceProbeError(f"the device probe failed (status {proc.returncode}): {tail[0]}")
    try:
        return DeviceReport.from_json(lines[-1])
    except ValueError as e:
        raise DeviceProbeError(f"the device probe answered nonsense: {e}") from None


class DeviceMonitor:
    """Probes on request through `probe` (a fake in tests)."""

    def __init__(self, probe: DeviceProbe = probe_in_subprocess) -> None:
        self._probe = probe
        self._running: asyncio.Task[DeviceReport] | None = None
        self._start_task: asyncio.Task[None] | None = None
        self._last: tuple[float, DeviceReport] | None = None  # (monotonic time, report)

    async def report(self, max_age: float = 0.0) -> DeviceReport:
        """A fresh report, or the last one if it is at most `max_age` seconds old; callers
        arriving while a probe runs get that probe's report."""
        if self._last is not None and time.monotonic() - self._last[0] <= max_age:
            return self._last[1]
        if self._running is None or self._running.done():
            self._running = asyncio.ensure_future(self._probe())
        report = await asyncio.shield(self._running)
        self._last = (time.monotonic(), report)
        return report

    def forget(self) -> None:
        """Drop the last report: the next `report()` probes whatever its `max_age`."""
        self._last = None

    async def _log(self) -> None:
        try:
            report = await self.report()
        except (DeviceProbeError, OSError) as e:  # TimeoutError is an OSError
            log.warning("could not enumerate devices: %s", e)
            return
        log.info("%s", report.summary())

    def log_at_start(self) -> None:
        """Probe in the background and log what was found (call from the running loop)."""
        self._start_task = asyncio.get_running_loop().create_task(self._log())

    async def close(self) -> None:
        for task in (self._start_task, self._running):
            if task is not None and not task.done():
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task


def _device_id(ggml_id: str, library: str) -> DeviceId:
    """ggml's device name as the layout search's (library, id): "CUDA0" -> ("CUDA", "0"),
    "RPC[10.0.0.2:50052]" -> ("RPC", "10.0.0.2:50052")."""
    rest = ggml_id.removeprefix(library) if library else ggml_id
    if rest.startswith("[") and rest.endswith("]"):
        rest = rest[1:-1]
    return DeviceId(library, rest)


def layout_devices(report: DeviceReport) -> tuple[list[Gpu], SystemMemory]:
    """A report as the layout search's inputs: every non-CPU device as a `Gpu` (integrated
    GPUs marked; NVML's name where matched) and the CPU device's memory (plus the free swap
    of this machine) as `SystemMemory`. A report without a CPU device is a ValueError."""
    cpus = [d for d in report.devices if d.kind == "CPU"]
    if not cpus:
        raise ValueError("the device report has no CPU device")
    gpus = [
        Gpu(
            device=_device_id(d.id, d.library),
            free=d.free,
            total=d.total,
            name=d.name,
            integrated=d.kind == "IGPU",
        )
        for d in report.devices
        if d.kind != "CPU"
    ]
    return gpus, SystemMemory(cpus[0].total, cpus[0].free, system_free_swap())
