"""Ollama's generation endpoints: /api/generate, /api/chat, /api/embed, /api/embeddings.

Field names, defaults and streaming (NDJSON, on by default; a mid-stream failure is a last
`{"error": ...}` line) follow Ollama. Differences, all additive: `prompt_eval_count` counts
the prompt tokens actually evaluated (a cached prefix is not), and the final object carries
`"hearth": {"prompt_tokens", "prompt_cached", "truncated", "shifted"}` so a client can tell
that the prompt was cut to fit `num_ctx` or the context was shifted while generating.
"""

from __future__ import annotations

import math
import secrets
import time
from collections.abc import AsyncIterator
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response

from ..engine.runner.client import RunnerError
from ..engine.runner.protocol import CompletionRequest
from .errors import APIError
from .outputs import OutputParser, ParsedCall
from .prompts import IMAGE_TAG, conversation, render
from .responses import ndjson, now_iso
from .schemas import ChatRequest, EmbeddingsRequest, EmbedRequest, Format, GenerateRequest
from .service import Generation, Service, Settings, Target, pieces

__all__ = ["router", "service_of", "final_stats", "hearth_extras", "think_flag", "run_format"]

router = APIRouter(tags=["ollama"])


def service_of(request: Request) -> Service:
    return request.app.state.service  # type: ignore[no-any-return]


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


def hearth_extras(final: dict[str, Any]) -> dict[str, Any]:
    cached = int(final.get("prompt_cached", 0))
    return {
        "prompt_tokens": cached + int(final.get("prompt_eval_count", 0)),
        "prompt_cached": cached,
        "truncated": bool(final.get("truncated", False)),
        "shifted": bool(final.get("shifted", False)),
    }


def think_flag(target: Target, think: bool | str | None) -> bool | None:
    if think is None:
        return None
    if think and "thinking" not in target.capabilities:
        raise APIError(400, f"{target.name} does not support thinking")
    return bool(think)


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
    settings: Settings, body: GenerateRequest | ChatRequest, prompt: str, images: list[str]
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
    tags = " ".join(IMAGE_TAG.format(i) for i in range(len(images)))
    text = f"{tags} {body.prompt}" if tags else body.prompt
    if body.raw:
        prompt = text
    else:
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
            prompt=body.prompt,
            system=system or "",
            suffix=body.suffix or "",
        )
    settings = svc.settings(target, body.options)
    req = _request(settings, body, prompt, images)
    if body.context:
        req = await _with_context(svc, target, settings, req, body.context, keep_alive)
    gen = await svc.generate(target, settings, req, keep_alive)
    parser = OutputParser(think=bool(think))
    items = _generate_items(gen, parser, target, body, prompt)
    if body.stream:
        return ndjson(items, gen.close)
    return JSONResponse(await _collect_generate(items))


