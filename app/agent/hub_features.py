"""MCP prompts and resources of the hub's servers (`HubFeatures`, part of `hub.ToolHub`).

`prompts()` and `resources()` start the servers asked for and list what the running ones
offer; a server that offers none, cannot list them or failed adds none. `get_prompt()` and
`read_resource()` ask one server, within `call_timeout`, and raise `HubError` with the
sentence to show when it is not running, refuses, does not answer or answers what Hearth
cannot read. The requests themselves are `features.py`'s, their types `content.py`'s.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable, Mapping
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any

import pydantic
from mcp.shared.exceptions import MCPError

from . import features
from .content import PromptSpec, ResourceContent, ResourceSpec
from .hub_base import STOP_WAIT, HubError
from .hub_connection import HubConnections

__all__ = ["HubFeatures"]

log = logging.getLogger(__name__)


class HubFeatures(HubConnections):
    """Prompts and resources (see the module doc)."""

    def prompts(self, servers: Iterable[str] | None = None) -> list[PromptSpec]:
        """The prompts of `servers` (default: every enabled one), starting them; a server
        that offers none, cannot list them or failed adds none."""
        names = None if servers is None else list(servers)
        result: list[PromptSpec] = self._listing(names, features.list_prompts)
        return result

    def get_prompt(
        self, server: str, name: str, arguments: Mapping[str, str] | None = None
    ) -> list[dict[str, Any]]:
        """The messages of `server`'s prompt `name` filled with `arguments`, in /api/chat's
        shape (`content.prompt_messages`). Raises `HubError` with the sentence when it fails."""
        args = {str(k): str(v) for k, v in (arguments or {}).items()}
        messages: list[dict[str, Any]] = self._request(server, features.get_prompt, name, args)
        return messages

    def resources(self, servers: Iterable[str] | None = None) -> list[ResourceSpec]:
        """The resources `servers` list (default: every enabled one), starting them."""
        names = None if servers is None else list(servers)
        result: list[ResourceSpec] = self._listing(names, features.list_resources)
        return result

    def read_resource(self, server: str, uri: str) -> list[ResourceContent]:
        """What `server` gives for `uri` (`resources/read`). Raises `HubError` with the
        sentence when it fails."""
        parts: list[ResourceContent] = self._request(server, features.read_resource, uri)
        return parts

    def _listing(self, names: list[str] | None, fetch: Any) -> Any:
        try:
            return self._run(self._each(names, fetch), self.start_timeout + self.call_timeout)
        except FutureTimeout:
            return []

    def _request(self, server: str, request: Any, *args: Any) -> Any:
        wait = self.start_timeout + self.call_timeout + STOP_WAIT
        try:
            return self._run(self._with_client(server, request, *args), wait)
        except FutureTimeout:
            raise HubError(f"the MCP server '{server}' did not answer in time") from None

    # -- on the hub's thread ------------------------------------------------------------------

    async def _each(self, names: list[str] | None, fetch: Any) -> list[Any]:
        """`fetch(client, server name)` for every running server of `names` (started first);
        a server whose listing fails adds nothing (its calls say what is wrong)."""
        if names is None:
            names = [n for n, s in self._servers.items() if s.config.enabled]
        started = await asyncio.gather(*(self._ensure_started(n) for n in names))
        out: list[Any] = []
        for name, server in zip(names, started, strict=True):
            if server is None or server.client is None or server.state != "running":
                continue
            try:
                out.extend(await self._timed(server, fetch(server.client, name)))
            except (MCPError, TimeoutError, pydantic.ValidationError, RuntimeError) as e:
                log.info("listing the MCP server %r failed: %s", name, e)
        return out

    async def _with_client(self, name: str, request: Any, *args: Any) -> Any:
        """`request(client, server name, *args)` on the running server `name`, in its time
        limit; every failure is `HubError` with a sentence."""
        server = await self._ensure_started(name)
        if server is None:
            raise HubError(f"there is no enabled MCP server '{name}'")
        if server.client is None or server.state != "running":
            raise HubError(server.error or f"the MCP server '{name}' is not running")
        try:
            return await self._timed(server, request(server.client, name, *args))
        except TimeoutError:
            raise HubError(
                f"the MCP server '{name}' did not answer within {self.call_timeout:g} s"
            ) from None
        except MCPError as e:
            raise HubError(f"the MCP server '{name}' refused the request: {e.message}") from None
        except (pydantic.ValidationError, RuntimeError) as e:
            raise HubError(
                f"the MCP server '{name}' sent an answer Hearth cannot read: {e}"
            ) from None
