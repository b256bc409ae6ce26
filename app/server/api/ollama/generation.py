"""Ollama's generation endpoints: /api/generate, /api/chat, /api/embed, /api/embeddings.

Field names, defaults and streaming (NDJSON, on by default; a mid-stream failure is a last
`{"error": ...}` line) follow Ollama. Differences, all additive: `prompt_eval_count` counts
the prompt tokens actually evaluated (a cached prefix is not), and the final object carries
`"hearth": {"prompt_tokens", "prompt_cached", "truncated", "shifted", "drafted", "accepted",
"num_ctx"}` so a client can tell that the prompt was cut to fit `num_ctx`, the context was
shifted while generating, how many drafted tokens speculative decoding checked and accepted, and
the context length the service fitted the prompt to (its own decision: the request's num_ctx,
else the model's Modelfile value, else the service's default, at most the trained length; the
same as /api/show's `hearth.num_ctx` for a request that sets none).
"""

from __future__ import annotations

import secrets
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response

from ....runner.protocol import CompletionRequest
from ...prompting.outputs import OutputParser, ParsedCall
from ...prompting.prompts import render, with_images
from ...scheduling.runner_process import RunnerError
from ...service import Generation, GenerationSettings, Piece, Service, Target, pieces
from ..shared.common import (
    chat_prompt,
    embed_texts,
    hearth_extras,
    normalize,
    service_of,
    think_flag,
    think_level,
)
from ..shared.errors import APIError
from ..shared.streams import ndjson, now_iso
from .schemas import (
    ChatRequest,
    EmbeddingsRequest,
    EmbedRequest,
    Format,
    GenerateRequest,
)

__all__ = ["router", "final_stats", "run_format", "tool_calls_json"]

router = APIRouter(tags=["ollama"])


def final_stats(final: dict[str, Any]) -> dict[str, Any]:
    return {
        "done_reason": final.get("done_reason") or "stop",
        "total_duration": int(final.get("total_duration", 0)),
        "load_duration": int(final.get("load_duration", 0)),
        "prompt_eval_count": int(final.get("prompt_eval_count", 0)),
        "prompt_eval_duration": int(final.get("prompt_eval_duration", 0)),
        "eval_count": int(final.get("eval_count", 0)),
        "eval_duration": int(final.get("eval_duration", 0)),
    }


def run_format(fmt: Format) -> str | dict[str, Any] | None:
    if fmt in (None, ""):
        return None
    return fmt


def tool_calls_json(calls: list[ParsedCall]) -> list[dict[str, Any]]:
    return [
        {
            "id": "call_" + secrets.token_hex(6),
            "function": {"index": i, "name": c.name, "arguments": c.arguments},
        }
        for i, c in enumerate(calls)
    ]


async def _load_or_unload(
    svc: Service, target: Target, body: GenerateRequest | ChatRequest, keep_alive: float
) -> dict[str, Any]:
    """An empty prompt loads the model (or, with keep_alive 0, unloads it)."""
    if keep_alive == 0:
        await svc.scheduler.unload(target.key)
        reason = "unload"
    else:
        lease = await svc.lease(target, svc.settings(target, body.options), keep_alive)
        lease.release()
        reason = "load"
    return {"model": target.name, "created_at": now_iso(), "done": True, "done_reason": reason}


def _request(
    settings: GenerationSettings,
    body: GenerateRequest | ChatRequest,
    prompt: str,
    images: list[str],
) -> CompletionRequest:
    return CompletionRequest(
        prompt=prompt,
        images=images,
        options=settings.sampling,
        format=run_format(body.format),
        logprobs=body.logprobs,
        top_logprobs=body.top_logprobs if body.logprobs else 0,
        truncate=body.truncate,
        shift=body.shift,
    )


