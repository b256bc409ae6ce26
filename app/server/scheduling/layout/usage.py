"""What a chosen layout puts on each device, for /api/ps and /api/show: per device the layers it
holds and the bytes of weights, KV cache and graph (compute) buffer, from the file's report
moved onto the layout (`MemoryReport`, `planning.plan_from_file`). The CPU row also holds the
input weights (token embedding: always on the CPU) and the vision projector when the layout
leaves it there."""

from __future__ import annotations

from dataclasses import dataclass

from .memory import CPU, DeviceId, DeviceMemory, Layout, MemoryReport

__all__ = ["DeviceUsage", "device_usage", "gpu_bytes"]


@dataclass(frozen=True)
class DeviceUsage:
    """One device's share of a loaded (or planned) model."""

    device: DeviceId
    layers: int
    weights: int
    cache: int
    graph: int

    @property
    def total(self) -> int:
        return self.weights + self.cache + self.graph

    def as_json(self) -> dict[str, int | str]:
        return {
            "device": str(self.device),
            "layers": self.layers,
            "weights": self.weights,
            "cache": self.cache,
            "graph": self.graph,
        }


def _row(
    device: DeviceId, mem: DeviceMemory | None, layers: int, extra: int, graph: int
) -> DeviceUsage:
    weights = sum(mem.weights) if mem is not None else 0
    cache = sum(mem.cache) if mem is not None else 0
    own_graph = mem.graph if mem is not None else 0
    return DeviceUsage(device, layers, weights + extra, cache, own_graph + graph)


def device_usage(report: MemoryReport, layout: Layout) -> tuple[DeviceUsage, ...]:
    """The CPU first, then each GPU the layout uses, in layer order. A layout naming a layer
    the report does not have is a ValueError."""
    if any(i >= report.layers or i < 0 for g in layout.gpus for i in g.layers):
        raise ValueError(
            f"the layout places layers the model does not have ({report.layers} layers)"
        )
    projector = report.projector, report.projector_graph
    on_cpu = projector if layout.projector is None else (0, 0)
    rows = [
        _row(
            CPU,
            report.cpu,
            report.layers - layout.offloaded,
            report.input_weights + on_cpu[0],
            on_cpu[1],
        )
    ]
    counts = {g.device: len(g.layers) for g in layout.gpus}
    for device in layout.devices:
        here = projector if layout.projector == device else (0, 0)
        rows.append(_row(device, report.gpus.get(device), counts.get(device, 0), *here))
    return tuple(rows)


def gpu_bytes(report: MemoryReport, layout: Layout) -> int:
    """Bytes the layout puts on GPUs (Ollama's `size_vram`): 0 for a CPU-only layout."""
    return sum(u.total for u in device_usage(report, layout) if u.device != CPU)
