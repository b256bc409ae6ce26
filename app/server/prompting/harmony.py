"""OpenAI's harmony format (gpt-oss): a reply is a sequence of messages, each a header, then
`<|message|>`, the text, and `<|end|>` (more follows), `<|call|>` (a tool call: the turn ends)
or `<|return|>` (the turn's last message). The prompt ends with `<|start|>assistant`, so the
reply begins with the first message's header; later messages begin with
`<|start|>assistant`. A header names the channel and, for a call, the recipient:

    <|channel|>analysis<|message|>The user asks...<|end|>
    <|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json
        <|message|>{"city": "Paris"}<|call|>
    <|start|>assistant<|channel|>final<|message|>It is sunny.<|return|>

(the recipient may also follow the role: `<|start|>assistant to=functions.x<|channel|>...`).
`HarmonyParser` maps them onto the APIs' fields: `analysis` is thinking, `final` (and
`commentary` without a recipient: harmony's preambles, meant for the user) is content, and a
message to `functions.NAME` is a call to the offered tool NAME with its text as JSON
arguments. Thinking and content stream as they come; a call's text is held until its message
ends. Text that follows no harmony header (a model off the format) is content, and a call that
is not one (a tool not offered, arguments that are not a JSON object) comes back as content,
never dropped.
"""

from __future__ import annotations

import json
import re
from collections.abc import Collection
from dataclasses import dataclass

from .outputs import OutputParser, _partial_suffix
from .toolformats import ParsedCall, PartialCall

__all__ = ["HARMONY_TOKENS", "HarmonyParser", "is_harmony"]

HARMONY_TOKENS = ("<|start|>", "<|channel|>", "<|message|>", "<|end|>", "<|constrain|>")
_ENDS = ("<|end|>", "<|call|>", "<|return|>")
_HEADER_STARTS = ("<|start|>", "<|channel|>", " to=", "to=", "<|constrain|>")
_CHANNEL = re.compile(r"<\|channel\|>\s*([A-Za-z_]+)")
_RECIPIENT = re.compile(r"\bto=([^\s<]+)")


def is_harmony(template: str | None, tokens: Collection[str] = ()) -> bool:
    """Whether a model writes harmony: its template or its vocabulary has the channel and
    message markers."""
    markers = ("<|channel|>", "<|message|>")
    return all(m in (template or "") for m in markers) or all(m in tokens for m in markers)


@dataclass
class _Message:
    channel: str
    recipient: str  # "" for none
    text: str = ""

    @property
    def tool(self) -> str | None:
        """The offered tool this message calls (its recipient without `functions.`)."""
        if not self.recipient:
            return None
        return self.recipient.removeprefix("functions.")


@dataclass
class HarmonyParser(OutputParser):
    """`OutputParser`'s interface over harmony messages (see the module docstring): `feed`
    returns (thinking, content) to emit now, `partial_calls` the calls being written,
    `finish` the rest and the calls. `tools` are the offered tools' names; `hide_thinking`
    drops the analysis."""

    _header: str = ""
    _message: _Message | None = None
    _calls: list[_Message] | None = None

    def feed(self, text: str) -> tuple[str, str]:
        self._pending += text
        thinking: list[str] = []
        content: list[str] = []
        while self._pending:
            if self._message is None:
                if not self._read_header(content):
                    break
                continue
            end = min(((i, e) for e in _ENDS if (i := self._pending.find(e)) >= 0), default=None)
            if end is None:
                keep = max(_partial_suffix(self._pending, e) for e in (*_ENDS, "<|start|>"))
                self._emit(self._pending[: len(self._pending) - keep], thinking, content)
                self._pending = self._pending[len(self._pending) - keep :]
                break
            i, marker = end
            self._emit(self._pending[:i], thinking, content)
            self._pending = self._pending[i + len(marker) :]
            self._close_message()
        return ("" if self.hide_thinking else "".join(thinking)), "".join(content)

    def _read_header(self, content: list[str]) -> bool:
        """Move a whole header from `_pending` into a new message (True), or wait for more
        (False); text that is no header is content."""
        head = self._pending
        stripped = head.lstrip()
        if not stripped:
            return False
        if not any(stripped.startswith(s) or s.startswith(stripped) for s in _HEADER_STARTS):
            content.append(head)  # off the format: plain text
            self._pending = ""
            return False
        cut = head.find("<|message|>")
        if cut < 0:
            return False
        header = head[:cut]
        self._pending = head[cut + len("<|message|>") :]
        channel = _CHANNEL.search(header)
        recipient = _RECIPIENT.search(header)
        self._message = _Message(
            channel.group(1) if channel else "final", recipient.group(1) if recipient else ""
        )
        return True

    def _emit(self, text: str, thinking: list[str], content: list[str]) -> None:
        message = self._message
        assert message is not None
        if message.tool is not None:
            message.text += text  # a call: held until its message ends
        elif message.channel == "analysis":
            thinking.append(text)
        else:
            content.append(text)

    def _close_message(self) -> None:
        message, self._message = self._message, None
        if message is not None and message.tool is not None:
            self._calls = [*(self._calls or []), message]

    def partial_calls(self) -> list[PartialCall]:
        calls = [*(self._calls or []), *([self._message] if self._message else [])]
        return [
            PartialCall(m.tool, m.text.strip())
            for m in calls
            if m.tool is not None and m.tool in self.tools
        ]

    def finish(self) -> tuple[str, str, list[ParsedCall]]:
        thinking, content = "", ""
        if self._message is not None:  # the stream ended inside a message (a stop token)
            rest, self._pending = self._pending, ""
            parts_t: list[str] = []
            parts_c: list[str] = []
            self._emit(rest, parts_t, parts_c)
            thinking, content = "".join(parts_t), "".join(parts_c)
            self._close_message()
        elif self._pending.strip():
            content, self._pending = self._pending, ""  # a header that never finished
        calls: list[ParsedCall] = []
        for m in self._calls or []:
            call = _as_call(m, self.tools)
            if call is None:
                content += m.text
            else:
                calls.append(call)
        self._calls = None
        return ("" if self.hide_thinking else thinking), content, calls


def _as_call(message: _Message, tools: Collection[str]) -> ParsedCall | None:
    name = message.tool
    try:
        args = json.loads(message.text) if message.text.strip() else {}
    except ValueError:
        return None
    if name is None or name not in tools or not isinstance(args, dict):
        return None
    return ParsedCall(name, args)
