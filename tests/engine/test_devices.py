"""Device enumeration: ggml's CPU device against /proc/meminfo, the subprocess probe, and the
NVIDIA side through real and fake `pynvml` modules (no GPU here: a fake NVML with two GPUs
proves the mapping onto ggml's CUDA devices)."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
import types
from collections.abc import Callable
from typing import Any

import pytest

from hearth.engine.ml import devices as dv
from hearth.engine.ml.devices import Device, DeviceReport, NvidiaGPU


def _meminfo() -> dict[str, int]:
    out = {}
    with open("/proc/meminfo") as f:
        for line in f:
            key, value = line.split(":", 1)
            parts = value.split()
            out[key] = int(parts[0]) * (1024 if parts[1:] == ["kB"] else 1)
    return out


needs_meminfo = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc/meminfo")


@needs_meminfo
def test_cpu_device_memory_is_the_system_s() -> None:
    before = _meminfo()
    found = dv.ggml_devices()
    after = _meminfo()
    cpus = [d for d in found if d.kind == "CPU"]
    assert len(cpus) == 1
    cpu = cpus[0]
    assert (cpu.id, cpu.library) == ("CPU", "CPU")
    assert cpu.description
    assert abs(cpu.total - before["MemTotal"]) <= 0.01 * before["MemTotal"]
    low = min(before["MemAvailable"], after["MemAvailable"]) - 256 * 2**20
    high = max(before["MemAvailable"], after["MemAvailable"]) + 256 * 2**20
    assert low <= cpu.free <= high
    assert 0 < cpu.free <= cpu.total
    swap = (before["SwapFree"], after["SwapFree"])
    assert min(swap) - 64 * 2**20 <= dv.system_free_swap() <= max(swap) + 64 * 2**20


def test_subprocess_probe_reports_what_the_process_sees() -> None:
    done = subprocess.run(dv.probe_command(), capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    report = DeviceReport.from_json(done.stdout.strip().splitlines()[-1])
    here = dv.probe()
    assert [(d.id, d.kind, d.library, d.total) for d in report.devices] == [
        (d.id, d.kind, d.library, d.total) for d in here.devices
    ]
    assert report.nvidia_error == here.nvidia_error
    assert DeviceReport.from_dict(report.to_dict()) == report


def test_a_malformed_report_is_a_value_error() -> None:
    with pytest.raises(ValueError, match="invalid JSON"):
        DeviceReport.from_json("devices: CPU")
    with pytest.raises(ValueError, match="not a device report"):
        DeviceReport.from_json('{"devices": [{"id": "CPU"}], "nvidia": []}')


def test_pci_bus_ids_are_compared_in_one_spelling() -> None:
    assert dv.normalize_pci_bus_id("00000000:01:00.0") == "0000:01:00.0"
    assert dv.normalize_pci_bus_id("0000:C1:00.0") == "0000:c1:00.0"
    assert dv.normalize_pci_bus_id("0001:1a:1f") == "0001:1a:1f.0"
    assert dv.normalize_pci_bus_id(" GPU-ABC ") == "gpu-abc"


# --- NVML ----------------------------------------------------------------------------------


def test_no_pynvml_is_no_nvidia_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", None)  # import pynvml -> ImportError
    assert dv.nvidia_gpus() == ([], "pynvml is not installed")
    report = dv.probe()
    assert report.nvidia == [] and any(d.kind == "CPU" for d in report.devices)
    assert report.summary().endswith("; no NVIDIA GPU (pynvml is not installed)")


def test_the_installed_pynvml_without_a_driver_is_no_nvidia_gpu() -> None:
    pynvml = pytest.importorskip("pynvml")
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:
        pass
    else:
        pynvml.nvmlShutdown()
        pytest.skip("this machine has an NVIDIA driver")
    gpus, reason = dv.nvidia_gpus()
    assert gpus == []
    assert reason is not None and reason.startswith("pynvml: driver not")


class _NVMLError(Exception):
    def __init__(self, value: int) -> None:
        super().__init__(value)
        self.value = value

    def __str__(self) -> str:
        return {12: "NVML Shared Library Not Found", 9: "Driver Not Loaded"}.get(
            self.value, f"Unknown Error {self.value}"
        )


_GPUS = [  # what the fake driver reports, in NVML's order
    dict(name="NVIDIA GeForce RTX 4090", uuid="GPU-aaaa-1111", bus="00000000:41:00.0",
         cc=(8, 9), total=24 * 2**30, free=20 * 2**30),
    dict(name="NVIDIA RTX A2000", uuid="GPU-bbbb-2222", bus="00000000:01:00.0",
         cc=(8, 6), total=6 * 2**30, free=5 * 2**30),
]  # fmt: skip


def _fake_pynvml(fail: dict[str, int] | None = None) -> tuple[types.ModuleType, list[str]]:
    """A pynvml module over `_GPUS`; `fail` names functions that raise NVMLError(value)."""
    calls: list[str] = []
    fail = fail or {}
    m = types.ModuleType("pynvml")

    def fn(name: str, result: Callable[..., Any]) -> None:
        def call(*args: Any) -> Any:
            calls.append(name)
            if name in fail:
                raise _NVMLError(fail[name])
            return result(*args)

        setattr(m, name, call)

    m.NVMLError = _NVMLError  # type: ignore[attr-defined]
    m.NVML_ERROR_LIBRARY_NOT_FOUND = 12  # type: ignore[attr-defined]
    m.NVML_ERROR_DRIVER_NOT_LOADED = 9  # type: ignore[attr-defined]
    fn("nvmlInit", lambda: None)
    fn("nvmlShutdown", lambda: None)
    fn("nvmlSystemGetDriverVersion", lambda: "550.54.14")
    fn("nvmlDeviceGetCount", lambda: len(_GPUS))
    fn("nvmlDeviceGetHandleByIndex", lambda i: _GPUS[i])
    # Older pynvml versions answer bytes.
    fn("nvmlDeviceGetName", lambda h: str(h["name"]).encode() if h is _GPUS[0] else h["name"])
    fn("nvmlDeviceGetUUID", lambda h: h["uuid"])
    fn("nvmlDeviceGetPciInfo", lambda h: types.SimpleNamespace(busId=h["bus"].encode()))
    fn("nvmlDeviceGetCudaComputeCapability", lambda h: h["cc"])
    fn(
        "nvmlDeviceGetMemoryInfo",
        lambda h: types.SimpleNamespace(total=h["total"], free=h["free"], used=0),
    )
    return m, calls


@pytest.mark.parametrize(
    ("fail", "reason"),
    [
        ({"nvmlInit": 12}, "pynvml: driver not found"),
        ({"nvmlInit": 9}, "pynvml: driver not loaded"),
        ({"nvmlDeviceGetCount": 999}, "pynvml: Unknown Error 999"),
        ({"nvmlDeviceGetMemoryInfo": 3}, "pynvml: Unknown Error 3"),
    ],
)
def test_nvml_errors_are_no_nvidia_gpu_with_the_reason(
    monkeypatch: pytest.MonkeyPatch, fail: dict[str, int], reason: str
) -> None:
    fake, calls = _fake_pynvml(fail)
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    assert dv.nvidia_gpus() == ([], reason)
    report = dv.probe()
    assert report.summary().endswith(f"; no NVIDIA GPU ({reason})")
    if "nvmlInit" not in fail:
        assert calls[-1] == "nvmlShutdown"  # NVML is released after a failure too


def test_a_driver_without_gpus_is_no_nvidia_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    fake, _ = _fake_pynvml()
    fake.nvmlDeviceGetCount = lambda: 0  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    assert dv.nvidia_gpus() == ([], "NVML found no GPU")


def test_two_nvidia_gpus_are_reported_with_their_fields(monkeypatch: pytest.MonkeyPatch) -> None:
    fake, calls = _fake_pynvml()
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    gpus, reason = dv.nvidia_gpus()
    assert reason is None
    assert gpus == [
        NvidiaGPU(0, "NVIDIA GeForce RTX 4090", "GPU-aaaa-1111", "0000:41:00.0", "550.54.14",
                  "8.9", 24 * 2**30, 20 * 2**30),
        NvidiaGPU(1, "NVIDIA RTX A2000", "GPU-bbbb-2222", "0000:01:00.0", "550.54.14",
                  "8.6", 6 * 2**30, 5 * 2**30),
    ]  # fmt: skip
    assert calls[0] == "nvmlInit" and calls[-1] == "nvmlShutdown"
    # This ggml has no CUDA backend: the GPUs are listed, and said to be unusable.
    report = dv.probe()
    assert report.nvidia == gpus and report.nvidia_error is None
    assert all(d.nvidia is None for d in report.devices)
    assert report.unused_nvidia() == gpus
    assert report.summary().endswith(
        "; NVIDIA driver 550.54.14; not usable by this ggml build (no CUDA backend for it): "
        "NVIDIA GeForce RTX 4090, NVIDIA RTX A2000"
    )
    assert DeviceReport.from_json(_json(report)) == report


def _json(report: DeviceReport) -> str:
    import json

    return json.dumps(report.to_dict())


def _cuda(i: int, bus: str | None) -> Device:
    return Device(f"CUDA{i}", f"CUDA{i}", f"cuda {i}", "GPU", "CUDA", 10, 9, bus)


_CPU = Device("CPU", "AMD EPYC", "AMD EPYC", "CPU", "CPU", 100, 50)


def _nvml() -> list[NvidiaGPU]:
    return [
        NvidiaGPU(i, str(g["name"]), str(g["uuid"]), dv.normalize_pci_bus_id(str(g["bus"])),
                  "550.54.14", "8.9", int(g["total"]), int(g["free"]))  # type: ignore[call-overload]
        for i, g in enumerate(_GPUS)
    ]  # fmt: skip


def test_ggml_devices_are_matched_to_nvml_by_pci_bus_id_not_order() -> None:
    gpus = _nvml()
    # CUDA orders the fastest first; NVML by bus. ggml writes the domain with 4 digits.
    found = dv.attach_nvidia([_CPU, _cuda(0, "0000:41:00.0"), _cuda(1, "0000:01:00.0")], gpus)
    assert found[0] == _CPU
    assert found[1].nvidia == gpus[0] and found[1].name == gpus[0].name
    assert found[2].nvidia == gpus[1] and found[2].name == gpus[1].name
    assert dataclasses.replace(found[1], name="CUDA0", nvidia=None) == _cuda(0, "0000:41:00.0")
    report = DeviceReport(found, gpus)
    assert report.unused_nvidia() == []
    assert report.summary() == (
        "devices: CPU (AMD EPYC, 0.0 GiB), CUDA0 (NVIDIA GeForce RTX 4090, 0.0 GiB free of "
        "0.0 GiB), CUDA1 (NVIDIA RTX A2000, 0.0 GiB free of 0.0 GiB); NVIDIA driver 550.54.14"
    )


def test_matching_by_uuid_and_the_single_gpu_fallback() -> None:
    gpus = _nvml()
    by_uuid = dv.attach_nvidia([_cuda(0, "GPU-BBBB-2222")], gpus)
    assert by_uuid[0].nvidia == gpus[1]
    # An older ggml reports no bus id: one CUDA device and one GPU left are the same.
    assert dv.attach_nvidia([_cuda(0, None)], gpus[:1])[0].nvidia == gpus[0]
    # Two candidates: no guess.
    assert dv.attach_nvidia([_cuda(0, None)], gpus)[0].nvidia is None
    # A Vulkan device on an NVIDIA card reports its bus id too.
    vk = Device("Vulkan0", "v", "v", "GPU", "Vulkan", 1, 1, "0000:01:00.0")
    assert dv.attach_nvidia([vk], gpus)[0].nvidia == gpus[1]
    # Another vendor's GPU stays as it is.
    other = Device("Vulkan1", "AMD", "AMD", "GPU", "Vulkan", 1, 1, "0000:c1:00.0")
    assert dv.attach_nvidia([other], gpus) == [other]
