"""OpenAI-compatible endpoints, as Ollama implements them: /v1/chat/completions,
/v1/completions, /v1/embeddings, /v1/models and /v1/models/{model}.

Streaming is server-sent events ending in `data: [DONE]`. `usage.prompt_tokens` is the whole
prompt (OpenAI's meaning), with the part served from the prompt cache in
`usage.prompt_tokens_details.cached_tokens`; a `"hearth"` key adds truncation and shift flags.
`/v1/completions` continues the prompt as raw text (no chat template), as OpenAI's legacy
completions do; giving `suffix` uses the template's fill-in-the-middle instead.

A chat reply's thinking is written twice, in the message and in stream deltas:
`reasoning_content` (the name DeepSeek, llama.cpp and vLLM use, which most clients read) and
`reasoning` (Ollama's name, kept for Ollama's clients). An assistant message in the history may
carry its thinking under either name (`reasoning_content` wins when both are given).
"""

from __future__ import annotations

import base64
import secrets
import struct
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response

from ...prompting.outputs import OutputParser
from ...prompting.prompts import render
from ...request_types import Options
from ...service import Generation, Piece, Service, Target, pieces
from ...store.model_store import ModelNotFound, ModelRecord
from ..shared.common import (
    chat_prompt,
    embed_texts,
    generate,
    hearth_extras,
    normalize,
    service_of,
    think_flag,
)
from ..shared.errors import APIError
from ..shared.streams import sse
from . import convert
from .schemas import (
    OAChatRequest,
    OACompletionRequest,
    OAEmbeddingRequest,
    SamplingFields,
)

__all__ = ["router"]

router = APIRouter(tags=["openai"])
_FINGERPRINT = "fp_hearth"


async def _start(
    svc: Service,
    target: Target,
    body: SamplingFields,
    options: Options,
    prompt: str,
    images: list[str],
    fmt: str | dict[str, Any] | None,
    top: int | None,
) -> Generation:
    return await generate(svc, target, options, prompt, images, fmt, body.keep_alive, top)


def _head(prefix: str, kind: str, target: Target) -> dict[str, Any]:
    """The fields every response object or chunk starts with: one id and time per request."""
    return {
        "id": prefix + secrets.token_hex(12),
        "object": kind,
        "created": int(time.time()),
        "model": target.name,
        "system_fingerprint": _FINGERPRINT,
    }


def _answer(head: dict[str, Any], choice: dict[str, Any], final: dict[str, Any]) -> Response:
    """A non-streamed response: its one choice, the usage, and Hearth's extras."""
    return JSONResponse(
        {**head, "choices": [choice], "usage": convert.usage(final), "hearth": hearth_extras(final)}
    )


def _last_chunks(
    head: dict[str, Any], choice: dict[str, Any], final: dict[str, Any], usage: bool
) -> Iterator[dict[str, Any]]:
    """The chunks that end a stream: the last choice (with its finish reason) and Hearth's
    extras, then, when the client asked for it (`stream_options.include_usage`), the usage."""
    yield {**head, "choices": [choice], "hearth": hearth_extras(final)}
    if usage:
        yield {**head, "choices": [], "usage": convert.usage(final)}


async def _parsed(gen: Generation, parser: OutputParser, one_call: bool) -> AsyncIterator[Piece]:
    """The pieces of a chat reply, with at most one tool call when `one_call`
    (parallel_tool_calls: false)."""
    async for p in pieces(gen, parser):
        if one_call and len(p.tool_calls) > 1:
            p.tool_calls = p.tool_calls[:1]
        yield p


@router.post("/v1/chat/completions", summary="OpenAI chat completions")
async def chat_completions(body: OAChatRequest, request: Request) -> Response:
    svc = service_of(request)
    convert.check_chat(body)
    target = await svc.target(body.model)
    target.require("completion", "chat")
    tools = [t.model_dump(exclude_none=True) for t in body.tools or []]
    tools, forced = convert.tool_choice(body.tool_choice, tools)
    fmt = convert.output_format(body.response_format, forced)
    if tools:
        target.require("tools", "tools")
    effort = body.reasoning_effort
    think = think_flag(target, None if effort is None else effort != "none")
    messages = [convert.message(m) for m in body.messages]
    prompt, images = chat_prompt(svc, target, messages, tools, think, effort)
    top = (body.top_logprobs or 0) if body.logprobs else None
    opts = convert.options(body, body.max_completion_tokens or body.max_tokens)
    gen = await _start(svc, target, body, opts, prompt, images, fmt, top)
    one_call = body.parallel_tool_calls is False
    parser = target.output_parser(think, tools, prompt, one_call)
    items = _parsed(gen, parser, one_call)
    head = _head("chatcmpl-", "chat.completion.chunk", target)
    if body.stream:
        usage = bool(body.stream_options and body.stream_options.include_usage)
        return sse(_chat_chunks(items, head, usage, top is not None), gen.close)
    text, thinking, logprobs = [], [], []
    async for p in items:
        text.append(p.content)
        thinking.append(p.thinking)
        logprobs.extend(p.logprobs or [])
        if p.final is not None:
            message: dict[str, Any] = {"role": "assistant", "content": "".join(text)}
            if any(thinking):
                message.update(_reasoning("".join(thinking)))
            if p.tool_calls:
                message["tool_calls"] = convert.tool_calls(p.tool_calls)
            choice = {
                "index": 0,
                "message": message,
                "finish_reason": convert.finish(p.final, p.tool_calls),
                "logprobs": {"content": logprobs} if top is not None else None,
            }
            return _answer({**head, "object": "chat.completion"}, choice, p.final)
    raise APIError(500, "the response ended early")


