"""Tool calls written as a fenced JSON block instead of the template's format.

Some models answer with a Markdown block where their template shows tags::

    ```json
    {"name": "get_weather", "arguments": {"city": "Lisbon"}}
    ```

Such a block is a call when its one JSON object names an offered tool (in one of
`toolformats.as_call`'s shapes) and its arguments validate against that tool's JSON schema
(`jsonschema`, the schema's own draft, 2020-12 when it names none); a list of such objects is
as many calls. Anything else stays text: a block in another language, one that is no object,
an object naming no offered tool, or arguments the schema refuses. `scan_fence` reads a
block as it streams, so a block that cannot be a call is let go as soon as that is certain
(the first character after the fence's language, at the latest the block's end) and a call
is known as soon as its value is whole.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from jsonschema import SchemaError
from jsonschema.validators import validator_for

from .toolformats import ParsedCall, as_call, json_at

__all__ = ["FENCE", "FenceScan", "scan_fence", "tool_schemas", "valid_arguments"]

FENCE = "```"
_HEAD = re.compile(r"```[ \t]*([A-Za-z]*)[ \t]*\r?\n?[ \t\r\n]*")
_MAX_HEAD = 32  # a fence's language and the blank space after it are short
_CLOSING_LINE = re.compile(r"\n[ \t]*```")  # a raw newline never appears inside a JSON string


def tool_schemas(tools: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """Each offered tool's parameters schema by name, from function tools
    (`{"type": "function", "function": {"name", "parameters"}}`, the templates' shape); a tool
    without one maps to None (any object)."""
    out: dict[str, Any] = {}
    for tool in tools:
        fn = tool.get("function") or {}
        if isinstance(fn, Mapping) and isinstance(fn.get("name"), str):
            out[fn["name"]] = fn.get("parameters")
    return out


def valid_arguments(arguments: dict[str, Any], schema: Any) -> bool:
    """Whether `arguments` validate against `schema`; a tool without a schema (or with one
    that is itself no valid schema: the tool's own problem) takes any object."""
    if not isinstance(schema, Mapping) or not schema:
        return True
    try:
        cls = validator_for(schema)
        cls.check_schema(schema)
    except SchemaError:
        return True
    return bool(cls(schema).is_valid(arguments))


@dataclass(frozen=True)
class FenceScan:
    """What a block (from its opening fence on) is so far: `wait` (undecided; `calls` are set
    once its value is whole calls and only the closing fence is missing), `text` (no call:
    all of it is content) or `call` (`calls`; `used` characters, through the closing fence,
    are the block)."""

    kind: Literal["wait", "text", "call"]
    calls: tuple[ParsedCall, ...] = ()
    used: int = 0


_WAIT = FenceScan("wait")
_TEXT = FenceScan("text")


def scan_fence(
    text: str, names: Collection[str], schemas: Mapping[str, Any], final: bool = False
) -> FenceScan:
    """Read `text`, which starts with FENCE, as a possible fenced call to one of `names`
    (arguments checked against `schemas`); `final`: no more text comes."""
    head = _HEAD.match(text)
    if head is None:
        return _TEXT
    start = head.end()
    if start == len(text):  # the language or the space after it may go on
        return _TEXT if final or len(text) > _MAX_HEAD else _WAIT
    if head.group(1).lower() not in ("", "json") or text[start] not in "{[":
        return _TEXT
    found = json_at(text, start)
    if found is None:  # not whole yet; once the block has closed it never will be
        return _TEXT if final or _CLOSING_LINE.search(text, start) else _WAIT
    value, end = found
    items = value if isinstance(value, list) else [value]
    calls = tuple(c for c in (as_call(item, names) for item in items) if c is not None)
    if not calls or len(calls) < len(items):
        return _TEXT
    if not all(valid_arguments(c.arguments, schemas.get(c.name)) for c in calls):
        return _TEXT
    tail = text[end:].lstrip()
    if tail.startswith(FENCE):
        return FenceScan("call", calls, len(text) - len(tail) + len(FENCE))
    if FENCE.startswith(tail):  # nothing or part of the closing fence so far
        return FenceScan("call", calls, len(text)) if final else FenceScan("wait", calls)
    return _TEXT  # more than the calls inside the block
