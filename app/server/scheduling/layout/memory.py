"""The data of the layout search: devices as discovery sees them, what a layout takes on each
device (computed from the model file, `fit.py`), and the layout the runner is started with.

Layer indices: `0 .. blocks-1` are the repeating blocks, index `blocks` is the output layer
(`output`, `output_norm`; Ollama's convention), so every per-layer list has `blocks + 1` entries.
The token embedding is not a layer: it stays on the CPU and is reported as `input_weights`.
All sizes are bytes.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import NamedTuple

__all__ = [
    "BACKEND_CONTEXT",
    "DEFAULT_BACKEND_CONTEXT",
    "MiB",
    "GiB",
    "DeviceId",
    "CPU",
    "Gpu",
    "SystemMemory",
    "DeviceMemory",
    "MemoryReport",
    "GpuLayers",
    "Layout",
    "human_bytes",
]

MiB = 1 << 20
GiB = 1 << 30

# What a runner's GPU backend takes on each GPU it uses before any model buffer: the CUDA
# context, cuBLAS's workspace and the backend's pools. Discovery's free memory is read before
# the runner starts, so the plan must leave this much on every GPU it uses (one runner, one
# context per device). CUDA: measured on an H200 (driver 580, CUDA 13) as nvidia-smi's memory
# of the runner's process less the buffers the runner reported, 655 and 660 MiB in two loads
# (bench/results/gpu-h200-2026-11-27.json, "memory"; bench/gpu/check.py measures it again
# and prints it); Ollama's 457 MiB left ~200 MiB of it uncounted. Metal: Ollama's 512 MiB. The
# other libraries (ROCm, Vulkan, RPC workers, whose server holds its own context): Ollama's
# 457 MiB, not measured here. HEARTH_GPU_CONTEXT replaces them all with one measured figure.
BACKEND_CONTEXT: dict[str, int] = {"CUDA": 660 * MiB, "Metal": 512 * MiB}
DEFAULT_BACKEND_CONTEXT = 457 * MiB


class DeviceId(NamedTuple):
    """A GPU as ggml names it: its backend library ("CUDA", "ROCm", "Vulkan", "Metal", "RPC")
    and its id within that library ("0", "GPU-8f3c...", "127.0.0.1:50052")."""

    library: str
    id: str

    def __str__(self) -> str:
        return f"{self.library}{self.id}" if self.library else self.id


CPU = DeviceId("CPU", "")  # the host: a failed allocation in system memory names it


@dataclass(frozen=True)
class Gpu:
    """One accelerator found by discovery, with the memory free on it now (another process's
    buffers, another model's graph, the display: whatever is in use is already subtracted)."""

    device: DeviceId
    free: int
    total: int = 0
    name: str = ""
    integrated: bool = False  # shares system memory (iGPU): used after discrete GPUs

    @property
    def minimum_memory(self) -> int:
        """Memory to leave alone for a runner's backend context on this GPU (`BACKEND_CONTEXT`
        for its library; the search uses HEARTH_GPU_CONTEXT instead when it is set)."""
        return BACKEND_CONTEXT.get(self.device.library, DEFAULT_BACKEND_CONTEXT)

    @property
    def label(self) -> str:
        return f"{self.device} ({self.name})" if self.name else str(self.device)


@dataclass(frozen=True)
class SystemMemory:
    """System RAM as the service sees it; `free_swap` counts as room for CPU weights."""

    total: int
    free: int
    free_swap: int = 0


@dataclass(frozen=True)
class DeviceMemory:
    """One device's part of a memory report: per layer (`blocks + 1` entries, the last one the
    output layer) the bytes of weights and of KV cache placed on it, and its graph (compute)
    buffer, the largest the worst-case reservations asked for."""

    weights: tuple[int, ...]
    cache: tuple[int, ...]
    graph: int = 0

    @property
    def size(self) -> int:
        return sum(self.weights) + sum(self.cache) + self.graph


@dataclass(frozen=True)
class MemoryReport:
    """What a layout takes, device by device, as planned from the model file (`fit.py`): nothing
    in it was allocated. `gpus` holds the GPUs the search may give layers to, each with its
    share (zeros for one given no layers). `vision` says the model has a vision projector/encoder;
    `projector` and `projector_graph` are its weights and compute buffer, wherever the layout
    put it."""

    cpu: DeviceMemory
    gpus: Mapping[DeviceId, DeviceMemory] = field(default_factory=dict)
    input_weights: int = 0  # the token embedding and other input tensors: always on the CPU
    vision: bool = False
    projector: int = 0
    projector_graph: int = 0
    # Bytes the output layer takes on a GPU beyond its own weights: the token embedding an
    # output tied to it reads, which the engines copy to the output layer's device (on the
    # CPU the one tensor serves both).
    output_copy: int = 0

    @property
    def layers(self) -> int:
        """Number of layers, the output layer included (`blocks + 1`)."""
        return len(self.cpu.weights)

    def layer_sizes(self) -> tuple[int, ...]:
        """Weights + cache of each layer, summed over every device (where a layer lives changes
        where its bytes go, not how many there are)."""
        devices = [self.cpu, *self.gpus.values()]
        return tuple(
            sum(d.weights[i] + d.cache[i] for d in devices if i < len(d.weights))
            for i in range(self.layers)
        )

    def graph(self, device: DeviceId) -> int:
        mem = self.gpus.get(device)
        return mem.graph if mem is not None else 0

    @classmethod
    def empty(cls, layers: int, vision: bool = False) -> MemoryReport:
        """The report before any plan: every layer is free, so the first layout puts everything
        on the first GPU and the file's report for it says what it really takes."""
        zeros = (0,) * layers
        return cls(cpu=DeviceMemory(zeros, zeros), vision=vision)


@dataclass(frozen=True)
class GpuLayers:
    """The layers one GPU holds, in ascending order."""

    device: DeviceId
    layers: tuple[int, ...]


@dataclass(frozen=True)
class Layout:
    """What the service starts a runner with (`--layout`): which layers go on which GPU
    (every other layer is on the CPU) and where the vision projector/encoder goes (None: CPU).

    Canonical: GPUs without layers are dropped and the rest are ordered by their first layer, so
    two layouts that place the same layers on the same devices compare equal."""

    gpus: tuple[GpuLayers, ...] = ()
    projector: DeviceId | None = None

    @classmethod
    def of(
        cls,
        assignment: Iterable[tuple[DeviceId, Iterable[int]]],
        projector: DeviceId | None = None,
    ) -> Layout:
        merged: dict[DeviceId, set[int]] = {}
        for device, layers in assignment:
            merged.setdefault(device, set()).update(layers)
        parts = [GpuLayers(d, tuple(sorted(ls))) for d, ls in merged.items() if ls]
        parts.sort(key=lambda g: g.layers[0])
        return cls(tuple(parts), projector)

    @property
    def offloaded(self) -> int:
        """Number of layers on GPUs."""
        return sum(len(g.layers) for g in self.gpus)

    def device_of(self, layer: int) -> DeviceId | None:
        """The GPU holding `layer`, or None for the CPU."""
        for g in self.gpus:
            if layer in g.layers:
                return g.device
        return None

    @property
    def devices(self) -> tuple[DeviceId, ...]:
        """GPUs in use (with layers or the projector), in layer order."""
        found = [g.device for g in self.gpus]
        if self.projector is not None and self.projector not in found:
            found.append(self.projector)
        return tuple(found)

    def describe(self, layers: int) -> str:
        """ "18/19 layers on CUDA0, CUDA1" or "CPU only", for logs and the user."""
        if not self.gpus:
            return "CPU only"
        return f"{self.offloaded}/{layers} layers on " + ", ".join(str(g.device) for g in self.gpus)


def human_bytes(n: int) -> str:
    """1536 MiB -> "1.5 GiB"; for sentences the user reads."""
    for unit, size in (("GiB", GiB), ("MiB", MiB), ("KiB", 1024)):
        if abs(n) >= size:
            return f"{n / size:.1f} {unit}"
    return f"{n} B"
