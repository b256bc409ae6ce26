"""A real MCP server for the desktop app's tool tests (stdio, written with the mcp SDK):
`forecast(city)` answers in text, `chart(city)` with a picture, `radar(city)` takes a
minute (to be stopped). Run as a program."""

from __future__ import annotations

import io

import anyio
from mcp.server.mcpserver import Image, MCPServer

server = MCPServer("weather")


@server.tool()
def forecast(city: str) -> str:
    """Tomorrow's weather for a city."""
    return f"{city}: sunny, 21 °C, light wind from the west."


@server.tool()
def chart(city: str) -> Image:
    """A small temperature chart for a city, as a PNG."""
    from PIL import Image as Picture
    from PIL import ImageDraw

    pic = Picture.new("RGB", (96, 48), (250, 250, 250))
    draw = ImageDraw.Draw(pic)
    draw.line([(4, 40), (30, 20), (60, 28), (92, 8)], fill=(220, 90, 40), width=3)
    draw.text((4, 2), city[:12], fill=(30, 30, 30))
    out = io.BytesIO()
    pic.save(out, "PNG")
    return Image(data=out.getvalue(), format="png")


@server.tool()
async def radar(city: str) -> str:
    """A radar sweep over a city; it takes a minute."""
    await anyio.sleep(60)
    return f"{city}: no rain on the radar."


if __name__ == "__main__":
    server.run("stdio")
