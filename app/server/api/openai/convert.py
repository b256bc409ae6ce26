"""Translating between OpenAI's request/response shapes and the service's: sampling fields
to Ollama options, messages (content parts, data-URL images, tool calls with JSON-string
arguments) to chat messages, `tool_choice` to the tools offered and a forcing format, and runner
results to usage, finish reasons and logprobs. Also the refusals of request fields Hearth cannot
honour (the table is in schemas)."""

from __future__ import annotations

import json
import secrets
from typing import Any

from ....engine.grammar.schema import compile_schema
from ...prompting.images import data_url_payload
from ...prompting.outputs import ParsedCall
from ...request_types import ChatMessage, FunctionCall, Options, ToolCall, layered_options
from ..shared.common import hearth_extras
from ..shared.errors import APIError
from .schemas import OAChatRequest, OAMessage, OAToolCall, ResponseFormat, SamplingFields

__all__ = [
    "check_sampling",
    "check_chat",
    "tool_choice",
    "options",
    "sampling_options",
    "response_format",
    "output_format",
    "message",
    "usage",
    "finish",
    "tool_calls",
    "legacy_logprobs",
]


def check_sampling(body: SamplingFields) -> None:
    """Refuse (400) what both generation endpoints cannot honour: more than one choice and
    per-token biases."""
    if body.n is not None and body.n > 1:
        raise APIError(400, "n > 1 is not supported: ask for one completion per request")
    if body.logit_bias:
        raise APIError(400, "logit_bias is not supported: the sampler has no per-token bias")


def check_chat(body: OAChatRequest) -> None:
    """Refuse (400) chat fields whose values ask for something Hearth cannot do, rather than
    answer as if they had not been sent."""
    check_sampling(body)
    if body.audio is not None or "audio" in (body.modalities or []):
        raise APIError(400, "audio output is not supported: Hearth answers in text only")
    if body.functions or body.function_call is not None:
        raise APIError(
            400,
            "functions and function_call (deprecated by OpenAI) are not supported: "
            "give the functions as tools, and tool_choice",
        )
    if body.web_search_options is not None:
        raise APIError(400, "web_search_options is not supported: Hearth does not search the web")


def _named(tools: list[dict[str, Any]], names: list[str]) -> list[dict[str, Any]]:
    known = {t["function"]["name"] for t in tools}
    for name in names:
        if name not in known:
            raise APIError(400, f"tool_choice names the function '{name}', which is not in tools")
    return [t for t in tools if t["function"]["name"] in names]


def _choice_names(choice: dict[str, Any]) -> tuple[list[str], bool]:
    """The function names a tool_choice object allows and whether it requires a call."""
    kind = choice.get("type")
    if kind == "function" and isinstance(choice.get("function"), dict):
        return [str(choice["function"].get("name"))], True
    allowed = choice.get("allowed_tools")
    if kind == "allowed_tools" and isinstance(allowed, dict):
        mode = allowed.get("mode", "auto")
        if mode not in ("auto", "required"):
            raise APIError(400, "tool_choice.allowed_tools.mode must be 'auto' or 'required'")
        items = allowed.get("tools")
        items = items if isinstance(items, list) else []
        names = [str((t.get("function") or {}).get("name")) for t in items if isinstance(t, dict)]
        return names, mode == "required"
    raise APIError(
        400,
        "tool_choice must be 'none', 'auto', 'required', a function "
        '({"type": "function", "function": {"name": ...}}) or an allowed_tools object',
    )


def _forced_schema(tools: list[dict[str, Any]]) -> dict[str, Any]:
    """The JSON schema of a call to one of `tools` ({"name", "arguments"}, which the output
    parser reads as a call). Arguments whose schema the grammar cannot run are only held to
    being an object."""
    options = []
    for t in tools:
        params = t["function"].get("parameters") or {"type": "object"}
        try:
            # a $ref would point into the wrapper below, not into `params`
            if "$ref" in json.dumps(params):
                raise ValueError("$ref")
            compile_schema(params)
        except (ValueError, TypeError, KeyError, RecursionError):
            params = {"type": "object"}
        options.append({
            "type": "object",
            "properties": {"name": {"const": t["function"]["name"]}, "arguments": params},
            "required": ["name", "arguments"],
        })  # fmt: skip
    return options[0] if len(options) == 1 else {"anyOf": options}


