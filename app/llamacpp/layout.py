"""The service's layout (`--layout`, a `DevicePlacement`) in llama.cpp's model parameters.

llama.cpp places layers by count, not by name: `n_gpu_layers = k` offloads the last `k` of the
`blocks + 1` layers, the output layer (index `blocks`, as in Hearth's layouts) counting as the
last one, so `k = 1` offloads only the output layer. With `split_mode` LAYER, `tensor_split`
(one weight per llama.cpp device, in its enumeration order) gives each device a contiguous run
of those layers, lower layers to lower-numbered devices: with the layer counts as weights,
llama.cpp's rule (`upper_bound` of the cumulative fractions) gives each device exactly its
count. `main_gpu` is the device holding the output layer.

A layout llama.cpp cannot express (layers not at the end, devices out of llama.cpp's order, a
device this build lacks) is a `LlamaCppLayoutError` with a sentence; the scheduler then starts
the model on the CPU.
"""

from __future__ import annotations

import ctypes
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..engine.ml.placement import DevicePlacement

__all__ = ["LlamaCppLayoutError", "LlamaCppSplit", "llamacpp_devices", "llamacpp_split"]

_GPU_TYPES = (1, 2)  # GGML_BACKEND_DEVICE_TYPE_GPU, _IGPU: the devices llama.cpp offloads to


class LlamaCppLayoutError(ValueError):
    """A layout llama.cpp cannot follow; the message says why in one sentence."""


@dataclass(frozen=True)
class LlamaCppSplit:
    """llama.cpp's `llama_model_params` for a layout. `split_mode` is llama.cpp's
    LLAMA_SPLIT_MODE_* name ("none" with no layers offloaded)."""

    n_gpu_layers: int = 0
    split_mode: str = "none"
    tensor_split: tuple[float, ...] = ()
    main_gpu: int = 0


def llamacpp_split(
    placement: DevicePlacement, blocks: int, devices: Sequence[str]
) -> LlamaCppSplit:
    """The parameters that place `placement`'s layers (of a model with `blocks` blocks; index
    `blocks` is the output layer) on llama.cpp's GPU `devices` (names in its order). An empty
    placement: everything on the CPU (`n_gpu_layers` 0)."""
    owner: dict[int, str] = {}
    for device, layers in placement.layers.items():
        for layer in layers:
            if not 0 <= layer <= blocks:
                raise LlamaCppLayoutError(
                    f"the layout places layer {layer} on {device}, but the model has layers "
                    f"0..{blocks} (the last is the output layer)"
                )
            owner[layer] = device
    if not owner:
        return LlamaCppSplit()
    missing = sorted({d for d in owner.values() if d not in devices})
    if missing:
        have = ", ".join(devices) if devices else "none: it runs on the CPU only"
        raise LlamaCppLayoutError(
            f"the layout places layers on {', '.join(missing)}, which llama.cpp does not have "
            f"here (its GPU devices: {have})"
        )
    count = len(owner)
    first = blocks + 1 - count
    if sorted(owner) != list(range(first, blocks + 1)):
        raise LlamaCppLayoutError(
            f"llama.cpp offloads the last layers only (with the output layer); this layout "
            f"places layers {_ranges(sorted(owner))} of 0..{blocks}"
        )
    order = [devices.index(owner[layer]) for layer in range(first, blocks + 1)]
    if order != sorted(order):
        raise LlamaCppLayoutError(
            "llama.cpp gives lower layers to lower-numbered devices "
            f"({', '.join(devices)}); this layout places them otherwise"
        )
    split = [0.0] * len(devices)
    for index in order:
        split[index] += 1.0
    return LlamaCppSplit(count, "layer", tuple(split), order[-1])


def _ranges(layers: list[int]) -> str:
    """`[0, 1, 2, 5]` as "0-2, 5"."""
    parts: list[str] = []
    start = prev = layers[0]
    for layer in [*layers[1:], None]:
        if layer is not None and layer == prev + 1:
            prev = layer
            continue
        parts.append(f"{start}-{prev}" if prev > start else str(start))
        if layer is not None:
            start = prev = layer
    return ", ".join(parts)


def llamacpp_devices(lib: Any) -> list[str]:
    """The GPU devices llama.cpp offloads to, in its order (ggml's registry, which
    llama-cpp-python does not bind: read from the libggml it loaded)."""
    folder = Path(lib.__file__).parent / "lib"
    candidates = [p for pattern in ("libggml.*", "ggml.dll") for p in sorted(folder.glob(pattern))]
    if not candidates:
        raise LlamaCppLayoutError(
            f"llama.cpp's libggml is not in {folder}: its devices are unknown"
        )
    ggml = ctypes.CDLL(str(candidates[0]))  # the library llama.cpp loaded (the registry's)
    ggml.ggml_backend_dev_count.restype = ctypes.c_size_t
    ggml.ggml_backend_dev_get.restype = ctypes.c_void_p
    ggml.ggml_backend_dev_get.argtypes = [ctypes.c_size_t]
    ggml.ggml_backend_dev_name.restype = ctypes.c_char_p
    ggml.ggml_backend_dev_name.argtypes = [ctypes.c_void_p]
    ggml.ggml_backend_dev_type.restype = ctypes.c_int
    ggml.ggml_backend_dev_type.argtypes = [ctypes.c_void_p]
    names = []
    for i in range(ggml.ggml_backend_dev_count()):
        dev = ggml.ggml_backend_dev_get(i)
        if ggml.ggml_backend_dev_type(dev) in _GPU_TYPES:
            names.append(ggml.ggml_backend_dev_name(dev).decode())
    return names
