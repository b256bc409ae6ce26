"""What the Ollama and OpenAI routes share: the service behind a request, the chat prompt and
its images, starting a completion, embeddings, thinking switches and Hearth's extra
final-record fields. Errors are
the service's own (hearth.server.errors); api/shared/errors.py turns them into status codes."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from fastapi import Request

from ....runner.protocol import CompletionRequest
from ...errors import RequestError
from ...prompting.prompts import conversation, render
from ...request_types import ChatMessage, Options
from ...scheduling.runner_process import RunnerError
from ...service import Generation, Service, Target

__all__ = [
    "chat_prompt",
    "embed_texts",
    "generate",
    "hearth_extras",
    "normalize",
    "service_of",
    "think_flag",
    "think_level",
]


def service_of(request: Request) -> Service:
    return request.app.state.service  # type: ignore[no-any-return]


def hearth_extras(final: dict[str, Any]) -> dict[str, Any]:
    cached = int(final.get("prompt_cached", 0))
    return {
        "prompt_tokens": cached + int(final.get("prompt_eval_count", 0)),
        "prompt_cached": cached,
        "truncated": bool(final.get("truncated", False)),
        "shifted": bool(final.get("shifted", False)),
        # speculative decoding: tokens drafted, and of those accepted (each saved a pass)
        "drafted": int(final.get("drafted", 0)),
        "accepted": int(final.get("accepted", 0)),
        # the context length the prompt was fitted to (the service's decision, so that a
        # client never has to recompute it: a Modelfile's num_ctx, its default, a cap)
        "num_ctx": int(final.get("num_ctx", 0)),
    }


def think_flag(target: Target, think: bool | str | None) -> bool | None:
    if think is None:
        return None
    if think and "thinking" not in target.capabilities:
        raise RequestError(f"{target.name} does not support thinking")
    return bool(think)


def think_level(think: bool | str | None) -> dict[str, Any]:
    """A thinking level ("low", "high", ...) as the template variable `reasoning_effort` (the
    Hugging Face name, read by e.g. gpt-oss's template); nothing for a plain on/off."""
    return {"reasoning_effort": think} if isinstance(think, str) and think else {}


def chat_prompt(
    svc: Service,
    target: Target,
    messages: Sequence[ChatMessage],
    tools: list[dict[str, Any]],
    think: bool | None,
    level: str | None = None,
) -> tuple[str, list[str]]:
    """The prompt text for a chat and the checked images it refers to (by `[img-N]` tags).

    Shared by /api/chat and /v1/chat/completions: the model's system message and preset
    messages are added (`prompts.conversation`), the images are checked (`Service.images`, which
    raises 400 on a bad one), a model without vision refuses images (400), and the model's
    template is rendered with `tools` (none when the list is empty), `think` and, while
    thinking, its `level` (see `think_level`).
    """
    conv, raw_images = conversation(messages, target.system, target.preset)
    images = svc.images(raw_images)
    if images:
        target.require("vision", "images")
    prompt = render(
        target.template,
        conv,
        target.info.bos_text,
        target.info.eos_text,
        tools=tools or None,
        think=think,
        **(think_level(level) if think else {}),
    )
    return prompt, images


async def generate(
    svc: Service,
    target: Target,
    options: Options,
    prompt: str,
    images: list[str],
    fmt: str | dict[str, Any] | None,
    keep_alive: float | str | None,
    top_logprobs: int | None = None,
) -> Generation:
    """Start a completion of `prompt` with the request's options over the model's (logprobs
    when `top_logprobs` is not None, with that many alternatives)."""
    settings = svc.settings(target, options)
    req = CompletionRequest(
        prompt=prompt,
        images=images,
        options=settings.sampling,
        format=fmt,
        logprobs=top_logprobs is not None,
        top_logprobs=top_logprobs or 0,
    )
    return await svc.generate(target, settings, req, svc.keep_alive(keep_alive))


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
        raise RequestError(f"{target.name}: {target.info.problem}")
    lease = await svc.lease(target, svc.settings(target, options), keep_alive)
    vectors, count = [], 0
    try:
        for text in texts:
            out = await lease.runner.embedding(text, truncate)
            vectors.append([float(x) for x in out["embedding"]])
            count += int(out.get("prompt_eval_count", 0))
    except RunnerError as e:
        raise svc.runner_failure(lease, e) from None
    finally:
        lease.release()
    return vectors, count, lease.load_duration
