"""OpenAI's Responses API: `POST /v1/responses`, `GET` and `DELETE /v1/responses/{id}`.

A request's input items become chat messages (`convert`), and the reply is made as
`/v1/chat/completions` makes it: the same prompt (`common.chat_prompt`), constraint (tool_choice,
text.format) and `OutputParser`. `ReplyAssembler` turns the parsed pieces into the response's
output items (a reasoning item when the model thought, a message with one output_text part,
function_call items) and, streamed, into the semantic events in OpenAI's order, each with its
`sequence_number`; a non-streamed reply runs the same assembler, so both give the same output.
A function_call item starts when the model begins the call, and its arguments stream as the
model writes them (`response.function_call_arguments.delta`, from `Piece.partial_calls`).
`status` is "incomplete" (`incomplete_details.reason` "max_output_tokens") when the reply was
cut at `max_output_tokens`. Finished responses are kept (`store`) unless
`store: false`; `previous_response_id` continues one (its input and output come first).
"""

from __future__ import annotations

import json
import secrets
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response

from ...prompting.outputs import OutputParser, ParsedCall
from ...request_types import ChatMessage, Options
from ...service import Generation, Piece, pieces
from ..openai import convert as openai_convert
from ..shared.common import chat_prompt, generate, hearth_extras, service_of, think_flag
from ..shared.errors import APIError
from ..shared.streams import error_message, sse
from . import convert
from .schemas import ResponsesRequest
from .store import StoredResponse, forgotten_sentence, store_of

__all__ = ["router", "ReplyAssembler"]

router = APIRouter(tags=["openai"])


def _id(prefix: str) -> str:
    return prefix + secrets.token_hex(12)


def _usage(final: dict[str, Any], reasoning_pieces: int) -> dict[str, Any]:
    """OpenAI's usage: the whole prompt (with the part from the prompt cache), and the output
    tokens (`reasoning_tokens`: the runner's chunks that carried thinking)."""
    extras = hearth_extras(final)
    output = int(final.get("eval_count", 0))
    return {
        "input_tokens": extras["prompt_tokens"],
        "input_tokens_details": {"cached_tokens": extras["prompt_cached"], "cache_write_tokens": 0},
        "output_tokens": output,
        "output_tokens_details": {"reasoning_tokens": min(reasoning_pieces, output)},
        "total_tokens": extras["prompt_tokens"] + output,
    }


