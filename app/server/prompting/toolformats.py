"""How a model writes tool calls and thinking, found from its chat template and vocabulary.

A template that renders `tools` also shows the model how its calls look (it renders earlier
calls the same way), so the format is read from the template's text and the model's special
tokens, never from the model's name:

* `hermes`: `<tool_call>{"name": ..., "arguments": ...}</tool_call>`, one block per call
  (Qwen 2.5/3, Hermes 2/3, and the templates that copied them);
* `qwen_xml`: `<tool_call><function=name><parameter=key>value</parameter>...</function>
  </tool_call>` (Qwen3-Coder); a value that is JSON is taken as JSON, else as text;
* `llama3`: `{"name": ..., "parameters": ...}` (or `"arguments"`), bare or after
  `<|python_tag|>`, several separated by `;` (Llama 3.1/3.2/3.3: the `ipython` role);
* `mistral`: `[TOOL_CALLS][{"name": ..., "arguments": ...}, ...]` (v3, Nemo) or
  `[TOOL_CALLS]name[CALL_ID]id[ARGS]{...}` / `[TOOL_CALLS]name[ARGS]{...}` per call (v11+);
* `phi4`: `<|tool_call|>[{"name": ..., "arguments": ...}, ...]<|/tool_call|>` (Phi-4 mini;
  a block may also hold one object, as llama.cpp's own Phi-4 mini template renders calls);
* `deepseek`: `<｜tool▁call▁begin｜>function<｜tool▁sep｜>name` + a ```json fence
  (R1) or `name<｜tool▁sep｜>{...}` (V3.1), each closed by `<｜tool▁call▁end｜>`;
* `generic`: a template that renders tools in no known way: any JSON call at the start of
  the reply (bare, fenced, in the markers above);
* `none`: the template renders no tools (the service refuses tools for such a model).

Each format says which text opens a call (`anywhere`: after text too; `at_start`: only as
the reply's first text) and parses the held text into calls plus whatever was no call.
Thinking markers (`<think>`/`</think>`, Mistral's `[THINK]`/`[/THINK]`) come from the same
sources (`ThinkingMarkers`).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Collection
from dataclasses import dataclass
from typing import Any

__all__ = [
    "ParsedCall",
    "PartialCall",
    "ThinkingMarkers",
    "ToolCallFormat",
    "FORMATS",
    "as_call",
    "json_at",
    "GENERIC",
    "NO_TOOLS",
    "THINK_TAGS",
    "detect_thinking_markers",
    "detect_tool_format",
    "marker_tokens",
    "partial_calls",
]


@dataclass(frozen=True)
class ParsedCall:
    name: str
    arguments: dict[str, Any]


# (calls, text that was no call): what a format makes of the text held from its opener on
Parse = Callable[[str, Collection[str]], tuple[list[ParsedCall], str]]


@dataclass(frozen=True)
class ToolCallFormat:
    """One family's way of writing tool calls (see the module docstring)."""

    name: str
    anywhere: tuple[str, ...]  # openers that start a call wherever they appear
    at_start: tuple[str, ...]  # openers that start a call only as the reply's first text
    parse: Parse
    # where a call's arguments begin: the group "name" is the tool, the match's end the start
    # of its arguments object (see `partial_calls`)
    heads: tuple[re.Pattern[str], ...] = ()


@dataclass(frozen=True)
class PartialCall:
    """A call being written: its tool and its arguments' JSON text so far."""

    name: str
    arguments: str


def partial_calls(fmt: ToolCallFormat, held: str, names: Collection[str]) -> list[PartialCall]:
    """The calls begun in `held` (the text from the format's opener on), in order, each with
    the text of its arguments object so far: whole once it parses, else all that follows its
    head up to the next call's. While `held` grows, each call's text only grows (a later value
    starts with the earlier one), so the growth can be streamed as argument deltas; the calls
    `parse` returns at the end are the ones that count."""
    heads = sorted(
        (m for pattern in fmt.heads for m in pattern.finditer(held)), key=lambda m: m.start()
    )
    out: list[PartialCall] = []
    for k, m in enumerate(heads):
        name = m.group("name").strip()
        if name not in names or held[m.end() : m.end() + 1] not in ("{", ""):
            continue
        stop = heads[k + 1].start() if k + 1 < len(heads) else len(held)
        found = json_at(held, m.end())
        end = found[1] if found is not None and found[1] <= stop else stop
        out.append(PartialCall(name, held[m.end() : end]))
    return out


@dataclass(frozen=True)
class ThinkingMarkers:
    open: str
    close: str


