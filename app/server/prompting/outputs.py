"""Turning generated text into what the APIs return: content, thinking and tool calls.

How a model writes its calls and thinking is its `ToolCallFormat` and `ThinkingMarkers`
(`toolformats.py`, found from its chat template and tokens). `OutputParser` splits a stream
incrementally: text that cannot be a tool call streams through at once, and from a call's
opener on the text is held until the end and parsed; only calls to tools the request offered
are accepted, and held text that is no call comes back as content (never dropped). A call
written as a fenced JSON block (`fenced.py`) counts too, in every format, when its arguments
validate against the tool's schema.

A turn with tools ends once it has said all it can (`OutputParser.turn_over`): after its
first whole call when the request allows one call only, and as soon as a whole call repeats
one made earlier in the turn (a model that goes on writing the same call, greedy, would
otherwise run to the token limit). The route then stops the generation (`pieces`).
"""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from typing import Any

from .fenced import FENCE, scan_fence
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
    `tools`: the names of the offered tools (empty: no tool parsing), or a mapping of each name
    to its parameters schema (what a fenced call's arguments must validate against; a name
    alone takes any object). `format`: how the model writes calls (the default, `GENERIC`,
    takes any JSON call at the start of the reply). `one_call`: the request allows one call
    (the turn is over after it). `thinking_started`: the prompt ended with the opening marker,
    so the reply begins inside the thinking. `hide_thinking`: the thinking is split off and
    dropped (`think: false` on a model whose template cannot switch it off).

    Content before a call streams at once; from an opener of `format` on, the text is held
    and parsed by `finish()`, which returns what was no call as content. A fenced block is
    held only while it may still be a call."""

    think: bool = False
    tools: Collection[str] | Mapping[str, Any] = field(default_factory=set)
    format: ToolCallFormat = GENERIC
    markers: ThinkingMarkers = THINK_TAGS
    thinking_started: bool = False
    hide_thinking: bool = False
    one_call: bool = False
    _pending: str = ""
    _state: str = "start"  # start -> (thinking ->) body -> holding once a call begins
    _held: str = ""
    _at_start: bool = True  # no content yet: `format.at_start` openers still count
    _schemas: dict[str, Any] = field(default_factory=dict)
    _fence: str | None = None  # a fenced block that may still be a call (from its fence on)
    _fence_calls: tuple[ParsedCall, ...] = ()  # its value, whole calls; the fence not closed
    _fenced: list[ParsedCall] = field(default_factory=list)  # fenced calls, in order
    _checked: int = 0  # the held text's length when `_check_turn` last parsed it
    _ended: tuple[str, list[ParsedCall]] | None = None  # the turn is over: its content, calls

    def __post_init__(self) -> None:
        if isinstance(self.tools, Mapping):
            self._schemas = dict(self.tools)
        self.tools = set(self.tools)

    @property
    def turn_over(self) -> bool:
        """The turn has said all it can: with `one_call`, a whole call was written; else a
        whole call repeated an earlier one of the turn. The generation should stop; `finish()`
        gives the calls up to that point (the repeat left out)."""
        return self._ended is not None

    def feed(self, text: str) -> tuple[str, str]:
        """Returns (thinking, content) ready to emit now."""
        if self._ended is not None:
            return "", ""
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
        self._check_turn(text)
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
        if self._fence is not None:
            self._fence, self._pending = self._fence + text, ""
            released = self._settle_fence(final=False)
            return "" if released is None else released + self._body()
        if self._at_start:
            head = text.lstrip()
            openers = fmt.at_start + fmt.anywhere
            if not head:
                return ""  # only whitespace so far: wait
            if head.startswith(FENCE):
                self._fence, self._pending = "", text
                return self._body()
            if any(head.startswith(o) for o in openers):
                self._hold(text)
                return ""
            if any(o.startswith(head) for o in (*openers, FENCE)):
                return ""  # could still become an opener
            self._at_start = False
        found = [i for i in (text.find(o) for o in (*fmt.anywhere, FENCE)) if i >= 0]
        if found:
            cut = min(found)
            if text.startswith(FENCE, cut):
                self._fence, self._pending = "", text[cut:]
                return text[:cut] + self._body()
            self._hold(text[cut:])
            return text[:cut]
        keep = max(_partial_suffix(text, o) for o in (*fmt.anywhere, FENCE))
        self._pending = text[len(text) - keep :]
        return text[: len(text) - keep]

    def _settle_fence(self, final: bool) -> str | None:
        """Decide the fenced block held so far: None while it may still be a call; else the
        content to emit (all of the block when it is no call, nothing when it is one, whose
        call is kept and the text after whose closing fence goes back to `_pending`)."""
        block = self._fence or ""
        body = block.lstrip()  # at the reply's start the fence may follow blank space
        scan = scan_fence(body, self.tools, self._schemas, final)
        self._fence_calls = scan.calls if scan.kind == "wait" else ()
        if scan.kind == "wait":
            return None
        self._fence, self._at_start = None, False
        if scan.kind == "text":
            return block
        self._fenced.extend(scan.calls)
        self._pending = body[scan.used :] + self._pending
        return ""

    def _check_turn(self, piece: str) -> None:
        """Whether the turn is over (see `turn_over`), once a piece may have closed a call.
        The held text is parsed again when such a piece arrives (past 4096 characters only
        each time it has doubled, so a long text costs linear time)."""
        if not self.tools or self._ended is not None:
            return
        calls = [*self._fenced, *self._fence_calls]
        rest, parsed = "", False
        n = len(self._held)
        closed = self._state == "holding" and any(c in piece for c in "}>]")
        if closed and (n <= 4096 or n >= 2 * self._checked):
            self._checked = n
            try:
                found, rest = self.format.parse(self._held, self.tools)
            except (ValueError, TypeError, RecursionError):
                found, rest = [], ""
            # an unclosed object around them: the calls may be values inside it
            parsed = "{" not in rest
            calls += found if parsed else []
        kept = _until_repeat(calls, self.one_call)
        if (self.one_call and calls) or len(kept) < len(calls):
            content = rest if parsed and re.sub(r"[\s\[\],;`]|json", "", rest) else ""
            self._ended = (content, kept)

    def partial_calls(self) -> list[PartialCall]:
        """The calls begun so far, each with its arguments' JSON text so far (see
        `toolformats.partial_calls`): for routes that stream arguments as they are written
        (a call's text only grows). `finish()` gives the calls that count: one that does not
        parse after all comes back there as content. A call whose text so far begins an
        earlier call's (the same tool) may still repeat it: it and those after it are given
        once they differ (a repeat ends the turn and never counts)."""
        if self._state != "holding" or not self.tools:
            return []
        out: list[PartialCall] = []
        for call in partial_calls(self.format, self._held, self.tools):
            text = re.sub(r"\s+", "", call.arguments)
            if any(
                e.name == call.name and re.sub(r"\s+", "", e.arguments).startswith(text)
                for e in out
            ):
                break
            out.append(call)
        return out

    def finish(self) -> tuple[str, str, list[ParsedCall]]:
        """Flush: (thinking, content, tool calls)."""
        if self._ended is not None:
            content, calls = self._ended
            return "", content, calls
        if self._state == "thinking":
            thinking, self._pending = self._pending, ""
            return ("" if self.hide_thinking else thinking), "", []
        content = ""
        if self._fence is not None:
            content = self._settle_fence(final=True) or ""
        calls = list(self._fenced)
        if self._state == "holding":
            held, self._held = self._held, ""
            try:
                found, rest = self.format.parse(held, self.tools)
            except (ValueError, TypeError, RecursionError):
                found, rest = [], held  # never an error: the text comes back
            calls += found
            content += rest
        else:
            content, self._pending = content + self._pending, ""
        return "", content, _until_repeat(calls, self.one_call)


def _until_repeat(calls: list[ParsedCall], one_call: bool) -> list[ParsedCall]:
    """The calls before the first that repeats an earlier one (the same tool and arguments);
    only the first with `one_call`."""
    out: list[ParsedCall] = []
    for call in calls:
        if call in out:
            break
        out.append(call)
    return out[:1] if one_call else out


def _partial_suffix(text: str, tag: str) -> int:
    """Length of the longest end of `text` that is a beginning of `tag`."""
    for n in range(min(len(tag) - 1, len(text)), 0, -1):
        if text.endswith(tag[:n]):
            return n
    return 0
