"""MCP servers for the agent tests: `tests/agent/mcp_server.py` (written with the mcp SDK) over
stdio, and the same server over streamable HTTP in a subprocess on a free loopback port."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from pathlib import Path

SERVER = Path(__file__).resolve().parent / "mcp_server.py"


def stdio_entry(**extra: object) -> dict[str, object]:
    """The config entry (Claude Desktop shape) of the test server over stdio."""
    return {"command": sys.executable, "args": [str(SERVER), "stdio"], **extra}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class HttpServer:
    """The test server over streamable HTTP, in its own process; `kill()` and `start()`
    again on the same port (a server that goes away and comes back)."""

    def __init__(self, port: int, log: Path) -> None:
        self.port, self.log = port, log
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/mcp"

    def start(self) -> None:
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(
                [sys.executable, str(SERVER), "http", str(self.port)],
                stdout=log,
                stderr=log,
                stdin=subprocess.DEVNULL,
            )
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            assert self.proc.poll() is None, self.log.read_text()
            try:
                socket.create_connection(("127.0.0.1", self.port), 0.2).close()
                return
            except OSError:
                time.sleep(0.05)
        raise AssertionError("the HTTP MCP server did not start")

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)
