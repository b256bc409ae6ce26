"""The runner's side of a layout: the `--layout` the service chose, resolved to this process's
devices (RPC workers from HEARTH_RPC_SERVERS registered first), and the bytes each device holds
once the model is loaded (reported in `/info` as `devices`)."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from ..engine.ml.placement import DevicePlacement, PlacementError

if TYPE_CHECKING:  # Hearth's engine only: the llama.cpp runner imports parse_layout alone
    from ..engine.forward import ForwardEngine
    from ..engine.model import LoadedModel

__all__ = ["parse_layout", "runner_placement", "device_memory"]


def parse_layout(layout: str | None) -> DevicePlacement:
    """The placement `--layout` says (None or empty: all on the CPU); a ValueError with a
    sentence for malformed JSON. Loads no engine."""
    if not layout:
        return DevicePlacement()
    try:
        data = json.loads(layout)
    except json.JSONDecodeError as e:
        raise PlacementError(f"--layout is not JSON ({e})") from None
    if not isinstance(data, dict):
        raise PlacementError("--layout must be a JSON object with 'gpus' and 'projector'")
    return DevicePlacement.from_json(data)


def runner_placement(layout: str | None) -> DevicePlacement:
    """`parse_layout`, with the RPC workers it names registered in Hearth's ggml (from
    HEARTH_RPC_SERVERS)."""
    placement = parse_layout(layout)
    if any(name.startswith("RPC") for name in placement.devices):
        from ..engine.ml.rpc import add_servers, servers_from_env

        add_servers(servers_from_env())
    return placement


def device_memory(loaded: LoadedModel, engine: ForwardEngine) -> dict[str, dict[str, int]]:
    """Bytes of weights, KV cache and graph (compute) buffers per device, measured."""
    backend = loaded.backend
    parts = {
        "weights": loaded.weights.bytes_by_device,
        "cache": backend.persistent_bytes_by_device(),
        "graph": backend.graph_memory_by_device(),
    }
    out: dict[str, dict[str, int]] = {}
    for kind, by_device in parts.items():
        for device, nbytes in by_device.items():
            out.setdefault(device, {"weights": 0, "cache": 0, "graph": 0})[kind] += nbytes
    return out
