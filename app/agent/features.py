"""MCP's prompts and resources over a connected `mcp.Client` (on the hub's loop; the hub's
public `prompts`, `get_prompt`, `resources` and `read_resource` wrap these in its time limit
and turn failures into sentences). A server that does not offer prompts or resources (its
capabilities say so) lists none without a request."""

from __future__ import annotations

from typing import Any

import mcp_types
from mcp import Client

from .content import (
    PromptArg,
    PromptSpec,
    ResourceContent,
    ResourceSpec,
    prompt_messages,
    resource_contents,
)

__all__ = ["get_prompt", "list_prompts", "list_resources", "read_resource"]

_PAGES = 100  # a server paging forever cannot hang a listing


async def list_prompts(client: Client, server: str) -> list[PromptSpec]:
    if client.server_capabilities.prompts is None:
        return []
    out: list[PromptSpec] = []
    cursor: str | None = None
    for _ in range(_PAGES):
        page = await client.list_prompts(cursor=cursor)
        for p in page.prompts:
            args = tuple(
                PromptArg(a.name, a.description or "", bool(a.required)) for a in p.arguments or ()
            )
            out.append(PromptSpec(server, p.name, p.title or "", p.description or "", args))
        cursor = page.next_cursor
        if not cursor:
            break
    return out


async def get_prompt(
    client: Client, _server: str, name: str, arguments: dict[str, str]
) -> list[dict[str, Any]]:
    result: mcp_types.GetPromptResult = await client.get_prompt(name, arguments or None)
    return prompt_messages(result)


async def list_resources(client: Client, server: str) -> list[ResourceSpec]:
    if client.server_capabilities.resources is None:
        return []
    out: list[ResourceSpec] = []
    cursor: str | None = None
    for _ in range(_PAGES):
        page = await client.list_resources(cursor=cursor)
        for r in page.resources:
            out.append(
                ResourceSpec(
                    server,
                    str(r.uri),
                    r.name,
                    r.title or "",
                    r.description or "",
                    r.mime_type or "",
                    r.size,
                )
            )
        cursor = page.next_cursor
        if not cursor:
            break
    return out


async def read_resource(client: Client, _server: str, uri: str) -> list[ResourceContent]:
    result = await client.read_resource(uri, cache_mode="bypass")
    return resource_contents(result)