THINK_TAGS = ThinkingMarkers("<think>", "</think>")
MISTRAL_THINK = ThinkingMarkers("[THINK]", "[/THINK]")

_DECODER = json.JSONDecoder()


def json_at(text: str, i: int) -> tuple[Any, int] | None:
    try:
        return _DECODER.raw_decode(text, i)
    except (ValueError, RecursionError):  # RecursionError: nested thousands deep
        return None


def as_call(value: Any, names: Collection[str]) -> ParsedCall | None:
    """`value` as a call to an offered tool: {"name", "arguments"|"parameters"}, or OpenAI's
    {"function": {...}}, arguments as an object or a JSON string of one."""
    if not isinstance(value, dict):
        return None
    if isinstance(value.get("function"), dict):
        value = value["function"]
    name = value.get("name")
    args = value.get("arguments", value.get("parameters", {}))
    if isinstance(args, str):
        try:
            args = json.loads(args) if args.strip() else {}
        except ValueError:
            return None
    if not isinstance(name, str) or name not in names or not isinstance(args, dict):
        return None
    return ParsedCall(name, args)


def _json_calls(text: str, names: Collection[str]) -> tuple[list[ParsedCall], str]:
    """Every JSON value in `text` that is a call (or a list of calls); the rest is text. A
    value that is not wholly calls stays text."""
    calls: list[ParsedCall] = []
    rest: list[str] = []
    i = last = 0
    while i < len(text):
        if text[i] not in "{[":
            i += 1
            continue
        found = json_at(text, i)
        if found is None:
            i += 1
            continue
        value, end = found
        items = value if isinstance(value, list) else [value]
        parsed = [as_call(item, names) for item in items]
        if items and all(p is not None for p in parsed):
            rest.append(text[last:i])
            calls.extend(p for p in parsed if p is not None)
            last = end
        i = end
    rest.append(text[last:])
    return calls, _leftover(calls, rest)


def _leftover(calls: list[ParsedCall], pieces: list[str]) -> str:
    """The text around the calls; with calls found, separators (whitespace, `;`, fences and
    the markers' remains) are no content."""
    text = "".join(pieces)
    if not calls:
        return text
    return "" if not re.sub(r"[\s;,`]|json", "", text) else text.strip()


def _generic(text: str, names: Collection[str]) -> tuple[list[ParsedCall], str]:
    stripped = text
    for marker in ("<tool_call>", "</tool_call>", "[TOOL_CALLS]", "<|python_tag|>",
                   "<|tool_call|>", "<|/tool_call|>"):  # fmt: skip
        stripped = stripped.replace(marker, " ")
    calls, rest = _json_calls(stripped, names)
    return (calls, rest) if calls else ([], text)


_HERMES_BLOCK = re.compile(r"<tool_call>(.*?)(?:</tool_call>|$)", re.S)


def _marked_blocks(
    block: re.Pattern[str], text: str, names: Collection[str]
) -> tuple[list[ParsedCall], str]:
    """The calls in `block`'s matches, each holding one call or a list of calls; a block
    that is not wholly calls stays text."""
    calls: list[ParsedCall] = []
    rest: list[str] = []
    last = 0
    for m in block.finditer(text):
        inner = m.group(1).strip()
        found = json_at(inner, 0)
        if found is None or inner[found[1] :].strip():
            continue  # no call: the block stays text
        items = found[0] if isinstance(found[0], list) else [found[0]]
        parsed = [as_call(item, names) for item in items]
        if not items or any(p is None for p in parsed):
            continue
        rest.append(text[last : m.start()])
        calls.extend(p for p in parsed if p is not None)
        last = m.end()
    rest.append(text[last:])
    return calls, _leftover(calls, rest)


def _hermes(text: str, names: Collection[str]) -> tuple[list[ParsedCall], str]:
    if "<tool_call>" not in text:  # bare JSON at the start (Qwen sometimes drops the tags)
        return _generic(text, names)
    return _marked_blocks(_HERMES_BLOCK, text, names)


_PHI4_BLOCK = re.compile(r"<\|tool_call\|>(.*?)(?:<\|/tool_call\|>|$)", re.S)


def _phi4(text: str, names: Collection[str]) -> tuple[list[ParsedCall], str]:
    return _marked_blocks(_PHI4_BLOCK, text, names)


def _llama3(text: str, names: Collection[str]) -> tuple[list[ParsedCall], str]:
    body = text.replace("<|python_tag|>", " ")
    calls, rest = _json_calls(body, names)
    return (calls, rest) if calls else ([], text)


_MISTRAL_CALL = re.compile(r"\s*([\w.\-]+)(?:\[CALL_ID\]\s*[A-Za-z0-9]+)?\s*\[ARGS\]\s*", re.S)


