"""What llama.cpp allocated, per device, from the lines its log writes while loading a model
and creating a context (llama-model.cpp, llama-kv-cache.cpp, llama-memory-recurrent.cpp,
llama-context.cpp):

    load_tensors:        CUDA0 model buffer size =   512.00 MiB
    llama_kv_cache:      CUDA0 KV buffer size =    64.00 MiB
    llama_memory_recurrent:  CPU RS buffer size = 2.00 MiB
    llama_context:   CUDA_Host  output buffer size =     1.00 MiB
    llama_context:       CUDA0 compute buffer size =   300.00 MiB

The name before the kind is ggml's buffer name (`ggml_backend_buffer_name`): a device
(`CUDA0`, `Vulkan1`, `RPC0[host:port]`), or host memory (`CPU`, `CPU_Mapped`, `CPU_REPACK`,
`CUDA_Host`, ...), which counts as the CPU's.
"""

from __future__ import annotations

import re

__all__ = ["device_of_buffer", "device_parts", "parse_buffers"]

_LINE = re.compile(
    r"(?P<name>\S+)\s+(?P<kind>model|KV|RS|compute|output) buffer size\s*=\s*(?P<mib>[\d.]+) MiB"
)
_PART = {"model": "weights", "KV": "cache", "RS": "cache", "compute": "graph", "output": "graph"}


def device_of_buffer(name: str) -> str:
    """The device a ggml buffer name stands for ("CPU" for host memory)."""
    if name.startswith("CPU") or name.endswith("_Host") or name.lower().startswith("host"):
        return "CPU"
    return name.split("[", 1)[0]


def device_parts(devices: dict[str, dict[str, int]], name: str) -> dict[str, int]:
    """`devices[name]`, made with every part at 0 when the device is new."""
    return devices.setdefault(name, {"weights": 0, "cache": 0, "graph": 0})


def parse_buffers(lines: list[str]) -> dict[str, dict[str, int]]:
    """Bytes per device and part (`weights`, `cache`, `graph`) from llama.cpp's log lines."""
    out: dict[str, dict[str, int]] = {}
    for line in lines:
        m = _LINE.search(line)
        if m is None:
            continue
        device = device_parts(out, device_of_buffer(m["name"]))
        device[_PART[m["kind"]]] += int(float(m["mib"]) * 2**20)
    return out
