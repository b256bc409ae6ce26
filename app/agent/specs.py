"""What the agent's parts share, light to import (no MCP SDK): the tools a model is offered
(`ToolSpec`), what a call gives (`ToolResult`) and the loop's default limits."""

from __future__ import annotations

import base64
import re
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "DEFAULT_CALL_TIMEOUT",
    "DEFAULT_MAX_STEPS",
    "DEFAULT_RESULT_LIMIT",
    "DEFAULT_START_TIMEOUT",
    "ToolResult",
    "ToolSpec",
    "error_result",
    "names_clash",
    "qualified_name",
    "server_slug",
]

DEFAULT_MAX_STEPS = 10  # model turns with tool calls in one answer
DEFAULT_CALL_TIMEOUT = 60.0  # seconds one tool call may take
DEFAULT_START_TIMEOUT = 30.0  # seconds a server may take to start and list its tools
DEFAULT_RESULT_LIMIT = 32_000  # characters of one result's text the model gets


def server_slug(server: str) -> str:
    return re.sub(r"[^A-Za-z0-9_-]", "_", server) or "_"


def qualified_name(server: str, tool: str) -> str:
    """The name a model sees for `tool` of `server`: `<server>__<tool>`, the server's name
    with characters other than letters, digits, `_` and `-` replaced by `_`."""
    return f"{server_slug(server)}__{tool}"


def names_clash(server: str, other: str) -> bool:
    """Whether a tool of `server` and one of `other` could have the same `qualified_name`: one
    server's `<slug>__` starts the other's. Equal slugs ("a.b" and "a_b" both give `a_b__…`),
    or "a" and "a__b" (`a__b__c` could be "a"'s tool "b__c" or "a__b"'s "c"). Servers that do
    not clash never share a qualified name, so a name says one (server, tool) pair."""
    mine, theirs = server_slug(server) + "__", server_slug(other) + "__"
    return mine.startswith(theirs) or theirs.startswith(mine)


@dataclass(frozen=True)
class ToolSpec:
    """One tool a server offers. `input_schema` is its JSON Schema for the arguments."""

    server: str
    name: str
    description: str
    input_schema: dict[str, Any]

    @property
    def qualified_name(self) -> str:
        """Unique across the hub's servers; the name the model calls (`qualified_name()`)."""
        return qualified_name(self.server, self.name)

    def as_chat_tool(self) -> dict[str, Any]:
        """The tool as /api/chat's `tools` entries (Ollama's and OpenAI's function shape)."""
        return {
            "type": "function",
            "function": {
                "name": self.qualified_name,
                "description": self.description,
                "parameters": self.input_schema,
            },
        }


@dataclass
class ToolResult:
    """What one tool call gave: `text` for the model (notes and cuts said in it), `images`
    (raw bytes, PNG/JPEG/...), `structured` (the server's structuredContent, or None),
    `is_error` (the tool or Hearth reports a failure; `text` says it) and `truncated` (Hearth
    cut the text, dropped structured content or images for size)."""

    text: str
    images: list[bytes] = field(default_factory=list)
    structured: Any | None = None
    is_error: bool = False
    truncated: bool = False

    def images_base64(self) -> list[str]:
        """The images as base64 strings, as Ollama's /api/chat `images` field takes them."""
        return [base64.b64encode(b).decode("ascii") for b in self.images]


def error_result(sentence: str) -> ToolResult:
    """A failed call: the sentence is what the model and the user read."""
    return ToolResult(text=sentence, is_error=True)