def _mistral(text: str, names: Collection[str]) -> tuple[list[ParsedCall], str]:
    calls: list[ParsedCall] = []
    rest: list[str] = []
    parts = text.split("[TOOL_CALLS]")
    rest.append(parts[0])
    for part in parts[1:]:
        i = 0
        while i < len(part):
            m = _MISTRAL_CALL.match(part, i)
            if m is not None:  # v11+: name[ARGS]{...}
                found = json_at(part, m.end())
                if found is None or not isinstance(found[0], dict) or m.group(1) not in names:
                    break
                calls.append(ParsedCall(m.group(1), found[0]))
                i = found[1]
                continue
            j = len(part) - len(part[i:].lstrip())
            found = json_at(part, j) if part[j:j + 1] in ("[", "{") else None  # fmt: skip
            if found is None:
                break
            items = found[0] if isinstance(found[0], list) else [found[0]]
            parsed = [as_call(item, names) for item in items]
            if not items or any(p is None for p in parsed):
                break
            calls.extend(p for p in parsed if p is not None)
            i = found[1]
        if part[i:].strip():
            rest.append(("[TOOL_CALLS]" if i == 0 else "") + part[i:])
    if not calls:
        return [], text
    return calls, _leftover(calls, rest)


_DEEPSEEK_CALL = re.compile(
    r"<｜tool▁call▁begin｜>(?:function<｜tool▁sep｜>([^\n]+)\n```(?:json)?\s*(.*?)\s*```"
    r"|([^<\n]+?)<｜tool▁sep｜>(.*?))\s*<｜tool▁call▁end｜>",
    re.S,
)


def _deepseek(text: str, names: Collection[str]) -> tuple[list[ParsedCall], str]:
    calls: list[ParsedCall] = []
    rest: list[str] = []
    last = 0
    for m in _DEEPSEEK_CALL.finditer(text):
        name = (m.group(1) or m.group(3) or "").strip()
        found = json_at((m.group(2) or m.group(4) or "").strip(), 0)
        if name not in names or found is None or not isinstance(found[0], dict):
            continue
        rest.append(text[last : m.start()])
        calls.append(ParsedCall(name, found[0]))
        last = m.end()
    rest.append(text[last:])
    if not calls:
        return [], text
    leftover = "".join(rest).replace("<｜tool▁calls▁begin｜>", "")
    leftover = leftover.replace("<｜tool▁calls▁end｜>", "")
    return calls, _leftover(calls, [leftover])


_XML_FUNCTION = re.compile(r"<function=([^>\n]+)>(.*?)</function>", re.S)
_XML_PARAMETER = re.compile(r"<parameter=([^>\n]+)>\n?(.*?)\n?</parameter>", re.S)


def _xml_value(text: str) -> Any:
    """A parameter's value: JSON when it is JSON (numbers, objects, true), else the text."""
    try:
        return json.loads(text)
    except ValueError:
        return text


def _qwen_xml(text: str, names: Collection[str]) -> tuple[list[ParsedCall], str]:
    calls: list[ParsedCall] = []
    rest: list[str] = []
    last = 0
    for m in _HERMES_BLOCK.finditer(text):
        f = _XML_FUNCTION.fullmatch(m.group(1).strip())
        if f is None or f.group(1).strip() not in names:
            continue
        params = list(_XML_PARAMETER.finditer(f.group(2)))
        if "".join(_XML_PARAMETER.sub("", f.group(2)).split()):
            continue  # text outside the parameters: no call
        args = {p.group(1).strip(): _xml_value(p.group(2)) for p in params}
        rest.append(text[last : m.start()])
        calls.append(ParsedCall(f.group(1).strip(), args))
        last = m.end()
    rest.append(text[last:])
    return calls, _leftover(calls, rest)


def _no_calls(text: str, names: Collection[str]) -> tuple[list[ParsedCall], str]:
    return [], text


_JSON_HEAD = re.compile(r'"name"\s*:\s*"(?P<name>[^"]+)"\s*,\s*"(?:arguments|parameters)"\s*:\s*')
_MISTRAL_HEAD = re.compile(
    r"\[TOOL_CALLS\]\s*(?P<name>[\w.\-]+)(?:\[CALL_ID\]\s*[A-Za-z0-9]*)?\s*\[ARGS\]\s*"
)
_DEEPSEEK_HEADS = (
    re.compile(r"<｜tool▁sep｜>(?P<name>[^\n<]+)\n```(?:json)?\s*"),
    re.compile(r"<｜tool▁call▁begin｜>(?P<name>(?!function<)[^<\n]+?)<｜tool▁sep｜>\s*"),
)