class ReplyAssembler:
    """Builds one response from a reply's pieces: `start()`, `feed(piece)` for each, then
    `finish(...)`; each returns the stream's events for that step. `response` is the response
    object at every step (status "in_progress" until finished)."""

    def __init__(self, base: dict[str, Any], one_call: bool = False) -> None:
        self.response: dict[str, Any] = {**base, "status": "in_progress", "output": []}
        self.one_call = one_call
        self._seq = 0
        self._open: dict[str, Any] | None = None  # the reasoning or message item streaming now
        self._blank = ""  # whitespace not yet placed: it opens no message by itself
        self._thinking_pieces = 0
        self._calls: list[dict[str, Any]] = []  # function_call items streamed as written

    @property
    def output(self) -> list[dict[str, Any]]:
        return self.response["output"]  # type: ignore[no-any-return]

    def event(self, kind: str, **fields: Any) -> dict[str, Any]:
        e = {"type": kind, "sequence_number": self._seq, **fields}
        self._seq += 1
        return e

    def error_event(self, e: Exception) -> dict[str, Any]:
        """The event a failure mid-stream becomes (OpenAI's `error` event)."""
        return self.event("error", code="server_error", message=error_message(e), param=None)

    def start(self) -> list[dict[str, Any]]:
        snapshot = {**self.response, "output": []}
        return [
            self.event("response.created", response=snapshot),
            self.event("response.in_progress", response=snapshot),
        ]

    def feed(self, piece: Piece) -> list[dict[str, Any]]:
        events: list[dict[str, Any]] = []
        if piece.thinking:
            self._thinking_pieces += 1
            events += self._text("reasoning", piece.thinking)
        if piece.content:
            streaming = self._open is not None and self._open["type"] == "message"
            if not streaming and not (self._blank + piece.content).strip():
                self._blank += piece.content
                return events
            text, self._blank = self._blank + piece.content, ""
            events += self._text("message", text)
        partial = piece.partial_calls[:1] if self.one_call else piece.partial_calls
        for i, call in enumerate(partial):
            if i < len(self._calls) - 1:
                continue  # a call before the last is whole
            if i == len(self._calls):
                events += self._close("completed")
                events += self._start_call(call.name)
            events += self._extend_call(i, call.arguments)
        return events

    def finish(self, calls: list[ParsedCall], final: dict[str, Any]) -> list[dict[str, Any]]:
        """The events that end the reply: open items closed, the calls, and the last event
        (`response.completed`, or `response.incomplete` when it was cut at the token limit)."""
        cut = final.get("done_reason") == "length"
        if self.one_call:
            calls = calls[:1]
        status = "incomplete" if cut else "completed"
        events: list[dict[str, Any]] = []
        if not calls and not any(item["type"] == "message" for item in self.output):
            events += self._close(status)  # the thinking, when the reply is only thoughts
            events += self._open_item("message")  # a reply without calls has its message
            if self._blank:
                events += self._text("message", self._blank)
        events += self._close(status)
        for i, call in enumerate(calls):
            events += self._call(call) if i >= len(self._calls) else self._end_call(i, call)
        self.response.update(
            status=status,
            completed_at=int(time.time()),
            incomplete_details={"reason": "max_output_tokens"} if cut else None,
            usage=_usage(final, self._thinking_pieces),
            hearth=hearth_extras(final),
        )
        events.append(self.event(f"response.{status}", response=self.response))
        return events

    def _text(self, kind: str, delta: str) -> list[dict[str, Any]]:
        events: list[dict[str, Any]] = []
        if self._open is None or self._open["type"] != kind:
            events += self._close("completed")
            events += self._open_item(kind)
        item = self._open
        assert item is not None
        item["content"][0]["text"] += delta
        where = {"item_id": item["id"], "output_index": len(self.output) - 1, "content_index": 0}
        if kind == "message":
            events.append(
                self.event("response.output_text.delta", **where, delta=delta, logprobs=[])
            )
        else:
            events.append(self.event("response.reasoning_text.delta", **where, delta=delta))
        return events

    def _open_item(self, kind: str) -> list[dict[str, Any]]:
        item: dict[str, Any]
        part: dict[str, Any]
        if kind == "message":
            item = {"id": _id("msg_"), "type": "message", "role": "assistant", "content": []}
            part = {"type": "output_text", "text": "", "annotations": [], "logprobs": []}
        else:
            item = {"id": _id("rs_"), "type": "reasoning", "summary": [], "content": []}
            part = {"type": "reasoning_text", "text": ""}
        item["status"] = "in_progress"
        self.output.append(item)
        self._open = item
        where = {"item_id": item["id"], "output_index": len(self.output) - 1}
        added = self.event("response.output_item.added", output_index=where["output_index"],
                           item=json.loads(json.dumps(item)))  # fmt: skip
        item["content"].append(part)
        return [added, self.event("response.content_part.added", **where, content_index=0,
                                  part=dict(part))]  # fmt: skip

    def _close(self, status: str) -> list[dict[str, Any]]:
        item, self._open = self._open, None
        if item is None:
            return []
        part = item["content"][0]
        item["status"] = status
        where = {"item_id": item["id"], "output_index": len(self.output) - 1, "content_index": 0}
        if item["type"] == "message":
            done = self.event("response.output_text.done", **where, text=part["text"], logprobs=[])
        else:
            done = self.event("response.reasoning_text.done", **where, text=part["text"])
        return [
            done,
            self.event("response.content_part.done", **where, part=dict(part)),
            self.event("response.output_item.done", output_index=where["output_index"],
                       item=json.loads(json.dumps(item))),
        ]  # fmt: skip

    def _call(self, call: ParsedCall) -> list[dict[str, Any]]:
        """A call not streamed while written: its item, its arguments as one delta, done."""
        events = self._start_call(call.name)
        i = len(self._calls) - 1
        events += self._extend_call(i, json.dumps(call.arguments, ensure_ascii=False))
        return events + self._end_call(i, call)

    def _start_call(self, name: str) -> list[dict[str, Any]]:
        item = {"id": _id("fc_"), "type": "function_call", "call_id": _id("call_"),
                "name": name, "arguments": "", "status": "in_progress"}  # fmt: skip
        self.output.append(item)
        self._calls.append(item)
        index = len(self.output) - 1
        return [self.event("response.output_item.added", output_index=index, item=dict(item))]

    def _extend_call(self, i: int, arguments: str) -> list[dict[str, Any]]:
        """The delta that grows call i's arguments to `arguments` (none when they do not
        continue what was sent: a call's text only grows)."""
        item = self._calls[i]
        sent = item["arguments"]
        if len(arguments) <= len(sent) or not arguments.startswith(sent):
            return []
        item["arguments"] = arguments
        where = {"item_id": item["id"], "output_index": self.output.index(item)}
        delta = arguments[len(sent) :]
        return [self.event("response.function_call_arguments.delta", **where, delta=delta)]

    def _end_call(self, i: int, call: ParsedCall) -> list[dict[str, Any]]:
        """Call i done as the call that counts: its streamed arguments are kept when they
        parse to its arguments, else completed (or, when they cannot be, replaced: deltas
        cannot be taken back, so the done event's `arguments` are the ones to use)."""
        item = self._calls[i]
        if _loads(item["arguments"]) != call.arguments:
            whole = json.dumps(call.arguments, ensure_ascii=False)
            events = self._extend_call(i, whole)
            item["arguments"] = whole
        else:
            events = []
        item["status"] = "completed"
        index = self.output.index(item)
        where = {"item_id": item["id"], "output_index": index}
        return events + [
            self.event("response.function_call_arguments.done", **where,
                       arguments=item["arguments"]),
            self.event("response.output_item.done", output_index=index, item=dict(item)),
        ]  # fmt: skip


