"""Devices: what ggml can compute on, with its memory, and the NVIDIA GPUs NVML sees.

`probe()` enumerates ggml's backend devices in this process: the backends compiled into the
installed ggml (ggml-python's wheel: the CPU; a CUDA, Vulkan or Metal build adds its GPUs,
`CUDA0`, `Vulkan0`...). Asking a GPU backend for its memory initialises it (a CUDA context on
every GPU, which holds memory and takes seconds), so a long-lived process that only reports
devices (the service) runs `python -m hearth.engine.ml.devices` instead: `probe_command()`
is that command line, and its stdout's last line is the report as JSON
(`DeviceReport.from_json`).

NVIDIA GPUs are also asked of NVML through `pynvml` (package `nvidia-ml-py`), which adds the
name, driver version, compute capability and live free memory, matched to ggml's devices by
PCI bus id (or UUID) where ggml reports one. `pynvml` is optional at run time: not installed,
no driver or any NVML error means "no NVIDIA GPU", with the reason in
`DeviceReport.nvidia_error`, never an exception.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import sys
from dataclasses import dataclass
from typing import Any

__all__ = [
    "Device",
    "DeviceReport",
    "NvidiaGPU",
    "attach_nvidia",
    "ggml_devices",
    "normalize_pci_bus_id",
    "nvidia_gpus",
    "probe",
    "probe_command",
    "system_available_memory",
    "system_free_swap",
]


@dataclass(frozen=True)
class NvidiaGPU:
    """One GPU as NVML reports it (memory in bytes, live when probed)."""

    index: int  # NVML's index (not necessarily CUDA's order)
    name: str  # "NVIDIA GeForce RTX 4090"
    uuid: str  # "GPU-8f6c..."
    pci_bus_id: str  # normalised: "0000:01:00.0"
    driver: str  # "550.54.14"
    compute: str  # compute capability, "8.9"
    total: int
    free: int


@dataclass(frozen=True)
class Device:
    """One ggml backend device. `id` is ggml's device name ("CPU", "CUDA0", "Vulkan1",
    "RPC[host:port]"), `kind` its type ("CPU", "GPU", "IGPU", "ACCEL"), `library` the backend
    that provides it ("CPU", "CUDA", "Vulkan", "Metal", "RPC"). Memory is in bytes; for the
    CPU, `free` is the memory the system can still give (ggml reports all of it as free)."""

    id: str
    name: str
    description: str
    kind: str
    library: str
    total: int
    free: int
    pci_bus_id: str | None = None  # as ggml reports it (GPU backends of recent ggml)
    nvidia: NvidiaGPU | None = None  # NVML's view of the same GPU, when matched


@dataclass(frozen=True)
class DeviceReport:
    """Everything found: ggml's devices, every GPU NVML sees (including ones this ggml cannot
    use, e.g. with a CPU-only build), and why NVML reported nothing (`nvidia_error`)."""

    devices: list[Device]
    nvidia: list[NvidiaGPU]
    nvidia_error: str | None = None

    def unused_nvidia(self) -> list[NvidiaGPU]:
        """NVIDIA GPUs no ggml device was matched to."""
        used = {d.nvidia.uuid for d in self.devices if d.nvidia is not None}
        return [gpu for gpu in self.nvidia if gpu.uuid not in used]

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> DeviceReport:
        """The inverse of `to_dict`; a malformed report is a ValueError."""
        try:
            devices = [
                Device(**{**d, "nvidia": NvidiaGPU(**d["nvidia"]) if d.get("nvidia") else None})
                for d in data["devices"]
            ]
            nvidia = [NvidiaGPU(**n) for n in data["nvidia"]]
            return cls(devices, nvidia, data.get("nvidia_error"))
        except (KeyError, TypeError) as e:
            raise ValueError(f"not a device report: {e}") from None

    @classmethod
    def from_json(cls, text: str) -> DeviceReport:
        try:
            data = json.loads(text)
        except json.JSONDecodeError as e:
            raise ValueError(f"not a device report (invalid JSON: {e})") from None
        if not isinstance(data, dict):
            raise ValueError("not a device report (not a JSON object)")
        return cls.from_dict(data)

    def summary(self) -> str:
        """One log line: "devices: CPU (AMD EPYC, 23.5 GiB); no NVIDIA GPU (pynvml: ...)"."""
        parts = []
        for d in self.devices:
            mem = _gib(d.total) if d.kind == "CPU" else f"{_gib(d.free)} free of {_gib(d.total)}"
            label = d.nvidia.name if d.nvidia is not None else d.description
            parts.append(f"{d.id} ({label}, {mem})")
        line = "devices: " + (", ".join(parts) or "none")
        if self.nvidia_error is not None:
            return f"{line}; no NVIDIA GPU ({self.nvidia_error})"
        driver = self.nvidia[0].driver if self.nvidia else "?"
        line += f"; NVIDIA driver {driver}"
        unused = self.unused_nvidia()
        if unused:
            names = ", ".join(gpu.name for gpu in unused)
            line += f"; not usable by this ggml build (no CUDA backend for it): {names}"
        return line


def _gib(n: int) -> str:
    return f"{n / 2**30:.1f} GiB"


def _meminfo(field: str) -> int | None:
    """A /proc/meminfo field in bytes (None without /proc or the field)."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def system_available_memory() -> int | None:
    """Bytes of memory the system can give a new process, or None when unknown."""
    available = _meminfo("MemAvailable")
    if available is not None:
        return available
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


