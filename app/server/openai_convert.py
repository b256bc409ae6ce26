"""Translating between OpenAI's request/response shapes and the service's: sampling fields
to Ollama options, messages (content parts, data-URL images, tool calls with JSON-string
arguments) to chat messages, and runner results to usage, finish reasons and logprobs."""

from __future__ import annotations

import json
import secrets
from typing import Any

from .errors import APIError
from .images import data_url_payload
from .ollama import hearth_extras
from .openai_schemas import OAMessage, ResponseFormat, SamplingFields
from .outputs import ParsedCall
from .schemas import ChatMessage, FunctionCall, Options, ToolCall

__all__ = [
    "options",
    "response_format",
    "message",
    "usage",
    "finish",
    "tool_calls",
    "legacy_logprobs",
]


def options(body: SamplingFields, max_tokens: int | None) -> Options:
    """OpenAI's sampling fields as Ollama options (Ollama's defaults: temperature 1, top_p 1)."""
    given = body.options.model_dump(exclude_none=True) if body.options else {}
    mapped: dict[str, Any] = {
        "temperature": 1.0 if body.temperature is None else body.temperature,
        "top_p": 1.0 if body.top_p is None else body.top_p,
    }
    for key in ("frequency_penalty", "presence_penalty", "seed"):
        if getattr(body, key) is not None:
            mapped[key] = getattr(body, key)
    if body.stop is not None:
        mapped["stop"] = [body.stop] if isinstance(body.stop, str) else body.stop
    if max_tokens is not None:
        mapped["num_predict"] = max_tokens
    return Options.model_validate({**given, **mapped})


def response_format(rf: ResponseFormat | None) -> str | dict[str, Any] | None:
    if rf is None or rf.type == "text":
        return None
    if rf.type == "json_schema" and rf.json_schema is not None and rf.json_schema.schema_:
        return rf.json_schema.schema_
    return "json"


def message(m: OAMessage) -> ChatMessage:
    text, images = [], []
    if isinstance(m.content, str):
        text.append(m.content)
    for part in m.content if isinstance(m.content, list) else []:
        if part.type in ("text", "input_text"):
            text.append(part.text or "")
        elif part.image_url is not None:
            url = part.image_url if isinstance(part.image_url, str) else part.image_url.url
            images.append(data_url_payload(url))
    calls = []
    for c in m.tool_calls or []:
        try:
            args = json.loads(c.function.arguments or "{}")
        except ValueError:
            raise APIError(400, f"tool call {c.function.name}: arguments are not JSON") from None
        if not isinstance(args, dict):
            raise APIError(400, f"tool call {c.function.name}: arguments must be a JSON object")
        calls.append(ToolCall(id=c.id, function=FunctionCall(name=c.function.name, arguments=args)))
    return ChatMessage(
        role="system" if m.role == "developer" else m.role,
        content="\n".join(text),
        images=images or None,
        tool_calls=calls or None,
        tool_name=m.name if m.role == "tool" else None,
        tool_call_id=m.tool_call_id,
        thinking=m.reasoning,
    )


def usage(final: dict[str, Any]) -> dict[str, Any]:
    extras = hearth_extras(final)
    completion = int(final.get("eval_count", 0))
    return {
        "prompt_tokens": extras["prompt_tokens"],
        "completion_tokens": completion,
        "total_tokens": extras["prompt_tokens"] + completion,
        "prompt_tokens_details": {"cached_tokens": extras["prompt_cached"]},
    }


def finish(final: dict[str, Any], calls: list[ParsedCall]) -> str:
    if calls:
        return "tool_calls"
    return "length" if final.get("done_reason") == "length" else "stop"


def tool_calls(calls: list[ParsedCall]) -> list[dict[str, Any]]:
    return [
        {
            "index": i,
            "id": "call_" + secrets.token_hex(6),
            "type": "function",
            "function": {"name": c.name, "arguments": json.dumps(c.arguments)},
        }
        for i, c in enumerate(calls)
    ]


def legacy_logprobs(items: list[dict[str, Any]], offset: int) -> dict[str, Any]:
    """OpenAI's completions logprobs: parallel lists, top alternatives as {token: logprob}."""
    offsets, pos = [], offset
    for it in items:
        offsets.append(pos)
        pos += len(it.get("token", ""))
    return {
        "tokens": [it.get("token", "") for it in items],
        "token_logprobs": [it.get("logprob") for it in items],
        "top_logprobs": [
            {t["token"]: t["logprob"] for t in it.get("top_logprobs", [])} for it in items
        ],
        "text_offset": offsets,
    }
