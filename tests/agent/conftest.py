"""Fixtures of the agent tests: the test MCP server over streamable HTTP (`helpers.py`)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from .helpers import HttpServer, free_port


@pytest.fixture(scope="module")
def http_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[HttpServer]:
    server = HttpServer(free_port(), tmp_path_factory.mktemp("mcp-http") / "server.log")
    server.start()
    yield server
    server.kill()


@pytest.fixture
def live_http(http_server: HttpServer) -> HttpServer:
    """The HTTP server, started again if an earlier test killed it."""
    if http_server.proc is None or http_server.proc.poll() is not None:
        http_server.start()
    return http_server