@router.post("/api/generate", summary="Generate a completion for a prompt")
async def generate(body: GenerateRequest, request: Request) -> Response:
    svc = service_of(request)
    target = await svc.target(body.model)
    keep_alive = svc.keep_alive(body.keep_alive)
    images = svc.images(body.images)
    if not body.prompt and not images and not body.suffix and not body.context:
        out = await _load_or_unload(svc, target, body, keep_alive)
        return JSONResponse({**out, "response": ""})
    target.require("completion", "generation")
    if images:
        target.require("vision", "images")
    think = think_flag(target, body.think)
    # A raw prompt places its images itself with [img-N] (without any, the runner puts them
    # first); otherwise they go before the text, as the reference chat templates write it.
    if body.raw:
        prompt = body.prompt
    else:
        text = with_images(body.prompt, 0, len(images))
        if body.suffix:
            target.require("insert", "insert (suffix)")
        system = body.system if body.system is not None else target.system
        messages = ([{"role": "system", "content": system}] if system else []) + [
            {"role": "user", "content": text}
        ]
        prompt = render(
            body.template or target.template,
            messages,
            target.info.bos_text,
            target.info.eos_text,
            think=think,
            **(think_level(body.think) if think else {}),
            prompt=body.prompt,
            system=system or "",
            suffix=body.suffix or "",
        )
    settings = svc.settings(target, body.options)
    req = _request(settings, body, prompt, images)
    if body.context:
        req = await _with_context(svc, target, settings, req, body.context, keep_alive)
    gen = await svc.generate(target, settings, req, keep_alive)
    parser = target.output_parser(think, (), prompt)
    items = _generate_items(gen, parser, target, body, prompt)
    if body.stream:
        return ndjson(items, gen.close)
    return JSONResponse(await _collect(items, chat=False))


async def _with_context(
    svc: Service, target: Target, settings: GenerationSettings, req: CompletionRequest,
    context: list[int], keep_alive: float,
) -> CompletionRequest:  # fmt: skip
    """Ollama's deprecated `context`: earlier token ids go before this prompt."""
    lease = await svc.lease(target, settings, keep_alive)
    try:
        prompt = (req.prompt or "").removeprefix(target.info.bos_text)
        tokens = list(context) + await lease.runner.tokenize(prompt, add_special=False)
    except RunnerError as e:
        svc.scheduler.runner_failed(lease.entry)
        raise APIError(400, str(e)) from None
    finally:
        lease.release()
    req.prompt, req.tokens = None, tokens
    return req


def _generate_fields(p: Piece) -> dict[str, Any]:
    fields: dict[str, Any] = {"response": p.content}
    if p.thinking:
        fields["thinking"] = p.thinking
    return fields


def _chat_fields(p: Piece) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": p.content}
    if p.thinking:
        message["thinking"] = p.thinking
    if p.tool_calls:
        message["tool_calls"] = tool_calls_json(p.tool_calls)
    return {"message": message}


async def _items(
    gen: Generation,
    parser: OutputParser,
    target: Target,
    logprobs: bool,
    fields: Callable[[Piece], dict[str, Any]],
    on_done: Callable[[str], Awaitable[dict[str, Any]]] | None = None,
) -> AsyncIterator[dict[str, Any]]:
    """The NDJSON objects of /api/generate and /api/chat, which differ only in `fields`.

    Each is `{"model", "created_at", **fields(piece)}`. A piece before the last carries its
    logprobs when `logprobs` was asked for, and is sent only if it has content, thinking or
    logprobs (a parser holding text back yields empty pieces). The last adds `done`, the stats,
    what `on_done(all content)` returns (generate's `context`), then `hearth`.
    """
    content = ""
    async for p in pieces(gen, parser):
        content += p.content
        chunk: dict[str, Any] = {"model": target.name, "created_at": now_iso(), **fields(p)}
        if p.final is None:
            if logprobs and p.logprobs:
                chunk["logprobs"] = p.logprobs
            if p.content or p.thinking or "logprobs" in chunk:
                yield {**chunk, "done": False}
            continue
        chunk["done"] = True
        chunk.update(final_stats(p.final))
        if on_done is not None:
            chunk.update(await on_done(content))
        chunk["hearth"] = hearth_extras(p.final)
        yield chunk


