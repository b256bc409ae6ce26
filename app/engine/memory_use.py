"""What a loaded model takes in memory, as both engines report it (the runner's `ready` event).
(The service's per-layer, per-device fit report is hearth.server.scheduling.layout's
`MemoryReport`.)"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["MemoryUse"]


@dataclass(frozen=True)
class MemoryUse:
    """Bytes for the weights, the KV cache and the compute graph (worst case)."""

    weights: int
    cache: int
    graph: int

    @property
    def total(self) -> int:
        return self.weights + self.cache + self.graph
