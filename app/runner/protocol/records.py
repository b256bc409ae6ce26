"""The records of a completion and of a loaded runner: what `POST /completion` takes
(`CompletionRequest`, its `CompletionOptions`) and streams back (`CompletionChunk` lines with
their `TokenLogprob`s, then a `CompletionDone` or a `CompletionError`; `completion_line` reads
one), and what `GET /info` and the `ready` event report (`RunnerInfo`, its `RunnerMemory`).
Part of the runner protocol (see `hearth.runner.protocol`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ...options import GenerationOptions
from .runner_options import EngineKind
from .wire import from_wire

__all__ = [
    "CompletionChunk",
    "CompletionDone",
    "CompletionError",
    "CompletionOptions",
    "CompletionRequest",
    "RunnerInfo",
    "RunnerMemory",
    "TokenLogprob",
    "completion_line",
]


@dataclass(frozen=True, kw_only=True)
class CompletionOptions(GenerationOptions):
    """A completion's sampling and length options, with Ollama's names: everything the runner
    honours per request. Its fields, their defaults and ranges are declared once, in
    hearth.options.GenerationOptions; None (left out of the JSON) means the default."""


@dataclass(kw_only=True)
class CompletionRequest:
    """One generation. Give `prompt` (text: special tokens are parsed, BOS is added per the
    file) or `tokens` (ids, used as they are)."""

    prompt: str | None = None
    tokens: list[int] | None = None
    images: list[str] = field(default_factory=list)  # base64, referenced as [img-N] in prompt
    options: CompletionOptions = field(default_factory=CompletionOptions)
    format: str | dict[str, Any] | None = None  # "json" or a JSON Schema: constrained output
    logprobs: bool = False
    top_logprobs: int = 0  # 0..20 alternatives per token
    truncate: bool = True  # prompt longer than num_ctx: keep num_keep + the tail (else error)
    shift: bool = True  # context full while generating: discard half after num_keep (else stop)
    cache_prompt: bool = True
    # special tokens (by text) the reply shows although special tokens are hidden: the tool-call
    # and thinking markers the service parses (llama.cpp's preserved tokens)
    show_tokens: list[str] = field(default_factory=list)


@dataclass(frozen=True, kw_only=True)
class TokenLogprob:
    """One token's log-probability (Ollama's shape): its text, its bytes (the text may be part
    of a UTF-8 character), and with `top_logprobs` the most likely alternatives."""

    token: str
    logprob: float
    bytes: list[int]
    top_logprobs: list[TokenLogprob] | None = None  # None: not asked for (left out)


@dataclass(frozen=True, kw_only=True)
class CompletionChunk:
    """Generated text (one token's, or several sent together), with its tokens' logprobs
    when the request asked for them (else None, left out)."""

    content: str
    logprobs: list[TokenLogprob] | None = None


@dataclass(frozen=True, kw_only=True)
class CompletionDone:
    """The last line of a completion that finished."""

    done: bool = True
    done_reason: str = "stop"  # "stop" (end of turn or a stop string) | "length"
    stop: str | None = None  # the stop string that ended the output (None: it did not)
    prompt_eval_count: int = 0  # prompt tokens actually evaluated (cached ones excluded)
    prompt_cached: int = 0  # prompt tokens reused from the cache
    prompt_eval_duration: int = 0  # nanoseconds
    eval_count: int = 0
    eval_duration: int = 0  # nanoseconds
    truncated: bool = False  # the prompt was cut to fit num_ctx
    shifted: bool = False  # the context was shifted (old tokens discarded) while generating
    drafted: int = 0  # speculative decoding: tokens drafted and checked
    accepted: int = 0  # of those, the ones accepted (each saved a pass)
    # Why the runner switched drafting off, once it has (drafts did not pay: measured pass
    # costs, runner/draft_cost.py); the service's copy of `RunnerInfo.speculation` follows.
    speculation_off: str | None = None
    context: list[int] = field(default_factory=list)  # prompt + generated ids (Ollama's)


@dataclass(frozen=True, kw_only=True)
class CompletionError:
    """The last line of a completion that failed, and the body of a 4xx answer."""

    error: str  # a sentence for the user


@dataclass(frozen=True, kw_only=True)
class RunnerMemory:
    """Bytes the loaded model takes: weights, KV cache, graph (compute) buffers, and their sum."""

    weights: int
    cache: int
    graph: int
    total: int


@dataclass(frozen=True, kw_only=True)
class RunnerInfo:
    """`GET /info`, and `info` in the `ready` event: what the runner loaded and measured."""

    architecture: str
    engine: EngineKind
    context_length: int  # the model's trained context (0: the file does not say)
    num_ctx: int
    parallel: int
    vocab_size: int
    memory: RunnerMemory
    # Bytes per device and part ({"CPU": {"weights", "cache", "graph"}, "CUDA0": ...}) of
    # the layout the runner was started with (`--layout`).
    devices: dict[str, dict[str, int]] = field(default_factory=dict)
    # Whether "same tokens under any load" holds, and why (engine/ml/invariance.py; None
    # on llama.cpp's engine).
    batch_invariance: dict[str, Any] | None = None
    # Speculative decoding: {"enabled": bool, "reason": sentence when it is off}.
    speculation: dict[str, Any] | None = None


def completion_line(data: Any) -> CompletionChunk | CompletionDone | CompletionError:
    """One line of a completion's stream: an error (it has `error`), the last line (it has
    `done`) or a chunk."""
    if isinstance(data, dict) and "error" in data:
        return from_wire(CompletionError, data)
    if isinstance(data, dict) and "done" in data:
        return from_wire(CompletionDone, data)
    return from_wire(CompletionChunk, data)
