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


class HttpStep:
    """A `ChatStep` over a live service's /api/chat (streamed, as the CLI does), with
    `body` added to every request (`format`, `options`); keeps each request's messages and
    each reply's final object."""

    def __init__(self, url: str, model: str, **body: object) -> None:
        from hearth.client import HearthClient

        self.client = HearthClient(url, timeout=600)
        self.model, self.body = model, body
        self.requests: list[list[dict[str, object]]] = []
        self.finals: list[dict[str, object]] = []

    def __call__(self, messages: list[dict[str, object]], tools: list[dict[str, object]]) -> object:
        from hearth.agent.loop import StepReply

        self.requests.append([dict(m) for m in messages])
        body = {"model": self.model, "messages": messages, "tools": tools, **self.body}
        chunks = list(self.client.stream("/api/chat", body))
        self.finals.append(chunks[-1])
        return StepReply.from_chunks(chunks)

    def prompt_tokens(self) -> list[int]:
        return [int(f["hearth"]["prompt_tokens"]) for f in self.finals]  # type: ignore[index]


def forced(tool: str, arguments: dict[str, object]) -> dict[str, object]:
    """The JSON schema that holds the model to one call of `tool` (/api/chat's `format`)."""
    return {
        "type": "object",
        "required": ["name", "arguments"],
        "additionalProperties": False,
        "properties": {
            "name": {"const": tool},
            "arguments": {
                "type": "object",
                "required": list(arguments),
                "additionalProperties": False,
                "properties": arguments,
            },
        },
    }
