"""Where each layer of a model lives: the engine's side of a layout.

The service's layout search decides which layers go on which device (GPUs, ggml RPC workers);
the runner receives that decision as a `DevicePlacement` and the engine puts every layer's
weights and KV cache in that device's memory. Graph (compute) buffers follow from it: one
`ggml_backend_sched` over every device in use, the CPU last, assigns each op to the device
holding its weights and copies activations across where the layers change device.

Placement by tensor name, as llama.cpp and Ollama do:

* `blk.N.*` weights and the KV cache of layer N (`cache_k_lN`, `cache_v_lN`, the cross-attention
  cache `cache_x*_lN`) go to layer N's device;
* the output layer (`output.weight`, `output_norm.weight`, and the matmul copy of a tied
  `token_embd.weight`) goes to the output layer's device (index `blocks` in the layout);
* the token embedding used for row lookups stays on the CPU (the input layer);
* the vision projector/encoder (`v.*`, `mm.*`, ...) goes to the projector's device;
* anything else (`rope_freqs.weight`, shared by every layer) stays on the CPU; the scheduler
  copies it to a device whose ops use it.

Devices are named as ggml names them (`CUDA0`, `Vulkan1`, `RPC0`); RPC devices must be added
(`rpc.add_servers`) before a placement that names them is resolved.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = ["DevicePlacement", "PlacementError", "layer_of_tensor"]

_BLOCK = re.compile(r"^blk\.(\d+)\.")
_CACHE = re.compile(r"^cache_\w+?_l(\d+)$")
_OUTPUT = {"output.weight", "output_norm.weight", "output.bias", "output_norm.bias"}
_PROJECTOR_PREFIXES = ("v.", "mm.", "mm_", "vision.", "resampler.")


class PlacementError(ValueError):
    """A placement names a device this process does not have, or a layer the model lacks."""


def layer_of_tensor(name: str, blocks: int, matmul: bool = True) -> int | str | None:
    """The layer a tensor belongs to: a block index, `blocks` for the output layer,
    "projector" for the vision encoder, or None for the CPU-only rest (input embedding,
    shared tensors)."""
    m = _BLOCK.match(name) or _CACHE.match(name)
    if m:
        return int(m.group(1))
    if name in _OUTPUT or (name == "token_embd.weight" and matmul):
        return blocks
    if name.startswith(_PROJECTOR_PREFIXES):
        return "projector"
    return None


@dataclass(frozen=True)
class DevicePlacement:
    """Layers by device name (`{"RPC0": [0, 1, 2], "CUDA0": [3, 4]}`; the index `blocks` is
    the output layer; unnamed layers are on the CPU) and the projector's device (None: CPU).
    Empty: everything on the CPU, the engine's default."""

    layers: Mapping[str, tuple[int, ...]] = field(default_factory=dict)
    projector: str | None = None

    @classmethod
    def from_json(cls, data: Mapping[str, Any] | None) -> DevicePlacement:
        """From the runner's `--layout` JSON: `{"gpus": [{"device": "RPC0", "layers":
        [0, 1]}], "projector": "RPC0" | null}` (the service's `Layout` in the same words)."""
        if not data:
            return cls()
        layers: dict[str, tuple[int, ...]] = {}
        try:
            for part in data.get("gpus", ()):
                device = str(part["device"])
                layers[device] = tuple(sorted({*layers.get(device, ()), *map(int, part["layers"])}))
        except (KeyError, TypeError, ValueError) as e:
            raise PlacementError(f"a layout must list devices with their layers ({e})") from None
        projector = data.get("projector")
        return cls(layers, str(projector) if projector else None)

    def as_json(self) -> dict[str, Any]:
        return {
            "gpus": [{"device": d, "layers": list(ls)} for d, ls in self.layers.items()],
            "projector": self.projector,
        }

    @property
    def devices(self) -> tuple[str, ...]:
        """Device names in use, in the order first named (layers, then the projector)."""
        found = [d for d, ls in self.layers.items() if ls]
        if self.projector and self.projector not in found:
            found.append(self.projector)
        return tuple(found)

    @property
    def cpu_only(self) -> bool:
        return not self.devices

    def device_of_layer(self, layer: int) -> str | None:
        for device, layers in self.layers.items():
            if layer in layers:
                return device
        return None

    def device_of_tensor(self, name: str, blocks: int, matmul: bool = True) -> str | None:
        """The device name for tensor `name` of a model with `blocks` blocks (None: CPU)."""
        layer = layer_of_tensor(name, blocks, matmul)
        if layer is None:
            return None
        if layer == "projector":
            return self.projector
        assert isinstance(layer, int)
        return self.device_of_layer(layer)

    def check(self, blocks: int, available: Iterable[str]) -> None:
        """Raise PlacementError when a layer index is out of range (0..blocks) or a device is
        not among `available`."""
        names = set(available)
        for device, layers in self.layers.items():
            bad = [i for i in layers if not 0 <= i <= blocks]
            if bad:
                raise PlacementError(
                    f"the layout puts layer {bad[0]} on {device}, but the model has layers "
                    f"0..{blocks} (the last one the output layer)"
                )
        missing = [d for d in self.devices if d not in names]
        if missing:
            have = ", ".join(sorted(names)) or "none"
            raise PlacementError(
                f"the layout names device {missing[0]}, which this runner does not have "
                f"(devices: {have})"
            )
