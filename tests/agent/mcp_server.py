"""A real MCP server for the tests, written with the mcp SDK (`MCPServer`).

    python tests/agent/mcp_server.py stdio
    python tests/agent/mcp_server.py http PORT      # streamable HTTP at http://127.0.0.1:PORT/mcp

Tools: echo, add (structured), picture (a PNG), image_file (a file's picture), crash (the
process exits mid-call), hang (sleeps), huge (a long text), pid (which process answers), env
(a variable's value), cwd, grow (adds a tool, and says the tools changed), header (an HTTP
request's header). With HEARTH_TEST_CALLS set to a file, each call of echo and image_file
appends a JSON line {"tool", "arguments", "pid"} to it (what reached the server).
"""

from __future__ import annotations

import io
import json
import os
import sys
from pathlib import Path

import anyio
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.utilities.types import Image
from PIL import Image as PILImage
from pydantic import BaseModel

server = MCPServer("hearth-test")


def record(tool: str, **arguments: object) -> None:
    path = os.environ.get("HEARTH_TEST_CALLS")
    if path:
        with open(path, "a", encoding="utf-8") as f:
            f.write(json.dumps({"tool": tool, "arguments": arguments, "pid": os.getpid()}) + "\n")


@server.tool()
def echo(text: str) -> str:
    """Say the text back."""
    record("echo", text=text)
    return f"echo: {text}"


class Sum(BaseModel):
    total: int


@server.tool()
def add(a: int, b: int) -> Sum:
    """Add two numbers."""
    return Sum(total=a + b)


def picture_png() -> bytes:
    img = PILImage.new("RGB", (32, 32), (200, 30, 30))
    for x in range(32):
        img.putpixel((x, x), (0, 0, 255))
    buf = io.BytesIO()
    img.save(buf, "PNG")
    return buf.getvalue()


@server.tool()
def picture() -> Image:
    """A small red picture with a blue diagonal."""
    return Image(data=picture_png(), format="png")


@server.tool()
def image_file(path: str) -> Image:
    """The picture in a file."""
    record("image_file", path=path)
    return Image(data=Path(path).read_bytes(), format="png")


@server.tool()
def crash() -> str:
    """Exits the server process in the middle of the call."""
    sys.stderr.write("crashing on purpose\n")
    sys.stderr.flush()
    os._exit(3)


@server.tool()
async def hang(seconds: float = 3600) -> str:
    """Sleeps."""
    await anyio.sleep(seconds)
    return "woke up"


@server.tool()
def huge(size: int) -> str:
    """A text of `size` characters."""
    return ("0123456789" * (size // 10 + 1))[:size]


@server.tool()
async def grow(name: str, ctx: Context) -> str:
    """Add a tool named `name` (it says its name) and tell the client the tools changed."""

    def said() -> str:
        return f"I am {name}"

    server.add_tool(said, name=name, description=f"The tool {name}.")
    # Both eras: the handshake era's notification, and 2026-07-28's subscription event.
    await ctx.notify_tools_changed()
    await ctx.session.send_tool_list_changed()
    return f"added {name}"


@server.tool()
def header(name: str, ctx: Context) -> str:
    """A header of the HTTP request that carried this call (streamable HTTP only)."""
    request = ctx.request_context.request
    return str(request.headers.get(name, "<unset>")) if request is not None else "<not http>"


@server.tool()
def pid() -> int:
    """The server's process id."""
    return os.getpid()


@server.tool()
def env(name: str) -> str:
    """An environment variable's value."""
    return os.environ.get(name, "<unset>")


@server.tool()
def cwd() -> str:
    """The server's working folder."""
    return os.getcwd()


if __name__ == "__main__":
    if sys.argv[1:2] == ["http"]:
        server.run("streamable-http", host="127.0.0.1", port=int(sys.argv[2]))
    else:
        server.run("stdio")