def _loads(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return None


def _base(body: ResponsesRequest, model: str, opts: Options) -> dict[str, Any]:
    """The response object's fields that echo the request."""
    fmt = body.text.format if body.text is not None else None
    return {
        "id": _id("resp_"),
        "object": "response",
        "created_at": int(time.time()),
        "background": False,
        "error": None,
        "incomplete_details": None,
        "instructions": body.instructions,
        "max_output_tokens": body.max_output_tokens,
        "max_tool_calls": None,
        "metadata": body.metadata or {},
        "model": model,
        "parallel_tool_calls": body.parallel_tool_calls is not False,
        "previous_response_id": body.previous_response_id,
        "reasoning": {"effort": body.reasoning.effort if body.reasoning else None, "summary": None},
        "service_tier": "default",
        "store": body.store is not False,
        "temperature": opts.temperature,  # as sampled (layered_options)
        "text": {
            "format": fmt.model_dump(by_alias=True, exclude_none=True) if fmt else {"type": "text"}
        },
        "tool_choice": body.tool_choice if body.tool_choice is not None else "auto",
        "tools": [t.model_dump(exclude_none=True) for t in body.tools or []],
        "top_p": opts.top_p,
        "truncation": "disabled",
        "usage": None,
        "user": body.user,
    }


async def _events(
    gen: Generation,
    parser: OutputParser,
    reply: ReplyAssembler,
    keep: Callable[[dict[str, Any]], None],
) -> AsyncIterator[dict[str, Any]]:
    for e in reply.start():
        yield e
    async for p in pieces(gen, parser):
        for e in reply.feed(p):
            yield e
        if p.final is not None:
            events = reply.finish(p.tool_calls, p.final)
            keep(reply.response)
            for e in events:
                yield e


@router.post("/v1/responses", summary="OpenAI responses")
async def create_response(body: ResponsesRequest, request: Request) -> Response:
    svc, store = service_of(request), store_of(request)
    convert.refuse_unsupported(body)
    history: list[dict[str, Any]] = []
    if body.previous_response_id is not None:
        previous = store.get(body.previous_response_id)
        if previous is None:
            raise APIError(404, forgotten_sentence(body.previous_response_id, store))
        history = previous.conversation()
    items = [*history, *convert.input_items(body)]
    messages = convert.messages(items)
    if body.instructions:
        messages.insert(0, ChatMessage(role="system", content=body.instructions, images=None))
    tools = convert.tools(body.tools)
    text_format = convert.text_format(body.text)
    target = await svc.target(body.model)
    target.require("completion", "chat")
    tools, forced = openai_convert.tool_choice(convert.tool_choice(body.tool_choice), tools)
    fmt = openai_convert.output_format(text_format, forced, "text.format")
    if tools:
        target.require("tools", "tools")
    effort = body.reasoning.effort if body.reasoning else None
    think = think_flag(target, None if effort is None else effort != "none")
    prompt, images = chat_prompt(svc, target, messages, tools, think, effort)
    opts = openai_convert.sampling_options(
        body.options, body.temperature, body.top_p, body.max_output_tokens
    )
    gen = await generate(svc, target, opts, prompt, images, fmt, body.keep_alive)
    parser = target.output_parser(think, tools, prompt, body.parallel_tool_calls is False)
    one_call = body.parallel_tool_calls is False
    reply = ReplyAssembler(_base(body, target.name, opts), one_call=one_call)

    def keep(response: dict[str, Any]) -> None:
        if body.store is not False:
            store.put(StoredResponse(response, items))

    if body.stream:
        return sse(_events(gen, parser, reply, keep), gen.close, named=True, done=False,
                   error=reply.error_event)  # fmt: skip
    async for e in _events(gen, parser, reply, keep):
        if e["type"] in ("response.completed", "response.incomplete"):
            return JSONResponse(reply.response)
    raise APIError(500, "the response ended early")


def _stored(response_id: str, request: Request) -> StoredResponse:
    store = store_of(request)
    stored = store.get(response_id)
    if stored is None:
        raise APIError(404, forgotten_sentence(response_id, store))
    return stored


@router.get("/v1/responses/{response_id}", summary="A stored response (OpenAI format)")
async def get_response(response_id: str, request: Request) -> dict[str, Any]:
    return _stored(response_id, request).response


@router.delete("/v1/responses/{response_id}", summary="Forget a stored response")
async def delete_response(response_id: str, request: Request) -> dict[str, Any]:
    _stored(response_id, request)
    store_of(request).delete(response_id)
    return {"id": response_id, "object": "response", "deleted": True}