def _reasoning(thinking: str) -> dict[str, str]:
    """Thinking under both names clients read (see the module)."""
    return {"reasoning_content": thinking, "reasoning": thinking}


async def _chat_chunks(
    items: AsyncIterator[Piece], head: dict[str, Any], usage: bool, logprobs: bool
) -> AsyncIterator[dict[str, Any]]:
    async for p in items:
        delta: dict[str, Any] = {"role": "assistant", "content": p.content}
        if p.thinking:
            delta.update(_reasoning(p.thinking))
        if p.tool_calls:
            delta["tool_calls"] = convert.tool_calls(p.tool_calls)
        choice: dict[str, Any] = {"index": 0, "delta": delta, "finish_reason": None}
        if logprobs:
            choice["logprobs"] = {"content": p.logprobs or []}
        if p.final is None:
            if p.content or p.thinking or p.logprobs:
                yield {**head, "choices": [choice]}
            continue
        choice["finish_reason"] = convert.finish(p.final, p.tool_calls)
        for chunk in _last_chunks(head, choice, p.final, usage):
            yield chunk


@router.post("/v1/completions", summary="OpenAI text completions")
async def completions(body: OACompletionRequest, request: Request) -> Response:
    svc = service_of(request)
    convert.check_sampling(body)
    if body.echo:
        raise APIError(400, "echo is not supported")
    if body.best_of is not None and body.best_of > 1:
        raise APIError(400, "best_of > 1 is not supported")
    prompt = body.prompt
    if isinstance(prompt, list):
        if len(prompt) != 1 or not isinstance(prompt[0], str):
            raise APIError(
                400,
                "give the prompt as one string (token ids and batches of "
                "prompts are not supported)",
            )
        prompt = prompt[0]
    target = await svc.target(body.model)
    target.require("completion", "completions")
    if body.suffix:
        target.require("insert", "insert (suffix)")
        prompt = render(
            target.template,
            [{"role": "user", "content": prompt}],
            target.info.bos_text,
            target.info.eos_text,
            prompt=prompt,
            suffix=body.suffix,
        )
    opts = convert.options(body, body.max_tokens)
    top = body.logprobs
    gen = await _start(svc, target, body, opts, prompt, [], None, top)
    head = _head("cmpl-", "text_completion", target)
    parser = OutputParser()
    if body.stream:
        usage = bool(body.stream_options and body.stream_options.include_usage)
        return sse(_completion_chunks(gen, parser, head, usage, top is not None), gen.close)
    text, logprobs = [], []
    async for p in pieces(gen, parser):
        text.append(p.content)
        logprobs.extend(p.logprobs or [])
        if p.final is not None:
            choice = {
                "text": "".join(text),
                "index": 0,
                "logprobs": convert.legacy_logprobs(logprobs, 0) if top is not None else None,
                "finish_reason": convert.finish(p.final, []),
            }
            return _answer(head, choice, p.final)
    raise APIError(500, "the response ended early")


async def _completion_chunks(
    gen: Generation, parser: OutputParser, head: dict[str, Any], usage: bool, logprobs: bool
) -> AsyncIterator[dict[str, Any]]:
    offset = 0
    async for p in pieces(gen, parser):
        choice: dict[str, Any] = {
            "text": p.content,
            "index": 0,
            "finish_reason": None,
            "logprobs": None,
        }
        if logprobs:
            choice["logprobs"] = convert.legacy_logprobs(p.logprobs or [], offset)
        offset += len(p.content)
        if p.final is None:
            if p.content or p.logprobs:
                yield {**head, "choices": [choice]}
            continue
        choice["finish_reason"] = convert.finish(p.final, [])
        for chunk in _last_chunks(head, choice, p.final, usage):
            yield chunk


@router.post("/v1/embeddings", summary="OpenAI embeddings")
async def embeddings(body: OAEmbeddingRequest, request: Request) -> dict[str, Any]:
    svc = service_of(request)
    texts = [body.input] if isinstance(body.input, str) else body.input
    if not texts or not all(isinstance(t, str) for t in texts):
        raise APIError(
            400, "input must be a string or a list of strings (token ids are not supported)"
        )
    if any(not t for t in texts):
        raise APIError(400, "input must not be empty")
    target = await svc.target(body.model)
    vectors, count, _ = await embed_texts(
        svc, target, [str(t) for t in texts], True, body.options, svc.keep_alive(body.keep_alive)
    )
    data = []
    for i, v in enumerate(vectors):
        vec = normalize(v, body.dimensions)
        value: Any = vec
        if body.encoding_format == "base64":
            value = base64.b64encode(struct.pack(f"<{len(vec)}f", *vec)).decode()
        data.append({"object": "embedding", "embedding": value, "index": i})
    return {
        "object": "list",
        "data": data,
        "model": target.name,
        "usage": {"prompt_tokens": count, "total_tokens": count},
    }


def _model_object(record: ModelRecord) -> dict[str, Any]:
    return {
        "id": record.name.display,
        "object": "model",
        "created": int(record.modified),
        "owned_by": record.name.namespace,
    }


@router.get("/v1/models", summary="OpenAI model list")
async def models(request: Request) -> dict[str, Any]:
    records = service_of(request).store.list()
    return {"object": "list", "data": [_model_object(r) for r in records]}


@router.get("/v1/models/{model:path}", summary="One model (OpenAI format)")
async def model(model: str, request: Request) -> dict[str, Any]:
    try:
        return _model_object(service_of(request).store.resolve(model))
    except ModelNotFound:
        raise APIError(404, f"The model '{model}' does not exist") from None
