"""The FastAPI application factory: `create_app(config)` wires store, scheduler and routes.

Nothing is module-level state: each call builds a fresh app with its own scheduler, so tests
can run several side by side (with a fake runner launcher).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable
from pathlib import Path

from fastapi import FastAPI

from ..engine.ml.devices import system_available_memory
from ..plugins.registry import ArchitectureRegistry
from .api.anthropic import routes as anthropic
from .api.hearth import devices as hearth
from .api.ollama import create, pull
from .api.ollama import generation as ollama
from .api.ollama import models as ollama_models
from .api.openai import routes as openai
from .api.responses import routes as responses_api
from .api.shared.disconnect import CancelOnDisconnect
from .api.shared.errors import install_error_handlers
from .api.shared.security import install_security
from .config import ServerConfig
from .devices import DeviceMonitor, DeviceProbe, layout_devices, probe_in_subprocess
from .scheduling.layout import Gpu
from .scheduling.load_layout import Placement, system_memory
from .scheduling.records import Launcher, process_launcher
from .scheduling.scheduler import Scheduler
from .service import Service
from .store.model_store import ModelStore
from .store.modelinfo import ModelInfoCache

__all__ = ["create_app", "register_default_model"]

log = logging.getLogger("hearth.server")


def register_default_model(store: ModelStore) -> None:
    """Register the built-in gemma3:270m on first start (assembling its file once)."""
    from ..default_model import DEFAULT_MODEL, default_model_path, default_model_sha256

    try:
        sha = default_model_sha256()
    except FileNotFoundError as e:
        log.warning("%s", e)
        return
    if store.register_default(DEFAULT_MODEL, default_model_path, sha):
        log.info("registered the built-in model %s", DEFAULT_MODEL)


GPU_REPORT_MAX_AGE_S = 30.0  # a load plans with a device report up to this old


async def _gpus(devices: DeviceMonitor) -> list[Gpu]:
    """The GPUs for a load's layout search; a failed probe means planning for the CPU."""
    try:
        report = await devices.report(max_age=GPU_REPORT_MAX_AGE_S)
    except Exception as e:  # any probe failure: plan for the CPU
        log.warning("could not enumerate devices (%s): planning for the CPU only", e)
        return []
    return layout_devices(report)[0]


def create_app(
    config: ServerConfig,
    models_dir: Path | None = None,
    launcher: Launcher = process_launcher,
    registry: ArchitectureRegistry | None = None,
    register_default: bool = True,
    available_memory: Callable[[], int | None] = system_available_memory,
    on_ready: Callable[[], None] | None = None,
    device_probe: DeviceProbe = probe_in_subprocess,
    log_devices: bool = False,
) -> FastAPI:
    """Build the service. `models_dir` defaults to `hearth.paths.models_dir()`; `on_ready`
    runs once start-up (default model registration) is done; `log_devices` logs the devices
    found (probed in the background by `device_probe`, see `hearth.server.devices`)."""
    if models_dir is None:
        from ..paths import models_dir as default_models_dir

        models_dir = default_models_dir()
    if registry is None:
        from ..plugins.registry import default_registry

        registry = default_registry()
    store = ModelStore(models_dir)
    devices = DeviceMonitor(device_probe)
    placement = Placement(
        system=lambda: system_memory(available_memory()),
        gpus=lambda: _gpus(devices),
        overhead=config.gpu_overhead,
        context=config.gpu_context,
        forget=devices.forget,
    )
    scheduler = Scheduler(config, launcher, available_memory, placement)
    service = Service(config, store, scheduler, ModelInfoCache(registry))

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        if log_devices:
            devices.log_at_start()
        if register_default:
            await asyncio.to_thread(register_default_model, store)
        if on_ready is not None:
            on_ready()
        try:
            yield
        finally:
            await devices.close()
            await scheduler.close()

    from .api.ollama.models import hearth_version

    app = FastAPI(
        title="Hearth",
        version=hearth_version(),
        summary="Ollama-, OpenAI- and Anthropic-compatible API for local GGUF models",
        lifespan=lifespan,
    )
    app.state.service = service
    app.state.devices = devices
    install_error_handlers(app)
    install_security(app, config)
    app.add_middleware(CancelOnDisconnect)  # outermost: a client gone cancels its request
    for module in (ollama_models, ollama, create, pull, openai, responses_api, anthropic, hearth):
        app.include_router(module.router)
    return app
