"""A completion on a leased runner, and its events as the APIs' pieces.

`Generation` is one completion that `Service.generate` started (its first event already read,
so a failure before the first token raised there): iterate `events()` once for the runner's
chunks, then its `CompletionDone`; a RunnerError from `events()` is a mid-stream failure (the
scheduler is told), and the lease is always released. `pieces` runs those events through an
`OutputParser` into `Piece`s (thinking, content, logprobs, tool calls, the final record as
JSON), stopping the generation where the parser says the turn is over. The routes import these
from `service.py`, which re-exports them.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import AsyncGenerator, AsyncIterator
from dataclasses import dataclass, field
from typing import Any, Protocol

from ..runner.protocol import (
    CompletionChunk,
    CompletionDone,
    CompletionRequest,
    TokenLogprob,
    to_wire,
)
from .prompting.outputs import OutputParser, ParsedCall, PartialCall
from .scheduling.records import Lease
from .scheduling.runner_process import RunnerCrashed, RunnerError
from .scheduling.scheduler import Scheduler

__all__ = ["Generation", "Piece", "pieces"]


class FailureSink(Protocol):
    """Where a generation reports its runner's failures: the `Service` (not imported here,
    which imports this module)."""

    scheduler: Scheduler

    def runner_failure(self, lease: Lease, error: RunnerError) -> Exception: ...


class Generation:
    """One completion on a leased runner. Iterate `events()` once: runner chunks, then the
    final `CompletionDone` (when it comes, `total_duration` is set). A RunnerError raised
    from `events()` is a mid-stream failure; the lease is always released."""

    def __init__(
        self, service: FailureSink, lease: Lease, request: CompletionRequest, started: int
    ) -> None:
        self.service = service
        self.lease = lease
        self.request = request
        self.started = started
        self.total_duration = 0  # nanoseconds from the request to the last line
        self._iter: AsyncIterator[CompletionChunk | CompletionDone] | None = None
        self._first: CompletionChunk | CompletionDone | None = None
        self._closed = False

    async def prime(self) -> None:
        self._iter = aiter(self.lease.runner.completion(self.request))
        try:
            self._first = await anext(self._iter)
        except StopAsyncIteration:
            self._first = None
        except RunnerError as e:
            raise self.service.runner_failure(self.lease, e) from None

    def _failed(self, error: RunnerError) -> None:
        crashed = isinstance(error, RunnerCrashed)
        self.service.scheduler.runner_failed(self.lease.entry, crashed=crashed)

    async def events(self) -> AsyncIterator[CompletionChunk | CompletionDone]:
        assert self._iter is not None
        try:
            item = self._first
            while True:
                if item is None:
                    raise RunnerError("the runner ended the response without finishing it")
                if isinstance(item, CompletionDone):
                    self.total_duration = time.perf_counter_ns() - self.started
                    yield item
                    return
                yield item
                try:
                    item = await anext(self._iter)
                except StopAsyncIteration:
                    item = None
        except RunnerError as e:
            self._failed(e)
            raise
        finally:
            await self.close()

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            if self._iter is not None and hasattr(self._iter, "aclose"):
                with contextlib.suppress(RuntimeError):  # already finished or mid-cancellation
                    await self._iter.aclose()
        finally:
            self.lease.release()


@dataclass
class Piece:
    """One step of a parsed completion: text split into thinking and content, its tokens'
    logprobs as the API shows them; `final` is the runner's `CompletionDone` as JSON, with
    `total_duration` and `load_duration`, on the last step, when `tool_calls` are known.
    `partial_calls`, on the other steps, are the calls begun so far with their arguments' text
    so far (`OutputParser.partial_calls`), for routes that stream arguments as they grow."""

    thinking: str = ""
    content: str = ""
    logprobs: list[dict[str, Any]] | None = None
    tool_calls: list[ParsedCall] = field(default_factory=list)
    final: dict[str, Any] | None = None
    partial_calls: list[PartialCall] = field(default_factory=list)


async def pieces(gen: Generation, parser: OutputParser) -> AsyncIterator[Piece]:
    """The generation's events run through `parser`. A turn that is over before the model
    ends it (`OutputParser.turn_over`: its one call written, or a call repeated) stops the
    generation there and ends with done_reason "stop" (`_cut_short`)."""
    events = aiter(gen.events())
    tokens, first = 0, 0
    try:
        async for event in events:
            if isinstance(event, CompletionDone):
                thinking, content = parser.feed("")  # the parser may settle its state first
                more_thinking, more_content, calls = parser.finish()
                final = _final(gen, event)
                yield Piece(thinking + more_thinking, content + more_content, None, calls, final)
                return
            first = first or time.perf_counter_ns()
            tokens += len(event.logprobs) if event.logprobs else 1
            thinking, content = parser.feed(event.content)
            logprobs = _logprobs_json(event.logprobs)
            yield Piece(thinking, content, logprobs, partial_calls=parser.partial_calls())
            if parser.turn_over:
                final = await _cut_short(gen, tokens, first)
                _, content, calls = parser.finish()
                yield Piece("", content, None, calls, final)
                return
    finally:
        if isinstance(events, AsyncGenerator):
            await events.aclose()


async def _cut_short(gen: Generation, tokens: int, first: int) -> dict[str, Any]:
    """Stop `gen` (its runner stops generating) and make its final record: done_reason
    "stop", the tokens generated as counted from the chunks received, the prompt's tokens as
    the runner tokenizes its text (no cache is counted: the runner's own record is lost)."""
    request = gen.request
    prompt_tokens = len(request.tokens or [])
    if request.prompt:
        with contextlib.suppress(RunnerError, AttributeError):
            prompt_tokens = len(await gen.lease.runner.tokenize(request.prompt))
    await gen.close()  # cancels the runner's generation, releases the lease
    now = time.perf_counter_ns()
    gen.total_duration = now - gen.started
    done = CompletionDone(
        done_reason="stop",
        prompt_eval_count=prompt_tokens,
        prompt_eval_duration=max(0, first - gen.started),
        eval_count=tokens,
        eval_duration=now - first,
    )
    return _final(gen, done)


def _final(gen: Generation, done: CompletionDone) -> dict[str, Any]:
    """The final record as JSON: the runner's, with the request's durations and `num_ctx`,
    the context length the runner that answered holds per sequence (what the prompt was fitted
    to: a request that set none gets the model's Modelfile value or the service's default; one
    served by a runner already loaded with more gets that runner's)."""
    return {
        **to_wire(done),
        "total_duration": gen.total_duration,
        "load_duration": gen.lease.load_duration,
        "num_ctx": gen.lease.entry.spec.options.num_ctx,
    }


def _logprobs_json(logprobs: list[TokenLogprob] | None) -> list[dict[str, Any]] | None:
    """A chunk's logprobs as the APIs show them (Ollama's shape: the runner's)."""
    return None if logprobs is None else [to_wire(lp) for lp in logprobs]
