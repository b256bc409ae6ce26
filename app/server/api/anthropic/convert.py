"""Translating between Anthropic's Messages shapes and the service's: the system text and
messages to chat messages (tool_use blocks to tool calls, tool_result blocks to tool
messages, image blocks to message images), tools and tool_choice to the tools offered and a
forcing format (OpenAI's conversion, `openai.convert.tool_choice`, does the work), sampling
fields to Ollama options, and a parsed reply to content blocks, stop reasons (with the stop
sequence that ended it) and usage."""

from __future__ import annotations

import secrets
from typing import Any

from ...prompting.outputs import ParsedCall
from ...request_types import ChatMessage, FunctionCall, Options, ToolCall, layered_options
from ..openai import convert as openai_convert
from ..shared.common import hearth_extras
from ..shared.errors import APIError
from .schemas import (
    MessageParam,
    MessagesRequest,
    PromptedRequest,
    TextBlock,
    ThinkingConfig,
    ToolChoice,
    ToolResultBlock,
)

__all__ = [
    "message_id",
    "messages",
    "options",
    "think",
    "tools",
    "stop",
    "tool_use_block",
    "tool_use_start",
    "usage",
]


def message_id() -> str:
    return "msg_" + secrets.token_hex(12)


def _tool_use_id() -> str:
    return "toolu_" + secrets.token_hex(12)


def _system(system: str | list[TextBlock] | None) -> list[ChatMessage]:
    if system is None:
        return []
    text = system if isinstance(system, str) else "\n".join(b.text for b in system)
    return [ChatMessage(role="system", content=text, images=None)] if text else []


def _tool_result(block: ToolResultBlock, names: dict[str, str]) -> ChatMessage:
    """A tool_result as a tool message answering the call it names; `is_error` prefixes
    "Error: " (templates have no other way to show it)."""
    if block.tool_use_id not in names:
        raise APIError(
            400,
            f"tool_result refers to tool_use_id '{block.tool_use_id[:80]}', which no earlier "
            "assistant tool_use block has",
        )
    parts = block.content if isinstance(block.content, list) else []
    text = block.content if isinstance(block.content, str) else ""
    text += "\n".join(p.text for p in parts if p.type == "text")
    images = [p.source.data or "" for p in parts if p.type == "image"]
    return ChatMessage(
        role="tool",
        content=("Error: " + text) if block.is_error else text,
        images=images or None,
        tool_name=names[block.tool_use_id],
        tool_call_id=block.tool_use_id,
    )


def _turn(m: MessageParam, names: dict[str, str]) -> list[ChatMessage]:
    """One Anthropic turn as chat messages: a user turn's tool results come first, as tool
    messages (as in OpenAI's shape), then its text and images, if any."""
    if isinstance(m.content, str):
        return [ChatMessage(role=m.role, content=m.content, images=None)]
    out: list[ChatMessage] = []
    text, images, thinking, calls = [], [], [], []
    for b in m.content:
        if b.type == "text":
            text.append(b.text)
        elif b.type == "image":
            images.append(b.source.data or "")
        elif b.type == "thinking":
            thinking.append(b.thinking)
        elif b.type == "tool_use":
            names[b.id] = b.name
            calls.append(ToolCall(id=b.id, function=FunctionCall(name=b.name, arguments=b.input)))
        elif b.type == "tool_result":
            out.append(_tool_result(b, names))
        # redacted_thinking: encrypted by Anthropic, nothing a local model can read
    if text or images or calls or thinking or not out:
        out.append(
            ChatMessage(
                role=m.role,
                content="\n".join(text),
                images=images or None,
                tool_calls=calls or None,
                thinking="\n".join(thinking) or None,
            )
        )
    return out


def messages(body: PromptedRequest) -> list[ChatMessage]:
    """The system text and the turns as chat messages (tool results name their tool)."""
    names: dict[str, str] = {}
    out = _system(body.system)
    for m in body.messages:
        out.extend(_turn(m, names))
    return out


_CHOICES: dict[str, str] = {"auto": "auto", "any": "required", "none": "none"}


def tools(body: PromptedRequest) -> tuple[list[dict[str, Any]], dict[str, Any] | None, bool]:
    """The tools offered (as function tools, the templates' shape), the output format that
    forces a call (tool_choice any or tool) and whether at most one call is wanted
    (`disable_parallel_tool_use`)."""
    offered = [
        {
            "type": "function",
            "function": {
                "name": t.name,
                **({"description": t.description} if t.description else {}),
                "parameters": t.input_schema,
            },
        }
        for t in body.tools or []
    ]
    choice: ToolChoice | None = body.tool_choice
    if choice is None:
        return offered, None, False
    given: str | dict[str, Any] = (
        {"type": "function", "function": {"name": choice.name}}
        if choice.type == "tool"
        else _CHOICES[choice.type]
    )
    offered, forced = openai_convert.tool_choice(given, offered)
    return offered, forced, bool(choice.disable_parallel_tool_use)


def think(thinking: ThinkingConfig | None) -> bool | None:
    """The model's thinking switch: on, off, or its default (None)."""
    if thinking is None or thinking.type == "adaptive":
        return None
    return thinking.type == "enabled"


def options(body: MessagesRequest) -> Options:
    """Anthropic's sampling fields over the body's Hearth `options` (request_types.
    layered_options; Anthropic's default temperature is 1)."""
    fields = {
        "num_predict": body.max_tokens,
        "temperature": body.temperature,
        "top_p": body.top_p,
        "top_k": body.top_k,
        "stop": body.stop_sequences or None,
    }
    return layered_options(body.options, fields, {"temperature": 1.0})


def stop(
    final: dict[str, Any], calls: list[ParsedCall], stop_sequences: list[str] | None
) -> dict[str, Any]:
    """`stop_reason` and `stop_sequence`: "stop_sequence" names the one of the request's
    `stop_sequences` the runner's final record says ended the output (a stop string of the
    model's own parameters ends it as "end_turn")."""
    matched = final.get("stop")
    if calls:
        reason = "tool_use"
    elif final.get("done_reason") == "length":
        reason = "max_tokens"
    elif matched is not None and matched in (stop_sequences or []):
        reason = "stop_sequence"
    else:
        reason = "end_turn"
    return {"stop_reason": reason, "stop_sequence": matched if reason == "stop_sequence" else None}


def tool_use_block(call: ParsedCall) -> dict[str, Any]:
    return {"type": "tool_use", "id": _tool_use_id(), "name": call.name, "input": call.arguments}


def tool_use_start(name: str) -> dict[str, Any]:
    """A streamed tool_use block as it starts (its input follows as `input_json_delta`s)."""
    return {"type": "tool_use", "id": _tool_use_id(), "name": name, "input": {}}


def usage(final: dict[str, Any]) -> dict[str, Any]:
    """Anthropic's meaning: `input_tokens` are the prompt tokens evaluated, those served from
    the prompt cache are `cache_read_input_tokens` (the whole prompt is their sum)."""
    extras = hearth_extras(final)
    return {
        "input_tokens": extras["prompt_tokens"] - extras["prompt_cached"],
        "output_tokens": int(final.get("eval_count", 0)),
        "cache_read_input_tokens": extras["prompt_cached"],
        "cache_creation_input_tokens": 0,
    }
