"""Turning generated text into what the APIs return: content, thinking and tool calls.

Models write tool calls as JSON in their text (bare, in a ```json fence, inside
`<tool_call>...</tool_call>`, after `[TOOL_CALLS]` or `<|python_tag|>`), and reasoning models
wrap their thinking in `<think>...</think>`. `OutputParser` splits a stream incrementally:
text that cannot be a tool call streams through at once, and text that might be one is held
until the end and parsed; only calls to tools the request offered are accepted.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

__all__ = ["OutputParser", "ParsedCall", "parse_tool_calls"]

_OPENERS = ("<tool_call>", "```", "[TOOL_CALLS]", "<|python_tag|>", "{", "[")
_THINK_OPEN, _THINK_CLOSE = "<think>", "</think>"


@dataclass(frozen=True)
class ParsedCall:
    name: str
    arguments: dict[str, Any]


def _candidates(text: str) -> list[Any]:
    """Every JSON value that starts at a '{' or '[' in `text` (not nested in another)."""
    decoder = json.JSONDecoder()
    out, i = [], 0
    while i < len(text):
        if text[i] in "{[":
            try:
                value, end = decoder.raw_decode(text, i)
            except ValueError:
                i += 1
                continue
            out.append(value)
            i = end
        else:
            i += 1
    return out


def _as_call(value: Any, names: set[str]) -> ParsedCall | None:
    if not isinstance(value, dict):
        return None
    if isinstance(value.get("function"), dict):
        value = value["function"]
    name = value.get("name")
    args = value.get("arguments", value.get("parameters", {}))
    if isinstance(args, str):
        try:
            args = json.loads(args)
        except ValueError:
            return None
    if not isinstance(name, str) or name not in names or not isinstance(args, dict):
        return None
    return ParsedCall(name, args)


def parse_tool_calls(text: str, names: set[str]) -> list[ParsedCall]:
    """Tool calls found in `text` (empty when it holds none)."""
    calls: list[ParsedCall] = []
    for value in _candidates(text):
        items = value if isinstance(value, list) else [value]
        for item in items:
            call = _as_call(item, names)
            if call is not None:
                calls.append(call)
    return calls


@dataclass
class OutputParser:
    """Feed generated text pieces; get (thinking, content) pieces back, tool calls at the end.

    `think`: split `<think>...</think>` at the start into thinking. `tools`: the names of the
    offered tools (empty: no tool parsing)."""

    think: bool = False
    tools: set[str] = field(default_factory=set)
    _pending: str = ""
    _state: str = "start"  # start -> (thinking ->) body; body -> holding when a call may begin
    _held: str = ""

    def feed(self, text: str) -> tuple[str, str]:
        """Returns (thinking, content) ready to emit now."""
        self._pending += text
        thinking = content = ""
        if self._state == "start":
            head = self._pending.lstrip()
            if self.think and head.startswith(_THINK_OPEN):
                self._state, self._pending = "thinking", head[len(_THINK_OPEN) :]
            elif self.think and _THINK_OPEN.startswith(head):
                return "", ""  # could still become <think>
            else:
                self._state = "body"
        if self._state == "thinking":
            end = self._pending.find(_THINK_CLOSE)
            if end < 0:
                keep = _partial_suffix(self._pending, _THINK_CLOSE)
                thinking = self._pending[: len(self._pending) - keep]
                self._pending = self._pending[len(self._pending) - keep :]
                return thinking, ""
            thinking = self._pending[:end]
            self._pending = self._pending[end + len(_THINK_CLOSE) :].lstrip()
            self._state = "body"
        if self._state == "body":
            content, self._pending = self._body(self._pending)
        elif self._state == "passing":
            content, self._pending = self._pending, ""
        elif self._state == "holding":
            self._held += self._pending
            self._pending = ""
        return thinking, content

    def _body(self, text: str) -> tuple[str, str]:
        if not self.tools:
            return text, ""
        head = text.lstrip()
        if not head:
            return "", text  # only whitespace so far: wait
        if any(head.startswith(o) for o in _OPENERS):
            self._state, self._held = "holding", text
            return "", ""
        if any(o.startswith(head) for o in _OPENERS):
            return "", text  # could still become an opener
        self._state = "passing"
        return text, ""

    def finish(self) -> tuple[str, str, list[ParsedCall]]:
        """Flush: (thinking, content, tool calls)."""
        if self._state == "thinking":
            thinking, self._pending = self._pending, ""
            return thinking, "", []
        if self._state == "holding":
            calls = parse_tool_calls(self._held, self.tools)
            held, self._held = self._held, ""
            return "", ("" if calls else held), calls
        rest, self._pending = self._pending, ""
        return "", rest, []

    def __post_init__(self) -> None:
        self.tools = set(self.tools)


def _partial_suffix(text: str, tag: str) -> int:
    """Length of the longest end of `text` that is a beginning of `tag`."""
    for n in range(min(len(tag) - 1, len(text)), 0, -1):
        if text.endswith(tag[:n]):
            return n
    return 0
