"""Anthropic's Messages API: `POST /v1/messages` and `POST /v1/messages/count_tokens`.

The messages become the shared chat vocabulary (`convert`), then the reply is made
as on the other chat routes: the model's template renders the prompt (`common.chat_prompt`),
a `Generation` runs it and the `OutputParser` splits thinking, text and tool calls, which
answer as `thinking`, `text` and `tool_use` blocks (ids `toolu_...`). Streaming is
Anthropic's named server-sent events: `message_start`, `ping`, per block
`content_block_start` / `content_block_delta` (`thinking_delta`, `text_delta`,
`input_json_delta`) / `content_block_stop`, then `message_delta` (stop reason, usage) and
`message_stop`; a failure mid-stream is an `error` event. A `tool_use` block starts when the
model begins a call and streams its input as the model writes it (`input_json_delta`s, see
`_StreamedCalls`).

Errors are Anthropic's `{"type": "error", "error": {"type", "message"}}` (api/shared/errors.py).
`anthropic-version` and `anthropic-beta` headers are accepted and not needed; the API key,
when set, is checked as on every route (`x-api-key` or `Authorization: Bearer`).
`stop_reason` is `end_turn`, `max_tokens`, `tool_use` or `stop_sequence`, with
`stop_sequence` naming the one of the request's `stop_sequences` that ended the reply (the
runner's final record names the stop string it matched); a stop string of the model's own
parameters ends a reply as `end_turn`.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response

from ...prompting.outputs import ParsedCall, PartialCall
from ...scheduling.runner_process import RunnerError
from ...service import Piece, Service, Target, pieces
from ..shared.common import chat_prompt, generate, service_of, think_flag
from ..shared.errors import APIError
from ..shared.streams import error_message, sse
from . import convert
from .schemas import CountTokensRequest, MessagesRequest, PromptedRequest

__all__ = ["router"]

router = APIRouter(tags=["anthropic"])


@dataclass
class _Prepared:
    """A request made ready to run: its model, rendered prompt and checked images, the
    names of the tools offered, the format forcing a call (tool_choice any / tool), whether
    at most one call is wanted, and the thinking switch."""

    target: Target
    prompt: str
    images: list[str]
    tools: list[dict[str, Any]]
    forced: dict[str, Any] | None
    one_call: bool
    think: bool | None


async def _prepare(svc: Service, body: PromptedRequest) -> _Prepared:
    target = await svc.target(body.model)
    target.require("completion", "chat")
    tools, forced, one_call = convert.tools(body)
    if tools:
        target.require("tools", "tools")
    think = think_flag(target, convert.think(body.thinking))
    prompt, images = chat_prompt(svc, target, convert.messages(body), tools, think)
    return _Prepared(target, prompt, images, tools, forced, one_call, think)


@router.post("/v1/messages", summary="Anthropic Messages")
async def messages(body: MessagesRequest, request: Request) -> Response:
    svc = service_of(request)
    ready = await _prepare(svc, body)
    target, one_call = ready.target, ready.one_call
    gen = await generate(
        svc, target, convert.options(body), ready.prompt, ready.images, ready.forced,
        body.keep_alive,
    )  # fmt: skip
    parser = target.output_parser(ready.think, ready.tools, ready.prompt, one_call)
    items = pieces(gen, parser)
    head = {
        "id": convert.message_id(),
        "type": "message",
        "role": "assistant",
        "model": target.name,
    }
    if body.stream:
        events = _events(items, head, one_call, body.stop_sequences)
        return sse(events, gen.close, named=True, done=False,
                   error=lambda e: _error_event(error_message(e)))  # fmt: skip
    reply = _Reply()
    async for p in items:
        reply.add(p)
        if p.final is not None:
            calls = p.tool_calls[:1] if one_call else p.tool_calls
            return JSONResponse({**head, **reply.result(p.final, calls, body.stop_sequences)})
    raise APIError(500, "the response ended early")


@dataclass
class _Reply:
    """A non-streamed reply's text and thinking, gathered piece by piece."""

    text: list[str] = field(default_factory=list)
    thinking: list[str] = field(default_factory=list)

    def add(self, p: Piece) -> None:
        self.text.append(p.content)
        self.thinking.append(p.thinking)

    def result(
        self, final: dict[str, Any], calls: list[ParsedCall], stop_sequences: list[str] | None
    ) -> dict[str, Any]:
        content: list[dict[str, Any]] = []
        if any(self.thinking):
            content.append(
                {"type": "thinking", "thinking": "".join(self.thinking), "signature": ""}
            )
        text = "".join(self.text)
        if text or not calls:
            content.append({"type": "text", "text": text})
        content.extend(convert.tool_use_block(c) for c in calls)
        return {
            "content": content,
            **convert.stop(final, calls, stop_sequences),
            "usage": convert.usage(final),
        }


def _error_event(message: str) -> dict[str, Any]:
    return {"type": "error", "error": {"type": "api_error", "message": message}}


