"""Finding the service: the one at HEARTH_HOST (default 127.0.0.1:11434), or a private one.

`hearth run` works with no service running: it starts `hearth serve` on a free loopback port
with a random API key, talks to it, and ends it on exit (the private service also exits by
itself when our end of its stdin closes, so a killed CLI leaves nothing behind).
"""

from __future__ import annotations

import contextlib
import os
import secrets
import subprocess
import sys
import threading
from dataclasses import dataclass
from pathlib import Path

from .cli.http_client import HearthClient, ServiceError, ServiceUnreachable
from .paths import logs_dir
from .server.config import ConfigError, ServerConfig

__all__ = ["Connection", "connect", "service_url", "start_private_service"]

READY_PREFIX = "Hearth listening on "


def service_url() -> str:
    """Where a shared service listens, from HEARTH_HOST (a wildcard bind means this machine)."""
    try:
        config = ServerConfig.from_env()
    except ConfigError as e:
        raise ServiceError(str(e)) from None
    host = config.host
    if host in ("0.0.0.0", "::", ""):
        host = "127.0.0.1"
    host = f"[{host}]" if ":" in host else host
    return f"http://{host}:{config.port}"


@dataclass
class Connection:
    client: HearthClient
    process: subprocess.Popen[str] | None = None  # a private service we started

    def close(self) -> None:
        self.client.close()
        proc = self.process
        if proc is None or proc.poll() is not None:
            return
        with contextlib.suppress(OSError):
            if proc.stdin is not None:
                proc.stdin.close()
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()

    def __enter__(self) -> Connection:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def connect(start_private: bool = False) -> Connection:
    """A client of the running service; else a private one when `start_private`."""
    url = service_url()
    client = HearthClient(url, os.environ.get("HEARTH_API_KEY") or None)
    if client.is_hearth():
        return Connection(client)
    client.close()
    if not start_private:
        raise ServiceUnreachable(
            f"no Hearth service is running at {url}; start one with `hearth serve`"
        )
    return start_private_service()


def _tail(path: Path) -> str:
    try:
        lines = path.read_text(errors="replace").strip().splitlines()
    except OSError:
        return ""
    useful = [ln for ln in lines if ln.startswith("hearth:")] or lines
    return useful[-1] if useful else ""


def start_private_service(timeout: float = 120.0) -> Connection:
    token = secrets.token_urlsafe(24)
    env = dict(os.environ, HEARTH_API_KEY=token)
    env.pop("HEARTH_HOST", None)
    log = logs_dir() / "private-serve.log"
    with open(log, "w") as err:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "hearth",
                "serve",
                "--host",
                "127.0.0.1",
                "--port",
                "0",
                "--exit-on-stdin-close",
                "--log-level",
                "warning",
            ],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=err,
            text=True,
            env=env,
        )
    first: list[str] = []
    reader = threading.Thread(
        target=lambda: first.append(proc.stdout.readline() if proc.stdout else ""), daemon=True
    )
    reader.start()
    reader.join(timeout)
    line = first[0] if first else ""
    if not line.startswith(READY_PREFIX):
        proc.kill()
        proc.wait()
        reason = _tail(log) or "it did not start in time"
        raise ServiceError(
            f"could not start a private Hearth service: {reason.removeprefix('hearth: ')}"
        )
    url = line[len(READY_PREFIX) :].strip()
    return Connection(HearthClient(url, token), proc)
