"""What a loaded model takes in memory, as both engines report it (the runner's `ready` event)."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["MemoryReport"]


@dataclass(frozen=True)
class MemoryReport:
    """Bytes for the weights, the KV cache and the compute graph (worst case)."""

    weights: int
    cache: int
    graph: int

    @property
    def total(self) -> int:
        return self.weights + self.cache + self.graph