@dataclass
class _Blocks:
    """The open content block of a stream: a new kind of piece closes it and opens the next."""

    index: int = -1
    kind: str | None = None

    def switch(self, kind: str, block: dict[str, Any]) -> list[dict[str, Any]]:
        """The events that close the open block and start `block` (nothing when `kind` is
        the open block's kind and not a tool_use)."""
        if kind == self.kind and kind != "tool_use":
            return []
        events = self.stop()
        self.index += 1
        self.kind = kind
        events.append({"type": "content_block_start", "index": self.index, "content_block": block})
        return events

    def stop(self) -> list[dict[str, Any]]:
        if self.kind is None:
            return []
        self.kind = None
        return [{"type": "content_block_stop", "index": self.index}]

    def delta(self, delta: dict[str, Any]) -> dict[str, Any]:
        return {"type": "content_block_delta", "index": self.index, "delta": delta}


@dataclass
class _StreamedCalls:
    """The tool_use blocks a stream opens as calls begin, fed their input's JSON text as it is
    written (`Piece.partial_calls`: a call's text only grows, and a call is whole once the
    next begins). At the end, what a block's deltas lack of the call that counts is sent; a
    call that streamed but does not parse after all keeps its block (deltas cannot be taken
    back)."""

    sent: list[str] = field(default_factory=list)  # each streamed call's input text so far
    index: list[int] = field(default_factory=list)  # each streamed call's block index

    def grow(self, blocks: _Blocks, partial: list[PartialCall]) -> list[dict[str, Any]]:
        events: list[dict[str, Any]] = []
        for i, call in enumerate(partial):
            if i < len(self.sent) - 1:
                continue  # a call before the last is whole
            if i == len(self.sent):
                events += blocks.switch("tool_use", convert.tool_use_start(call.name))
                self.sent.append("")
                self.index.append(blocks.index)
            events += self._extend(blocks, i, call.arguments)
        return events

    def finish(self, blocks: _Blocks, calls: list[ParsedCall]) -> list[dict[str, Any]]:
        """The events that complete the streamed calls' blocks and stream the others whole."""
        events: list[dict[str, Any]] = []
        for i, call in enumerate(calls):
            if i >= len(self.sent):
                block = convert.tool_use_block(call)
                events += blocks.switch("tool_use", {**block, "input": {}})
                events.append(
                    blocks.delta(
                        {"type": "input_json_delta", "partial_json": json.dumps(call.arguments)}
                    )
                )
            elif _loads(self.sent[i]) != call.arguments:
                events += self._extend(blocks, i, json.dumps(call.arguments))
        return events

    def _extend(self, blocks: _Blocks, i: int, text: str) -> list[dict[str, Any]]:
        """The delta that grows call i's streamed text to `text` (none when `text` does not
        continue it or its block is closed)."""
        sent = self.sent[i]
        open_ = blocks.kind == "tool_use" and blocks.index == self.index[i]
        if not open_ or len(text) <= len(sent) or not text.startswith(sent):
            return []
        self.sent[i] = text
        return [blocks.delta({"type": "input_json_delta", "partial_json": text[len(sent) :]})]


def _loads(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return None


async def _events(
    items: AsyncIterator[Piece],
    head: dict[str, Any],
    one_call: bool,
    stop_sequences: list[str] | None,
) -> AsyncIterator[dict[str, Any]]:
    start: dict[str, Any] = {"content": [], "stop_reason": None, "stop_sequence": None}
    usage = {"input_tokens": 0, "output_tokens": 0}
    yield {"type": "message_start", "message": {**head, **start, "usage": usage}}
    yield {"type": "ping"}
    blocks = _Blocks()
    streamed = _StreamedCalls()
    async for p in items:
        if p.thinking:
            for e in blocks.switch(
                "thinking", {"type": "thinking", "thinking": "", "signature": ""}
            ):
                yield e
            yield blocks.delta({"type": "thinking_delta", "thinking": p.thinking})
        if p.content:
            for e in blocks.switch("text", {"type": "text", "text": ""}):
                yield e
            yield blocks.delta({"type": "text_delta", "text": p.content})
        if p.final is None:
            for e in streamed.grow(blocks, p.partial_calls[:1] if one_call else p.partial_calls):
                yield e
            continue
        calls = p.tool_calls[:1] if one_call else p.tool_calls
        if blocks.index < 0 and not calls:  # an empty reply still has its text block
            for e in blocks.switch("text", {"type": "text", "text": ""}):
                yield e
        for e in streamed.finish(blocks, calls):
            yield e
        for e in blocks.stop():
            yield e
        final_usage = convert.usage(p.final)
        yield {
            "type": "message_delta",
            "delta": convert.stop(p.final, calls, stop_sequences),
            "usage": final_usage,
        }
        yield {"type": "message_stop"}
        return
    raise APIError(500, "the response ended early")


@router.post("/v1/messages/count_tokens", summary="Anthropic token count")
async def count_tokens(body: CountTokensRequest, request: Request) -> dict[str, Any]:
    """The prompt's tokens as the model's runner tokenizes it (text only: image blocks are
    checked but their positions are not counted)."""
    svc = service_of(request)
    ready = await _prepare(svc, body)
    settings = svc.settings(ready.target, body.options)
    lease = await svc.lease(ready.target, settings, svc.keep_alive(body.keep_alive))
    try:
        tokens = await lease.runner.tokenize(ready.prompt)
    except RunnerError as e:
        raise svc.runner_failure(lease, e) from None
    finally:
        lease.release()
    return {"input_tokens": len(tokens)}