GENERIC = ToolCallFormat(
    "generic",
    (),
    ("<tool_call>", "```", "[TOOL_CALLS]", "<|python_tag|>", "{", "["),
    _generic,
    (_JSON_HEAD,),
)
NO_TOOLS = ToolCallFormat("none", (), (), _no_calls)
QWEN_XML = ToolCallFormat("qwen_xml", ("<tool_call>",), (), _qwen_xml)
HERMES = ToolCallFormat("hermes", ("<tool_call>",), ("{",), _hermes, (_JSON_HEAD,))
LLAMA3 = ToolCallFormat("llama3", ("<|python_tag|>",), ("{",), _llama3, (_JSON_HEAD,))
MISTRAL = ToolCallFormat(
    "mistral", ("[TOOL_CALLS]",), ("[{", "{"), _mistral, (_JSON_HEAD, _MISTRAL_HEAD)
)
PHI4 = ToolCallFormat("phi4", ("<|tool_call|>",), (), _phi4, (_JSON_HEAD,))
DEEPSEEK = ToolCallFormat(
    "deepseek", ("<｜tool▁calls▁begin｜>", "<｜tool▁call▁begin｜>"), (), _deepseek, _DEEPSEEK_HEADS
)
FORMATS = {
    f.name: f for f in (GENERIC, NO_TOOLS, HERMES, QWEN_XML, LLAMA3, MISTRAL, DEEPSEEK, PHI4)
}

# Markers whose presence as a token decides a format or must be rendered by the runner.
_MARKERS: tuple[tuple[str, ToolCallFormat], ...] = (
    ("<tool_call>", HERMES),
    ("[TOOL_CALLS]", MISTRAL),
    ("<｜tool▁call▁begin｜>", DEEPSEEK),
    ("<|python_tag|>", LLAMA3),
    ("<|tool_call|>", PHI4),
)
MARKER_TEXTS = frozenset(
    [m for m, _ in _MARKERS]
    + ["</tool_call>", "[ARGS]", "[CALL_ID]", "<｜tool▁calls▁begin｜>", "<｜tool▁sep｜>"]
    + ["<｜tool▁call▁end｜>", "<｜tool▁calls▁end｜>", "<think>", "</think>", "[THINK]"]
    + ["[/THINK]", "<|/tool_call|>"]
)
# gpt-oss's harmony (prompting/harmony.py), only in a vocabulary with its channels: `<|end|>`
# is also Phi-3's end of turn
HARMONY_MARKERS = ("<|start|>", "<|channel|>", "<|message|>", "<|end|>", "<|constrain|>")


def marker_tokens(tokens: Collection[str]) -> frozenset[str]:
    """The call and thinking markers among a vocabulary's tokens."""
    found = {t for t in MARKER_TEXTS if t in tokens}
    if "<|channel|>" in tokens:
        found.update(t for t in HARMONY_MARKERS if t in tokens)
    return frozenset(found)


def detect_tool_format(template: str | None, tokens: Collection[str] = ()) -> ToolCallFormat:
    """The format a model writes its calls in, from its chat template (which renders the
    offered `tools` and earlier calls) and its marker tokens (`marker_tokens`): a family's
    marker in the template decides; a template that never mentions `tools` gives `NO_TOOLS`;
    one that renders them with no known marker `GENERIC`, unless the vocabulary has a
    family's marker token. (Phi-4 mini's own template reads the tools from the system
    message, `message['tools']`, and names no call marker: its vocabulary's `<|tool_call|>`
    decides.)"""
    if not template:
        return NO_TOOLS
    if "<tool_call>" in template and "<function=" in template and "<parameter=" in template:
        return QWEN_XML
    for marker, fmt in _MARKERS:
        if marker in template:
            return fmt
    if "tools" not in template:
        return NO_TOOLS
    if "ipython" in template and "<|start_header_id|>" in template:
        return LLAMA3  # Llama 3.2's template names no python_tag: its calls are bare JSON
    for marker, fmt in _MARKERS:
        if marker in tokens:
            return fmt
    return GENERIC


def detect_thinking_markers(
    template: str | None, tokens: Collection[str] = ()
) -> ThinkingMarkers | None:
    """The markers around a model's reasoning, from its template or its vocabulary; None
    when it declares none."""
    for markers in (THINK_TAGS, MISTRAL_THINK):
        if template and markers.open in template and markers.close in template:
            return markers
    for markers in (THINK_TAGS, MISTRAL_THINK):
        if markers.open in tokens and markers.close in tokens:
            return markers
    return None
