"""Translating a Responses API request into the chat vocabulary the service shares
(`request_types.ChatMessage`) and the chat route's tool and format shapes, so that
`/v1/responses` builds its prompt, constraint and parser exactly as `/v1/chat/completions`.

Input items become messages: `message` items by role (developer as system), `function_call`
items as the assistant's tool calls (joined to the assistant message they follow),
`function_call_output` items as tool messages, and `reasoning` items as the thinking of the
assistant message that follows. Anything else is a 400 naming it.
"""

from __future__ import annotations

import json
from typing import Any

from ...prompting.images import data_url_payload
from ...request_types import ChatMessage, FunctionCall, ToolCall
from ..openai.schemas import JSONSchemaFormat, ResponseFormat
from ..shared.errors import APIError
from .schemas import FunctionTool, ResponsesRequest, TextConfig

__all__ = ["refuse_unsupported", "input_items", "messages", "tools", "tool_choice", "text_format"]

_ROLES = {"user": "user", "assistant": "assistant", "system": "system", "developer": "system"}
_TEXT_PARTS = ("input_text", "output_text", "text", "summary_text", "reasoning_text")


def refuse_unsupported(body: ResponsesRequest) -> None:
    """A 400 for request fields that ask for what Hearth does not have."""
    if body.background:
        raise APIError(400, "background responses are not supported: leave background out")
    if body.conversation is not None:
        raise APIError(
            400, "conversation objects are not supported: continue with previous_response_id"
        )
    if body.prompt is not None:
        raise APIError(
            400, "stored prompts (prompt) are not supported: send input and instructions"
        )


def input_items(body: ResponsesRequest) -> list[dict[str, Any]]:
    """The request's input as a list of items (a string is one user message)."""
    if isinstance(body.input, str):
        return [{"type": "message", "role": "user", "content": body.input}]
    return list(body.input)


def _image(part: dict[str, Any], where: str) -> str:
    url = part.get("image_url")
    if not isinstance(url, str) or not url:
        raise APIError(
            400,
            f"{where}: an input_image needs image_url, a base64 data: URL (file_id is not "
            "supported: Hearth keeps no files)",
        )
    if url.startswith(("http://", "https://")):
        raise APIError(
            400,
            f"{where}: image URLs are not fetched (Hearth fetches nothing); send the image as "
            "a base64 data: URL",
        )
    return data_url_payload(url)


def _content(content: Any, where: str) -> tuple[str, list[str]]:
    """A message's or tool output's content as (text, images)."""
    if isinstance(content, str):
        return content, []
    if not isinstance(content, list):
        raise APIError(400, f"{where}: content must be a string or a list of content parts")
    text, images = [], []
    for i, part in enumerate(content):
        at = f"{where}.content[{i}]"
        kind = part.get("type") if isinstance(part, dict) else None
        if kind in _TEXT_PARTS and isinstance(part.get("text"), str):
            text.append(part["text"])
        elif kind == "refusal" and isinstance(part.get("refusal"), str):
            text.append(part["refusal"])
        elif kind == "input_image":
            images.append(_image(part, at))
        elif kind in ("input_file", "input_audio"):
            raise APIError(400, f"{at}: {kind} parts are not supported; send text and images")
        else:
            raise APIError(
                400,
                f"{at}: a content part must be input_text, input_image, output_text or "
                "refusal with its text",
            )
    return "\n".join(text), images


def _string(item: dict[str, Any], key: str, where: str) -> str:
    value = item.get(key)
    if not isinstance(value, str) or not value:
        raise APIError(400, f"{where}: {item.get('type')} needs {key} (a non-empty string)")
    return value


def _arguments(item: dict[str, Any], where: str) -> dict[str, Any]:
    raw = item.get("arguments", "{}")
    try:
        args = json.loads(raw) if isinstance(raw, str) else raw
    except ValueError:
        raise APIError(400, f"{where}: function_call arguments are not JSON") from None
    if not isinstance(args, dict):
        raise APIError(400, f"{where}: function_call arguments must be a JSON object")
    return args


