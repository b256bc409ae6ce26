"""Turning generated text into what the APIs return: content, thinking and tool calls.

How a model writes its calls and thinking is its `ToolCallFormat` and `ThinkingMarkers`
(`toolformats.py`, found from its chat template and tokens). `OutputParser` splits a stream
incrementally: text that cannot be a tool call streams through at once, and from a call's
opener on the text is held until the end and parsed; only calls to tools the request offered
are accepted, and held text that is no call comes back as content (never dropped).
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass, field

from .toolformats import (
    GENERIC,
    THINK_TAGS,
    ParsedCall,
    PartialCall,
    ThinkingMarkers,
    ToolCallFormat,
    partial_calls,
)

__all__ = ["OutputParser", "ParsedCall", "PartialCall", "parse_tool_calls"]


def parse_tool_calls(
    text: str, names: Collection[str], format: ToolCallFormat = GENERIC
) -> list[ParsedCall]:
    """Tool calls found in `text` (empty when it holds none)."""
    return format.parse(text, names)[0]


@dataclass
class OutputParser:
    """Feed generated text pieces; get (thinking, content) pieces back, tool calls at the end.

    `think`: split the thinking at the start of the reply (between `markers`) from its content.
    `tools`: the names of the offered tools (empty: no tool parsing). `format`: how the model
    writes calls (the default, `GENERIC`, takes any JSON call at the start of the reply).
    `thinking_started`: the prompt ended with the opening marker, so the reply begins inside
    the thinking. `hide_thinking`: the thinking is split off and dropped (`think: false` on a
    model whose template cannot switch it off).

    Content before a call streams at once; from an opener of `format` on, the text is held
    and parsed by `finish()`, which returns what was no call as content."""

    think: bool = False
    tools: set[str] = field(default_factory=set)
    format: ToolCallFormat = GENERIC
    markers: ThinkingMarkers = THINK_TAGS
    thinking_started: bool = False
    hide_thinking: bool = False
    _pending: str = ""
    _state: str = "start"  # start -> (thinking ->) body -> holding once a call begins
    _held: str = ""
    _at_start: bool = True  # no content yet: `format.at_start` openers still count

    def feed(self, text: str) -> tuple[str, str]:
        """Returns (thinking, content) ready to emit now."""
        self._pending += text
        thinking = content = ""
        opener, closer = self.markers.open, self.markers.close
        if self._state == "start":
            head = self._pending.lstrip()
            if self.think and self.thinking_started:
                self._state = "thinking"
            elif self.think and head.startswith(opener):
                self._state, self._pending = "thinking", head[len(opener) :]
            elif self.think and opener.startswith(head):
                return "", ""  # could still become the opening marker
            else:
                self._state = "body"
        if self._state == "thinking":
            end = self._pending.find(closer)
            if end < 0:
                keep = _partial_suffix(self._pending, closer)
                thinking = self._pending[: len(self._pending) - keep]
                self._pending = self._pending[len(self._pending) - keep :]
                return ("" if self.hide_thinking else thinking), ""
            thinking = self._pending[:end]
            self._pending = self._pending[end + len(closer) :].lstrip()
            self._state = "body"
        if self._state == "body":
            content = self._body()
        elif self._state == "holding":
            self._held += self._pending
            self._pending = ""
        return ("" if self.hide_thinking else thinking), content

    def _hold(self, text: str) -> None:
        self._state, self._held, self._pending = "holding", text, ""

    def _body(self) -> str:
        """The content of `_pending` that can go out now; the rest stays pending or held."""
        text = self._pending
        fmt = self.format
        if not self.tools:
            self._pending = ""
            return text
        if self._at_start:
            head = text.lstrip()
            openers = fmt.at_start + fmt.anywhere
            if not head:
                return ""  # only whitespace so far: wait
            if any(head.startswith(o) for o in openers):
                self._hold(text)
                return ""
            if any(o.startswith(head) for o in openers):
                return ""  # could still become an opener
            self._at_start = False
        found = [i for i in (text.find(o) for o in fmt.anywhere) if i >= 0]
        if found:
            cut = min(found)
            self._hold(text[cut:])
            return text[:cut]
        keep = max((_partial_suffix(text, o) for o in fmt.anywhere), default=0)
        self._pending = text[len(text) - keep :]
        return text[: len(text) - keep]

    def partial_calls(self) -> list[PartialCall]:
        """The calls begun so far, each with its arguments' JSON text so far (see
        `toolformats.partial_calls`): for routes that stream arguments as they are written
        (a call's text only grows). `finish()` gives the calls that count: one that does not
        parse after all comes back there as content."""
        if self._state != "holding" or not self.tools:
            return []
        return partial_calls(self.format, self._held, self.tools)

    def finish(self) -> tuple[str, str, list[ParsedCall]]:
        """Flush: (thinking, content, tool calls)."""
        if self._state == "thinking":
            thinking, self._pending = self._pending, ""
            return ("" if self.hide_thinking else thinking), "", []
        if self._state == "holding":
            held, self._held = self._held, ""
            try:
                calls, rest = self.format.parse(held, self.tools)
            except (ValueError, TypeError, RecursionError):
                calls, rest = [], held  # never an error: the text comes back
            return "", rest, calls
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