def tool_choice(
    choice: str | dict[str, Any] | None, tools: list[dict[str, Any]]
) -> tuple[list[dict[str, Any]], dict[str, Any] | None]:
    """The tools to offer the model, and the output format that forces a call to one of them
    (None when the model may answer in text)."""
    if choice in (None, "auto"):
        return tools, None
    if choice == "none":
        return [], None
    if choice == "required":
        required, offered = True, tools
    elif isinstance(choice, dict):
        names, required = _choice_names(choice)
        offered = _named(tools, names)
    else:
        raise APIError(400, f"tool_choice '{choice}' is not one of 'none', 'auto', 'required'")
    if required and not offered:
        raise APIError(400, "tool_choice requires a tool call, but no tools were given")
    return offered, (_forced_schema(offered) if required else None)


# OpenAI's defaults where neither its field nor `options` sets the option.
OPENAI_DEFAULTS = {"temperature": 1.0, "top_p": 1.0}


def options(body: SamplingFields, max_tokens: int | None) -> Options:
    """OpenAI's sampling fields over the body's Hearth `options` (request_types.
    layered_options); `max_tokens` is num_predict."""
    stop = [body.stop] if isinstance(body.stop, str) else body.stop
    fields = {
        "frequency_penalty": body.frequency_penalty,
        "presence_penalty": body.presence_penalty,
        "seed": body.seed,
        "stop": stop,
    }
    return sampling_options(body.options, body.temperature, body.top_p, max_tokens, fields)


def sampling_options(
    given: Options | None,
    temperature: float | None,
    top_p: float | None,
    max_tokens: int | None,
    more: dict[str, Any] | None = None,
) -> Options:
    """The options of a /v1 route with OpenAI's sampling fields (chat completions, completions,
    responses): those fields over the body's `options`, then OpenAI's defaults."""
    fields = {"temperature": temperature, "top_p": top_p, "num_predict": max_tokens}
    return layered_options(given, {**fields, **(more or {})}, OPENAI_DEFAULTS)


def output_format(
    rf: ResponseFormat | None, forced: dict[str, Any] | None, field: str = "response_format"
) -> Any:
    """The output format: the response format (the request's `field`), or the schema of a
    call tool_choice forces."""
    fmt = response_format(rf)
    if forced is not None and fmt is not None:
        raise APIError(
            400,
            f"a tool_choice that requires a call cannot be combined with a JSON {field}: "
            "both would constrain the same output",
        )
    return forced if forced is not None else fmt


def response_format(rf: ResponseFormat | None) -> str | dict[str, Any] | None:
    if rf is None or rf.type == "text":
        return None
    if rf.type == "json_schema" and rf.json_schema is not None and rf.json_schema.schema_:
        return rf.json_schema.schema_
    return "json"


def _call(c: OAToolCall) -> ToolCall:
    try:
        args = json.loads(c.function.arguments or "{}")
    except ValueError:
        raise APIError(400, f"tool call {c.function.name}: arguments are not JSON") from None
    if not isinstance(args, dict):
        raise APIError(400, f"tool call {c.function.name}: arguments must be a JSON object")
    return ToolCall(id=c.id, function=FunctionCall(name=c.function.name, arguments=args))


_ROLES = {"developer": "system", "function": "tool"}  # as the templates know them


def message(m: OAMessage) -> ChatMessage:
    """An OpenAI message as a chat message; the deprecated function message and assistant
    `function_call` become a tool message and a tool call."""
    text, images = [], []
    if isinstance(m.content, str):
        text.append(m.content)
    for part in m.content if isinstance(m.content, list) else []:
        if part.type in ("text", "input_text", "refusal"):
            text.append(part.text or part.refusal or "")
        elif part.image_url is not None:
            url = part.image_url if isinstance(part.image_url, str) else part.image_url.url
            images.append(data_url_payload(url))
    given = list(m.tool_calls or [])
    if m.function_call is not None:
        given.append(OAToolCall(function=m.function_call))
    calls = [_call(c) for c in given]
    return ChatMessage(
        role=_ROLES.get(m.role, m.role),  # type: ignore[arg-type]
        content="\n".join(text),
        images=images or None,
        tool_calls=calls or None,
        tool_name=m.name if m.role in ("tool", "function") else None,
        tool_call_id=m.tool_call_id,
        thinking=m.reasoning_content if m.reasoning_content is not None else m.reasoning,
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