def _generate_items(
    gen: Generation, parser: OutputParser, target: Target, body: GenerateRequest, prompt: str
) -> AsyncIterator[dict[str, Any]]:
    async def context(response: str) -> dict[str, Any]:
        # Ollama's deprecated `context`: the token ids of the prompt and the reply, for the
        # next request to continue from; best effort, as the answer itself is complete.
        try:
            return {"context": await gen.lease.runner.tokenize(prompt + response)}
        except RunnerError:
            return {"context": []}

    on_done = None if body.raw else context
    return _items(gen, parser, target, bool(body.logprobs), _generate_fields, on_done)


async def _collect(items: AsyncIterator[dict[str, Any]], chat: bool) -> dict[str, Any]:
    """The one object a non-streaming request answers with: the last item, its text (`response`,
    or chat's `message.content`), thinking and logprobs joined over all items."""
    text_key = "content" if chat else "response"
    text, thinking, logprobs = [], [], []
    async for item in items:
        part = item["message"] if chat else item
        text.append(part.get(text_key, ""))
        thinking.append(part.get("thinking", ""))
        logprobs.extend(item.get("logprobs", []))
        if item.get("done"):
            part = {**part, text_key: "".join(text)}
            if any(thinking):
                part["thinking"] = "".join(thinking)
            out = {**item, "message": part} if chat else part
            if logprobs:
                out["logprobs"] = logprobs
            return out
    raise APIError(500, "the response ended early")


@router.post("/api/chat", summary="Generate the next message in a chat")
async def chat(body: ChatRequest, request: Request) -> Response:
    svc = service_of(request)
    target = await svc.target(body.model)
    keep_alive = svc.keep_alive(body.keep_alive)
    if not body.messages:
        out = await _load_or_unload(svc, target, body, keep_alive)
        return JSONResponse({**out, "message": {"role": "assistant", "content": ""}})
    target.require("completion", "chat")
    tools = [t.model_dump(exclude_none=True) for t in body.tools or []]
    if tools:
        target.require("tools", "tools")
    think = think_flag(target, body.think)
    level = body.think if isinstance(body.think, str) else None
    prompt, images = chat_prompt(svc, target, body.messages, tools, think, level)
    settings = svc.settings(target, body.options)
    gen = await svc.generate(target, settings, _request(settings, body, prompt, images), keep_alive)
    parser = target.output_parser(think, tools, prompt)  # Ollama's API: parallel calls allowed
    items = _items(gen, parser, target, bool(body.logprobs), _chat_fields)
    if body.stream:
        return ndjson(items, gen.close)
    return JSONResponse(await _collect(items, chat=True))


@router.post("/api/embed", summary="Embeddings for one or more inputs")
async def embed(body: EmbedRequest, request: Request) -> dict[str, Any]:
    start = time.perf_counter_ns()
    svc = service_of(request)
    target = await svc.target(body.model)
    keep_alive = svc.keep_alive(body.keep_alive)
    texts = [body.input] if isinstance(body.input, str) else list(body.input)
    texts = [t for t in texts if t] if isinstance(body.input, str) else texts
    vectors, count, load = await embed_texts(
        svc, target, texts, body.truncate, body.options, keep_alive
    )
    return {
        "model": target.name,
        "embeddings": [normalize(v, body.dimensions) for v in vectors],
        "total_duration": time.perf_counter_ns() - start,
        "load_duration": load,
        "prompt_eval_count": count,
    }


@router.post("/api/embeddings", summary="Embedding for one prompt (legacy)")
async def embeddings(body: EmbeddingsRequest, request: Request) -> dict[str, Any]:
    svc = service_of(request)
    target = await svc.target(body.model)
    keep_alive = svc.keep_alive(body.keep_alive)
    if not body.prompt:
        return {"embedding": []}
    vectors, _, _ = await embed_texts(svc, target, [body.prompt], True, body.options, keep_alive)
    return {"embedding": vectors[0]}
