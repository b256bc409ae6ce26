"""`hearth worker` processes on loopback for tests: started on free ports, ready when their
port accepts connections, killed afterwards."""

from __future__ import annotations

import contextlib
import socket
import subprocess
import sys
import time
from collections.abc import Iterator

__all__ = ["Workers", "start_workers", "free_port", "wait_for_port"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_for_port(port: int, proc: subprocess.Popen, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"hearth worker exited with status {proc.returncode}")
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.2):
            return
        time.sleep(0.1)
    raise TimeoutError(f"hearth worker did not listen on port {port} in {timeout:.0f} s")


class Workers(list):
    """Endpoints ("127.0.0.1:PORT") of running workers, with their processes in `procs`."""

    procs: list[subprocess.Popen]


@contextlib.contextmanager
def start_workers(count: int, threads: int = 1) -> Iterator[Workers]:
    """Start `count` workers; yields their endpoints."""
    procs: list[subprocess.Popen] = []
    try:
        endpoints = Workers()
        endpoints.procs = procs
        for _ in range(count):
            port = free_port()
            cmd = [sys.executable, "-m", "hearth", "worker", "--port", str(port)]
            proc = subprocess.Popen(
                [*cmd, "--threads", str(threads)],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            procs.append(proc)
            wait_for_port(port, proc)
            endpoints.append(f"127.0.0.1:{port}")
        yield endpoints
    finally:
        for proc in procs:
            proc.kill()
            proc.wait()
