"""ggml's RPC backend: other machines' devices as devices of this process, and the worker
that serves this machine's devices to others.

A worker (`hearth worker`, or llama.cpp's own `rpc-server`: the protocol is ggml's) listens on
a TCP port and runs graphs on its devices for whoever connects. The protocol has no
authentication and no encryption: anyone who can reach the port can use the worker's memory
and compute and send it tensors, so a worker listens on loopback unless told otherwise and
should be exposed only on a trusted network.

`HEARTH_RPC_SERVERS=host:port,...` names the workers the service, its device probe and its
runners use; `add_servers` registers their devices with ggml (named `RPC0`, `RPC1`, ... in
the order given, the same in every process that reads the same variable), after which they
are enumerated, measured and placed like local GPUs.
"""

from __future__ import annotations

import ctypes
import logging
import os
from collections.abc import Iterable

import ggml as g

from ... import env as hearth_env
from ...hostport import HostError, parse_host
from . import ggml_lib

__all__ = [
    "RPC_SERVERS_ENV",
    "RpcUnavailableError",
    "available",
    "servers_from_env",
    "add_servers",
    "serve",
]

RPC_SERVERS_ENV = "HEARTH_RPC_SERVERS"
DEFAULT_PORT = 50052  # llama.cpp's rpc-server default
log = logging.getLogger("hearth.rpc")
_added: dict[str, list[int]] = {}  # endpoint -> device addresses registered for it


class RpcUnavailableError(RuntimeError):
    """This build of ggml has no RPC backend, or a worker cannot be reached."""


def available() -> bool:
    """Whether this process's ggml was built with the RPC backend (GGML_RPC=ON)."""
    return bool(getattr(g, "GGML_USE_RPC", False))


def _endpoint(text: str) -> str:
    try:
        host, port = parse_host(text.strip(), default_port=DEFAULT_PORT)
    except HostError as e:
        raise ValueError(f"{RPC_SERVERS_ENV}: {text.strip()!r} is not host:port ({e})") from None
    return f"{host}:{port}"


def servers_from_env(environ: os._Environ[str] | dict[str, str] | None = None) -> list[str]:
    """The endpoints in HEARTH_RPC_SERVERS ("host:port,host:port"), normalised, in order."""
    env = os.environ if environ is None else environ
    text = hearth_env.text(RPC_SERVERS_ENV, env)
    return [_endpoint(part) for part in text.split(",") if part.strip()]


def add_servers(endpoints: Iterable[str]) -> list[str]:
    """Register the devices of each worker at `endpoints` with ggml (once per process per
    endpoint) and return the names of all of them (`RPC0`, ...). A worker that cannot be
    reached is skipped with a warning (its devices are absent, not an error); raises
    RpcUnavailableError when ggml has no RPC backend."""
    endpoints = list(endpoints)
    if not endpoints:
        return []
    if not available():
        raise RpcUnavailableError(
            f"{RPC_SERVERS_ENV} names RPC workers, but this ggml was built without its RPC "
            "backend (rebuild with CMAKE_ARGS=-DGGML_RPC=ON)"
        )
    names: list[str] = []
    for endpoint in endpoints:
        if endpoint not in _added:
            reg = g.ggml_backend_rpc_add_server(endpoint.encode())
            if not reg:
                log.warning("RPC worker %s cannot be reached; its devices are left out", endpoint)
                continue
            devices = []
            for i in range(int(g.ggml_backend_reg_dev_count(reg))):
                dev = g.ggml_backend_reg_dev_get(reg, i)
                g.ggml_backend_device_register(dev)
                devices.append(int(ctypes.cast(dev, ctypes.c_void_p).value or 0))
            _added[endpoint] = devices
            log.info("RPC worker %s: %d device(s)", endpoint, len(devices))
        for address in _added[endpoint]:
            names.append(g.ggml_backend_dev_name(ctypes.c_void_p(address)).decode())
    return names


def serve(host: str, port: int, threads: int | None = None, cache_dir: str | None = None) -> None:
    """Serve this machine's devices (every GPU ggml was built for, else the CPU) to RPC
    clients on host:port; blocks until the process ends. `cache_dir` lets clients send a
    tensor's hash instead of its bytes when the worker has it cached."""
    if not available():
        raise RpcUnavailableError(
            "this ggml was built without its RPC backend (rebuild with CMAKE_ARGS=-DGGML_RPC=ON)"
        )
    devices = []
    cpu = None
    for i in range(int(g.ggml_backend_dev_count())):
        dev = g.ggml_backend_dev_get(i)
        kind = int(g.ggml_backend_dev_type(dev))
        if kind == g.GGML_BACKEND_DEVICE_TYPE_CPU:
            cpu = dev
        elif kind in (g.GGML_BACKEND_DEVICE_TYPE_GPU, g.GGML_BACKEND_DEVICE_TYPE_IGPU):
            name = g.ggml_backend_reg_name(g.ggml_backend_dev_backend_reg(dev)).decode()
            if name != "RPC":  # never serve another worker's devices
                devices.append(dev)
    if not devices:
        if cpu is None:
            raise RpcUnavailableError("ggml has no device to serve")
        devices = [cpu]
    arr = (g.ggml_backend_dev_t_ctypes * len(devices))(*devices)
    g.ggml_backend_rpc_start_server(
        f"{host}:{port}".encode(),
        cache_dir.encode() if cache_dir else None,
        threads or ggml_lib.compute_threads(),
        len(devices),
        arr,
    )