def messages(items: list[dict[str, Any]]) -> list[ChatMessage]:
    """The chat messages for a conversation's items (see the module)."""
    out: list[ChatMessage] = []
    names: dict[str, str] = {}  # call_id -> function name, for the tool messages
    thinking: str | None = None
    for i, item in enumerate(items):
        where = f"input[{i}]"
        if not isinstance(item, dict):
            raise APIError(400, f"{where}: an input item must be an object")
        kind = item.get("type", "message")
        if kind == "message":
            given = item.get("role")
            role = _ROLES.get(given) if isinstance(given, str) else None
            if role is None:
                raise APIError(400, f"{where}: role must be user, assistant, system or developer")
            if "content" not in item:
                raise APIError(400, f"{where}: a message needs content")
            text, images = _content(item["content"], where)
            if images and role != "user":
                raise APIError(400, f"{where}: only user messages may hold images")
            msg = ChatMessage(role=role, content=text, images=images or None)  # type: ignore[arg-type]
            if role == "assistant" and thinking is not None:
                msg.thinking, thinking = thinking, None
            out.append(msg)
        elif kind == "function_call":
            name, call_id = _string(item, "name", where), _string(item, "call_id", where)
            names[call_id] = name
            call = ToolCall(
                id=call_id, function=FunctionCall(name=name, arguments=_arguments(item, where))
            )
            if out and out[-1].role == "assistant" and thinking is None:
                out[-1].tool_calls = [*(out[-1].tool_calls or []), call]
            else:
                out.append(
                    ChatMessage(
                        role="assistant",
                        content="",
                        tool_calls=[call],
                        thinking=thinking,
                        images=None,
                    )
                )
                thinking = None
        elif kind == "function_call_output":
            call_id = _string(item, "call_id", where)
            if "output" not in item:
                raise APIError(400, f"{where}: function_call_output needs output")
            text, images = _content(item["output"], where)
            out.append(ChatMessage(role="tool", content=text, images=images or None,
                                   tool_call_id=call_id, tool_name=names.get(call_id)))  # fmt: skip
        elif kind == "reasoning":
            # the reasoning text itself, else its summary
            text, _ = _content(item.get("content") or item.get("summary") or [], where)
            thinking = text or None
        elif kind == "item_reference":
            raise APIError(
                400,
                f"{where}: item_reference is not supported; send the item itself, or continue "
                "with previous_response_id",
            )
        else:
            raise APIError(
                400,
                f"{where}: '{str(kind)[:60]}' items are not supported; Hearth takes message, "
                "function_call, function_call_output and reasoning items",
            )
    return out


def tools(given: list[FunctionTool] | None) -> list[dict[str, Any]]:
    """Function tools in the chat route's shape ({"type": "function", "function": {...}});
    a 400 naming any other tool type (Hearth hosts no tools)."""
    out = []
    for i, t in enumerate(given or []):
        if t.type != "function":
            raise APIError(
                400,
                f"tools[{i}]: '{t.type[:60]}' tools are not supported; Hearth runs no hosted "
                "tools, only function tools",
            )
        if not t.name:
            raise APIError(400, f"tools[{i}]: a function tool needs a name")
        fn: dict[str, Any] = {"name": t.name, "parameters": t.parameters or {"type": "object"}}
        if t.description:
            fn["description"] = t.description
        out.append({"type": "function", "function": fn})
    return out


def tool_choice(choice: str | dict[str, Any] | None) -> str | dict[str, Any] | None:
    """A Responses tool_choice in the chat route's shape (for `openai_convert.tool_choice`)."""
    if not isinstance(choice, dict):
        return choice
    kind = choice.get("type")
    if kind == "function":
        return {"type": "function", "function": {"name": str(choice.get("name"))}}
    if kind == "allowed_tools":
        listed = choice.get("tools")
        named = [
            {"type": "function", "function": {"name": str(t.get("name"))}}
            for t in (listed if isinstance(listed, list) else [])
            if isinstance(t, dict)
        ]
        return {
            "type": "allowed_tools",
            "allowed_tools": {"mode": choice.get("mode", "auto"), "tools": named},
        }
    raise APIError(
        400,
        f"tool_choice of type '{str(kind)[:60]}' is not supported; use 'none', 'auto', "
        '\'required\', a function ({"type": "function", "name": ...}) or allowed_tools',
    )


def text_format(text: TextConfig | None) -> ResponseFormat | None:
    """text.format as the chat route's response_format (for `openai_convert.response_format`)."""
    fmt = text.format if text is not None else None
    if fmt is None:
        return None
    schema = None
    if fmt.type == "json_schema":
        if not fmt.schema_:
            raise APIError(400, "text.format of type json_schema needs its schema")
        schema = JSONSchemaFormat(name=fmt.name, schema=fmt.schema_, strict=fmt.strict)
    return ResponseFormat(type=fmt.type, json_schema=schema)
