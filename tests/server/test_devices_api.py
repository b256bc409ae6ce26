"""`GET /api/hearth/devices`, `hearth devices` and the start-up log line: in process with a
fake probe (two NVIDIA GPUs, a failing probe), the subprocess probe, and a live `hearth serve`
whose CPU device is checked against /proc/meminfo."""

from __future__ import annotations

import asyncio
import io
import logging
import os
import subprocess
import sys
import types
from pathlib import Path

import httpx
import pytest
from fastapi.testclient import TestClient

from hearth.cli.commands import cmd_devices
from hearth.engine.ml.devices import Device, DeviceReport, NvidiaGPU
from hearth.server import devices as server_devices
from hearth.server.app import create_app
from hearth.server.config import ServerConfig
from hearth.server.devices import DeviceProbeError, layout_devices
from hearth.server.scheduling.layout import DeviceId, Gpu

from .fakes import REPO

GiB = 2**30
_4090 = NvidiaGPU(0, "NVIDIA GeForce RTX 4090", "GPU-aaaa", "0000:41:00.0", "550.54.14", "8.9",
                  24 * GiB, 20 * GiB)  # fmt: skip
_A2000 = NvidiaGPU(1, "NVIDIA RTX A2000", "GPU-bbbb", "0000:01:00.0", "550.54.14", "8.6",
                   6 * GiB, 5 * GiB)  # fmt: skip
TWO_GPUS = DeviceReport(
    [
        Device("CPU", "AMD EPYC", "AMD EPYC", "CPU", "CPU", 64 * GiB, 48 * GiB),
        Device(
            "CUDA0",
            _4090.name,
            "NVIDIA GeForce RTX 4090",
            "GPU",
            "CUDA",
            24 * GiB,
            19 * GiB,
            "0000:41:00.0",
            _4090,
        ),
    ],  # fmt: skip
    [_4090, _A2000],
)


def _app(
    tmp_path: Path, probe: server_devices.DeviceProbe, log_devices: bool = False
) -> TestClient:
    app = create_app(
        ServerConfig(),
        models_dir=tmp_path / "models",
        register_default=False,
        available_memory=lambda: None,
        device_probe=probe,
        log_devices=log_devices,
    )
    return TestClient(app, base_url="http://127.0.0.1")


def test_the_endpoint_answers_the_probe_s_report(tmp_path: Path) -> None:
    calls = 0

    async def probe() -> DeviceReport:
        nonlocal calls
        calls += 1
        return TWO_GPUS

    with _app(tmp_path, probe) as client:
        assert calls == 0  # nothing is probed at start unless asked to log
        body = client.get("/api/hearth/devices").json()
        assert DeviceReport.from_dict(body) == TWO_GPUS
        assert body["devices"][1]["nvidia"]["compute"] == "8.9"
        client.get("/api/hearth/devices")
        assert calls == 2  # free memory is live: each request probes


def test_concurrent_requests_share_one_probe(tmp_path: Path) -> None:
    calls = 0

    async def probe() -> DeviceReport:
        nonlocal calls
        calls += 1
        await asyncio.sleep(0.2)
        return TWO_GPUS

    monitor = server_devices.DeviceMonitor(probe)

    async def both() -> list[DeviceReport]:
        return list(await asyncio.gather(monitor.report(), monitor.report()))

    assert asyncio.run(both()) == [TWO_GPUS, TWO_GPUS]
    assert calls == 1


def test_a_recent_report_serves_callers_that_accept_its_age() -> None:
    """The start-up probe serves the first load's layout search; the endpoint probes afresh."""
    calls = 0

    async def probe() -> DeviceReport:
        nonlocal calls
        calls += 1
        return TWO_GPUS

    monitor = server_devices.DeviceMonitor(probe)

    async def run() -> None:
        await monitor.report()
        assert await monitor.report(max_age=30.0) == TWO_GPUS
        assert calls == 1
        await monitor.report()
        assert calls == 2
        await asyncio.sleep(0.05)
        await monitor.report(max_age=0.01)
        assert calls == 3

    asyncio.run(run())


def test_a_failing_probe_is_a_500_with_a_sentence(tmp_path: Path) -> None:
    async def probe() -> DeviceReport:
        raise DeviceProbeError("the device probe failed (status 3): boom")

    with _app(tmp_path, probe) as client:
        r = client.get("/api/hearth/devices")
        assert r.status_code == 500
        assert r.json() == {
            "error": "could not enumerate devices: the device probe failed (status 3): boom"
        }


