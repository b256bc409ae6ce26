"""Hearth's own endpoints (not in Ollama's API), under /api/hearth/.

`GET /api/hearth/devices`: the devices models can run on, as `hearth.engine.ml.devices`
reports them: `{"devices": [{"id", "name", "description", "kind", "library", "total", "free",
"pci_bus_id", "nvidia"}], "nvidia": [...every GPU NVML sees...], "nvidia_error": why none}`,
memory in bytes, probed afresh for each request.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request

from ...devices import DeviceMonitor, DeviceProbeError
from ..shared.errors import APIError

__all__ = ["router"]

router = APIRouter(tags=["hearth"])


@router.get("/api/hearth/devices", summary="Devices models can run on, with their memory")
async def devices(request: Request) -> dict[str, Any]:
    monitor: DeviceMonitor = request.app.state.devices
    try:
        report = await monitor.report()
    except (DeviceProbeError, OSError) as e:
        raise APIError(500, f"could not enumerate devices: {e}") from None
    return report.to_dict()
