"""MCP beyond tools, for the tests: servers written with the official SDK (`MCPServer`) whose
scripts the tests write into their temporary folders (`write_server`), so a test can change a
server's command by writing it elsewhere.

The server offers a prompt (`review`, arguments `code` and `language`), two resources (a text
note and a PNG picture), a tool that asks the user a question while it runs (`book`: seats,
a window seat, a meal, through `Resolve`/`Elicit`, which the SDK sends as `elicitation/create`
on a handshake-era connection and as an input request in the result on a 2026-07-28 one) and
`echo`. Run as `python SCRIPT` (stdio; both protocol eras, the client's first request
decides) or `python SCRIPT --legacy` (a server of the handshake era: it refuses
`server/discover` as such a server does, so a client must fall back to `initialize`).
"""

from __future__ import annotations

import io
from pathlib import Path

SOURCE = '''
import base64, io, sys
from typing import Annotated, Literal

from mcp.server.mcpserver import (
    AcceptedElicitation, Elicit, ElicitationResult, MCPServer, Resolve, UserMessage,
)
from PIL import Image
from pydantic import BaseModel, Field

server = MCPServer("hearth-more")


@server.prompt()
def review(code: str, language: str = "python") -> list:
    """Ask for a review of some code."""
    return [UserMessage(f"Review this {language} code:\\n{code}")]


@server.resource("notes://today", name="today", title="Today's notes", mime_type="text/markdown")
def today() -> str:
    """The notes of the day."""
    return "# Today\\nThe heron is back on the pond."


@server.resource("pictures://red", name="red", mime_type="image/png")
def red() -> bytes:
    img = Image.new("RGB", (8, 8), (220, 20, 20))
    buf = io.BytesIO()
    img.save(buf, "PNG")
    return buf.getvalue()


class Booking(BaseModel):
    seats: int = Field(description="How many seats", ge=1, le=8)
    window: bool = Field(default=False, description="A window seat")
    meal: Literal["none", "veg", "fish"] = "none"


def ask(day: str) -> Elicit[Booking]:
    return Elicit(f"Booking a table on {day}: how many seats?", Booking)


@server.tool()
def book(day: str, answer: Annotated[ElicitationResult[Booking], Resolve(ask)]) -> str:
    """Book a table (asks the user for the details)."""
    if isinstance(answer, AcceptedElicitation):
        b = answer.data
        return f"booked {b.seats} seat(s) on {day}, window={b.window}, meal={b.meal}"
    return f"not booked: the user chose {answer.action}"


@server.tool()
def echo(text: str) -> str:
    """Say the text back."""
    return f"echo: {text}"


def answer_discover_as_2025() -> None:
    """With --legacy: a server of the handshake era (2025-11-25 and before) does not know
    `server/discover` and answers it "method not found"; every other line reaches the SDK's
    server, which then serves the `initialize` handshake."""
    import json, os, threading

    r, w = os.pipe()
    src = os.dup(0)
    os.dup2(r, 0)
    os.close(r)

    def pump() -> None:
        with os.fdopen(src, "rb") as inp, os.fdopen(w, "wb") as out:
            for line in inp:
                try:
                    msg = json.loads(line)
                except ValueError:
                    msg = None
                if isinstance(msg, dict) and msg.get("method") == "server/discover":
                    err = {"code": -32601, "message": "Method not found"}
                    reply = {"jsonrpc": "2.0", "id": msg.get("id"), "error": err}
                    os.write(1, json.dumps(reply).encode() + bytes([10]))
                    continue
                out.write(line)
                out.flush()

    threading.Thread(target=pump, daemon=True).start()


if __name__ == "__main__":
    if "--legacy" in sys.argv:
        answer_discover_as_2025()
    server.run("stdio")
'''


def write_server(folder: Path, name: str = "more_server.py") -> Path:
    """The server's script in `folder`; its path is what a config's `args` name."""
    path = folder / name
    path.write_text(SOURCE, encoding="utf-8")
    return path


def red_png() -> bytes:
    """The picture `pictures://red` should read as (made here, independently)."""
    from PIL import Image

    img = Image.new("RGB", (8, 8), (220, 20, 20))
    buf = io.BytesIO()
    img.save(buf, "PNG")
    return buf.getvalue()