def test_the_start_up_log_says_what_was_found(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    async def probe() -> DeviceReport:
        return TWO_GPUS

    with caplog.at_level(logging.INFO, logger="hearth.server"), _app(tmp_path, probe, True):
        pass
    assert (
        "devices: CPU (AMD EPYC, 64.0 GiB), CUDA0 (NVIDIA GeForce RTX 4090, 19.0 GiB free of "
        "24.0 GiB); NVIDIA driver 550.54.14; not usable by this ggml build (no CUDA backend "
        "for it): NVIDIA RTX A2000"
    ) in caplog.messages


def test_the_subprocess_probe_reports_its_failures(monkeypatch: pytest.MonkeyPatch) -> None:
    def command(code: str) -> None:
        monkeypatch.setattr(server_devices, "probe_command", lambda: [sys.executable, "-c", code])

    command("import sys; sys.stderr.write('ggml: no backend\\n'); sys.exit(3)")
    with pytest.raises(DeviceProbeError, match=r"failed \(status 3\): ggml: no backend"):
        asyncio.run(server_devices.probe_in_subprocess())
    command("print('hello')")
    with pytest.raises(DeviceProbeError, match="answered nonsense: not a device report"):
        asyncio.run(server_devices.probe_in_subprocess())
    command("import time; time.sleep(30)")
    with pytest.raises(TimeoutError):
        asyncio.run(server_devices.probe_in_subprocess(timeout=0.5))


def test_the_cli_table_shows_nvidia_fields() -> None:
    client = types.SimpleNamespace(devices=lambda: TWO_GPUS.to_dict())
    out = io.StringIO()
    conn = types.SimpleNamespace(client=client)
    assert cmd_devices(types.SimpleNamespace(json=False), conn, out) == 0  # type: ignore[arg-type]
    lines = out.getvalue().splitlines()
    assert lines[0].split() == ["ID", "KIND", "NAME", "FREE", "TOTAL", "LIBRARY", "DRIVER",
                                "COMPUTE"]  # fmt: skip
    assert lines[1].split() == ["CPU", "CPU", "AMD", "EPYC", "48.0", "GiB", "64.0", "GiB", "CPU"]
    assert lines[2].split() == ["CUDA0", "GPU", "NVIDIA", "GeForce", "RTX", "4090", "19.0",
                                "GiB", "24.0", "GiB", "CUDA", "550.54.14", "8.9"]  # fmt: skip
    assert lines[3:] == [
        "NVIDIA RTX A2000 (driver 550.54.14, compute 8.6, 5.0 GiB free of 6.0 GiB) is not "
        "usable: this ggml build has no CUDA backend for it"
    ]


def test_a_report_as_the_layout_search_s_devices(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(server_devices, "system_free_swap", lambda: 2 * GiB)
    gpus, system = layout_devices(TWO_GPUS)
    assert gpus == [Gpu(DeviceId("CUDA", "0"), 19 * GiB, 24 * GiB, "NVIDIA GeForce RTX 4090")]
    assert (system.total, system.free, system.free_swap) == (64 * GiB, 48 * GiB, 2 * GiB)
    more = DeviceReport(
        [
            *TWO_GPUS.devices,
            Device("Vulkan0", "Intel Arc", "Intel Arc", "IGPU", "Vulkan", 8 * GiB, 7 * GiB),
            Device("RPC[10.0.0.2:50052]", "RPC", "10.0.0.2:50052", "GPU", "RPC", GiB, GiB),
        ],
        [],
    )
    gpus, _ = layout_devices(more)
    assert [(str(g.device), g.device.id, g.integrated) for g in gpus] == [
        ("CUDA0", "0", False),
        ("Vulkan0", "0", True),
        ("RPC10.0.0.2:50052", "10.0.0.2:50052", False),
    ]
    with pytest.raises(ValueError, match="no CPU device"):
        layout_devices(DeviceReport(TWO_GPUS.devices[1:], []))


def _meminfo(key: str) -> int:
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1]) * 1024
    raise KeyError(key)


@pytest.mark.slow
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc/meminfo")
def test_live_service_endpoint_cli_and_log(live_server) -> None:  # type: ignore[no-untyped-def]
    body = httpx.get(f"{live_server.url}/api/hearth/devices", timeout=120).json()
    cpu = [d for d in body["devices"] if d["kind"] == "CPU"]
    assert len(cpu) == 1
    total, available = _meminfo("MemTotal"), _meminfo("MemAvailable")
    assert abs(cpu[0]["total"] - total) <= 0.01 * total
    assert abs(cpu[0]["free"] - available) <= max(0.05 * total, 512 * 2**20)
    if not body["nvidia"]:
        assert body["nvidia_error"]

    env = dict(os.environ, HEARTH_HOST=live_server.url.removeprefix("http://"))
    done = subprocess.run([sys.executable, "-m", "hearth", "devices"], capture_output=True,
                          text=True, env=env, timeout=120, cwd=REPO)  # fmt: skip
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].split()[:3] == ["ID", "KIND", "NAME"]
    assert lines[1].split()[:2] == ["CPU", "CPU"]
    if body["nvidia_error"]:
        assert f"no NVIDIA GPU ({body['nvidia_error']})" in lines

    log = live_server.log.read_text()
    assert "hearth.server: devices: CPU (" in log
    if body["nvidia_error"]:
        assert f"; no NVIDIA GPU ({body['nvidia_error']})" in log