def system_free_swap() -> int:
    """Bytes of swap free (0 when unknown)."""
    return _meminfo("SwapFree") or 0


def normalize_pci_bus_id(text: str) -> str:
    """A PCI bus id in one spelling, "dddd:bb:dd.f" in lower-case hex: NVML writes the domain
    with 8 digits ("00000000:01:00.0"), ggml and CUDA with 4. Text that is not a bus id comes
    back lower-cased."""
    s = text.strip().lower()
    try:
        domain, bus, rest = s.split(":")
        dev, fn = rest.split(".") if "." in rest else (rest, "0")
        return f"{int(domain, 16):04x}:{int(bus, 16):02x}:{int(dev, 16):02x}.{int(fn, 16):x}"
    except ValueError:
        return s


_KINDS = {"CPU": "CPU", "GPU": "GPU", "IGPU": "IGPU", "ACCEL": "ACCEL"}


def _kind(type_value: int) -> str:
    import ggml as g

    for name in _KINDS:
        if getattr(g, f"GGML_BACKEND_DEVICE_TYPE_{name}", None) == type_value:
            return name
    return f"type {type_value}"


def ggml_devices() -> list[Device]:
    """ggml's backend devices, in ggml's order, with their memory (initialises GPU backends;
    see the module's docstring)."""
    import ctypes

    import ggml as g

    from . import ggml_lib  # noqa: F401 - routes ggml's log to Python logging

    out = []
    for i in range(int(g.ggml_backend_dev_count())):
        dev = g.ggml_backend_dev_get(i)
        props = g.ggml_backend_dev_props()
        g.ggml_backend_dev_get_props(dev, ctypes.byref(props))
        kind = _kind(int(props.type))
        free, total = int(props.memory_free), int(props.memory_total)
        if kind == "CPU":
            free = min(total, system_available_memory() or free)
        out.append(
            Device(
                id=_text(props.name),
                name=_text(props.description),
                description=_text(props.description),
                kind=kind,
                library=_text(g.ggml_backend_reg_name(g.ggml_backend_dev_backend_reg(dev))),
                total=total,
                free=free,
                pci_bus_id=_text(props.device_id) or None,
            )
        )
    return out