async def _with_context(
    svc: Service, target: Target, settings: Settings, req: CompletionRequest,
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


async def _generate_items(
    gen: Generation, parser: OutputParser, target: Target, body: GenerateRequest, prompt: str
) -> AsyncIterator[dict[str, Any]]:
    response = ""
    async for p in pieces(gen, parser):
        response += p.content
        chunk: dict[str, Any] = {
            "model": target.name,
            "created_at": now_iso(),
            "response": p.content,
        }
        if p.thinking:
            chunk["thinking"] = p.thinking
        if p.final is None:
            if body.logprobs and p.logprobs:
                chunk["logprobs"] = p.logprobs
            if p.content or p.thinking or "logprobs" in chunk:
                yield {**chunk, "done": False}
            continue
        chunk["done"] = True
        chunk.update(final_stats(p.final))
        if not body.raw:
            try:
                chunk["context"] = await gen.lease.runner.tokenize(prompt + response)
            except RunnerError:
                chunk["context"] = []
        chunk["hearth"] = hearth_extras(p.final)
        yield chunk


async def _collect_generate(items: AsyncIterator[dict[str, Any]]) -> dict[str, Any]:
    text, thinking, logprobs = [], [], []
    async for item in items:
        text.append(item.get("response", ""))
        thinking.append(item.get("thinking", ""))
        logprobs.extend(item.get("logprobs", []))
        if item.get("done"):
            out = {**item, "response": "".join(text)}
            if any(thinking):
                out["thinking"] = "".join(thinking)
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
    messages, raw_images = conversation(body.messages, target.system, target.preset)
    images = svc.images(raw_images)
    if images:
        target.require("vision", "images")
    prompt = render(
        target.template,
        messages,
        target.info.bos_text,
        target.info.eos_text,
        tools=tools or None,
        think=think,
    )
    settings = svc.settings(target, body.options)
    gen = await svc.generate(target, settings, _request(settings, body, prompt, images), keep_alive)
    parser = OutputParser(think=bool(think), tools={t["function"]["name"] for t in tools})
    items = _chat_items(gen, parser, target, body)
    if body.stream:
        return ndjson(items, gen.close)
    return JSONResponse(await _collect_chat(items))


async def _chat_items(
    gen: Generation, parser: OutputParser, target: Target, body: ChatRequest
) -> AsyncIterator[dict[str, Any]]:
    async for p in pieces(gen, parser):
        message: dict[str, Any] = {"role": "assistant", "content": p.content}
        if p.thinking:
            message["thinking"] = p.thinking
        if p.tool_calls:
            message["tool_calls"] = tool_calls_json(p.tool_calls)
        chunk: dict[str, Any] = {"model": target.name, "created_at": now_iso(), "message": message}
        if p.final is None:
            if body.logprobs and p.logprobs:
                chunk["logprobs"] = p.logprobs
            if p.content or p.thinking or "logprobs" in chunk:
                yield {**chunk, "done": False}
            continue
        chunk["done"] = True
        chunk.update(final_stats(p.final))
        chunk["hearth"] = hearth_extras(p.final)
        yield chunk


async def _collect_chat(items: AsyncIterator[dict[str, Any]]) -> dict[str, Any]:
    text, thinking, logprobs = [], [], []
    async for item in items:
        message = item["message"]
        text.append(message.get("content", ""))
        thinking.append(message.get("thinking", ""))
        logprobs.extend(item.get("logprobs", []))
        if item.get("done"):
            message = {**message, "content": "".join(text)}
            if any(thinking):
                message["thinking"] = "".join(thinking)
            out = {**item, "message": message}
            if logprobs:
                out["logprobs"] = logprobs
            return out
    raise APIError(500, "the response ended early")


def normalize(vector: list[float], dimensions: int | None = None) -> list[float]:
    """Unit length (as Ollama's /api/embed), after keeping the first `dimensions` values."""
    if dimensions:
        vector = vector[:dimensions]
    norm = math.sqrt(sum(x * x for x in vector))
    return [x / norm for x in vector] if norm > 0 else list(vector)


async def embed_texts(
    svc: Service, target: Target, texts: list[str], truncate: bool, options: Any, keep_alive: float
) -> tuple[list[list[float]], int, int]:
    """Raw embeddings, the prompt tokens evaluated and the load duration (ns)."""
    if not target.info.supported:
        raise APIError(400, f"{target.name}: {target.info.problem}")
    lease = await svc.lease(target, svc.settings(target, options), keep_alive)
    vectors, count = [], 0
    try:
        for text in texts:
            out = await lease.runner.embedding(text, truncate)
            vectors.append([float(x) for x in out["embedding"]])
            count += int(out.get("prompt_eval_count", 0))
    except RunnerError as e:
        dead = not lease.runner.alive
        svc.scheduler.runner_failed(lease.entry)
        raise APIError(500 if dead else 400, str(e)) from None
    finally:
        lease.release()
    return vectors, count, lease.load_duration


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