def _text(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return str(value)


def _nvml_reason(pynvml: Any, error: Exception) -> str:
    value = getattr(error, "value", None)
    if value is not None and value == getattr(pynvml, "NVML_ERROR_LIBRARY_NOT_FOUND", object()):
        return "pynvml: driver not found"
    if value is not None and value == getattr(pynvml, "NVML_ERROR_DRIVER_NOT_LOADED", object()):
        return "pynvml: driver not loaded"
    return f"pynvml: {error}"


def nvidia_gpus() -> tuple[list[NvidiaGPU], str | None]:
    """NVML's GPUs and None, or no GPU and the reason (never raises)."""
    try:
        import pynvml
    except ImportError:
        return [], "pynvml is not installed"
    nvml_error: Any = getattr(pynvml, "NVMLError", None)
    errors: tuple[type[Exception], ...] = (OSError, AttributeError)
    if isinstance(nvml_error, type) and issubclass(nvml_error, Exception):
        errors = (nvml_error, *errors)
    try:
        pynvml.nvmlInit()
    except errors as e:
        return [], _nvml_reason(pynvml, e)
    try:
        driver = _text(pynvml.nvmlSystemGetDriverVersion())
        gpus = []
        for i in range(int(pynvml.nvmlDeviceGetCount())):
            handle = pynvml.nvmlDeviceGetHandleByIndex(i)
            memory = pynvml.nvmlDeviceGetMemoryInfo(handle)
            major, minor = pynvml.nvmlDeviceGetCudaComputeCapability(handle)
            gpus.append(
                NvidiaGPU(
                    index=i,
                    name=_text(pynvml.nvmlDeviceGetName(handle)),
                    uuid=_text(pynvml.nvmlDeviceGetUUID(handle)),
                    pci_bus_id=normalize_pci_bus_id(
                        _text(pynvml.nvmlDeviceGetPciInfo(handle).busId)
                    ),
                    driver=driver,
                    compute=f"{major}.{minor}",
                    total=int(memory.total),
                    free=int(memory.free),
                )
            )
    except errors as e:
        return [], _nvml_reason(pynvml, e)
    finally:
        with contextlib.suppress(*errors):
            pynvml.nvmlShutdown()
    if not gpus:
        return [], "NVML found no GPU"
    return gpus, None


def _uuid_key(text: str) -> str:
    s = text.strip().lower()
    return s[4:] if s.startswith("gpu-") else s


def attach_nvidia(devices: list[Device], gpus: list[NvidiaGPU]) -> list[Device]:
    """`devices` with NVML's view attached to the GPUs it matches: by PCI bus id or UUID where
    ggml reports one; else, when ggml has exactly one CUDA device without an id and NVML one
    GPU left, those two. The name becomes NVML's."""
    by_pci = {gpu.pci_bus_id: gpu for gpu in gpus}
    by_uuid = {_uuid_key(gpu.uuid): gpu for gpu in gpus}
    matched: dict[int, NvidiaGPU] = {}
    for i, d in enumerate(devices):
        if d.kind == "CPU" or not d.pci_bus_id:
            continue
        gpu = by_pci.get(normalize_pci_bus_id(d.pci_bus_id)) or by_uuid.get(_uuid_key(d.pci_bus_id))
        if gpu is not None:
            matched[i] = gpu
    left = [gpu for gpu in gpus if gpu not in matched.values()]
    unknown = [i for i, d in enumerate(devices) if d.library == "CUDA" and i not in matched]
    if len(unknown) == 1 and len(left) == 1 and not devices[unknown[0]].pci_bus_id:
        matched[unknown[0]] = left[0]
    return [
        dataclasses.replace(d, name=matched[i].name, nvidia=matched[i]) if i in matched else d
        for i, d in enumerate(devices)
    ]


def probe() -> DeviceReport:
    """ggml's devices (with the RPC workers of HEARTH_RPC_SERVERS) and NVML's GPUs, matched,
    in this process."""
    from .rpc import RpcUnavailableError, add_servers, servers_from_env

    try:
        add_servers(servers_from_env())
    except (RpcUnavailableError, ValueError) as e:
        sys.stderr.write(f"hearth: {e}\n")
    gpus, reason = nvidia_gpus()
    return DeviceReport(attach_nvidia(ggml_devices(), gpus), gpus, reason)


def probe_command() -> list[str]:
    """The command line that prints `probe()`'s report as JSON on its last stdout line."""
    return [sys.executable, "-m", "hearth.engine.ml.devices"]


def main() -> int:
    sys.stdout.write(json.dumps(probe().to_dict()) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
