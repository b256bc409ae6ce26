"""The runner protocol: how the service talks to a `hearth runner` subprocess.

One runner process serves one loaded model; a native crash (a ggml abort, running out of
memory) ends only that process. This module is the whole contract between the two sides.

Starting
--------
The service starts::

    python -m hearth runner --model PATH [--num-ctx N] [--parallel P] [--num-batch B]
        [--threads T] [--flash-attention] [--kv-type f16|q8_0|q4_0] [--memory-limit BYTES]
        [--projector PATH] [--layout JSON] [--engine hearth|llamacpp]

`--engine` picks the forward engine under the same protocol: Hearth's own (default) or
llama.cpp's (llama-cpp-python; for architectures no Hearth plugin registers). The service
decides which (see hearth.server.store.engines); `ready`'s `info.engine` says which runs.

with the environment variable ``HEARTH_RUNNER_TOKEN`` set to a random secret. The runner binds
127.0.0.1 on a free port and writes JSON lines to its stdout (and nothing else there):

* ``{"event": "listening", "port": 43817}`` first, as soon as requests can be accepted;
* ``{"event": "progress", "fraction": 0.42}`` while the weights load;
* ``{"event": "ready", "memory": {...}, "info": {...}}`` once the model is loaded, the KV cache
  allocated and the worst-case graphs reserved; or
* ``{"event": "error", "message": "..."}`` followed by exit status 1 when the model cannot be
  loaded (damaged file, unknown architecture, does not fit in memory: the message says so in a
  sentence, with the numbers).

Logs go to stderr.

Requests
--------
HTTP/1.1 on that port, JSON bodies, header ``Authorization: Bearer <token>`` (401 without it).
Streaming responses are NDJSON (one JSON object per line) and end when the connection closes.
Closing a streaming response early cancels the request; the runner frees its sequence.

``GET /health`` -> ``{"status": "loading"|"ready"|"error", "progress": float, "error": str|null}``

``GET /info`` -> ``{"architecture", "context_length", "num_ctx", "parallel", "vocab_size",
"memory": {"weights", "cache", "graph", "total"}, "devices": {"CPU": {"weights", "cache",
"graph"}, "RPC0": {...}}, "capabilities": [...] }`` (`devices`: bytes per device of the
layout the runner was started with, `--layout`).

``POST /completion`` with a `CompletionRequest` body streams `CompletionChunk` lines, then one
`CompletionDone` line; if the request fails at any point the last line is
``{"error": "sentence"}`` instead (HTTP status stays 200 once streaming has begun; a request
that is malformed from the start gets 400 with ``{"error": ...}``).

``POST /embedding`` with ``{"input": str | [int], "truncate": bool}`` ->
``{"embedding": [float], "prompt_eval_count": int}`` (400 ``{"error"}`` when too long and
truncate is false).

``POST /tokenize`` ``{"content": str, "add_special": bool, "parse_special": bool}`` ->
``{"tokens": [int]}``; ``POST /detokenize`` ``{"tokens": [int]}`` -> ``{"content": str}``.

Prompt caching, context shift and truncation happen in the runner; the final line reports what
happened (`truncated`, `shifted`, `prompt_cached`) so the service can tell its client.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from enum import StrEnum
from typing import Any

__all__ = [
    "TOKEN_ENV",
    "ENGINES",
    "EngineKind",
    "CompletionRequest",
    "CompletionChunk",
    "CompletionDone",
    "TokenLogprob",
    "RunnerOptions",
    "from_dict",
]

TOKEN_ENV = "HEARTH_RUNNER_TOKEN"


class EngineKind(StrEnum):
    """The runner's forward engines (`--engine`; the service's engine choice names them)."""

    HEARTH = "hearth"  # Hearth's own, with an architecture plugin
    LLAMACPP = "llamacpp"  # llama.cpp through llama-cpp-python, for every other GGUF


ENGINES = tuple(EngineKind)


@dataclass(frozen=True, kw_only=True)
class RunnerOptions:
    """How a runner serves its model: the command-line options above, with their defaults."""

    num_ctx: int = 4096
    parallel: int = 1
    num_batch: int = 512
    threads: int | None = None  # None = physical cores
    flash_attention: bool = False
    kv_type: str = "f16"  # f16 | q8_0 | q4_0 (the last two need flash attention)
    memory_limit: int | None = None  # bytes; a model needing more fails at load
    projector: str | None = None  # a vision projector GGUF beside the model (mmproj-*.gguf)
    engine: str = EngineKind.HEARTH  # an EngineKind
    # Where layers go: the service's layout as JSON, {"gpus": [{"device": "CUDA0" | "RPC0",
    # "layers": [0, 1, ...]}], "projector": device | null} (layer `blocks` is the output
    # layer); None: everything on the CPU. RPC devices come from HEARTH_RPC_SERVERS.
    layout: str | None = None

    def args(self) -> list[str]:
        """These options as `hearth runner` arguments."""
        out = ["--num-ctx", str(self.num_ctx), "--parallel", str(self.parallel)]
        out += ["--num-batch", str(self.num_batch), "--kv-type", self.kv_type]
        if self.threads:
            out += ["--threads", str(self.threads)]
        if self.flash_attention:
            out.append("--flash-attention")
        if self.memory_limit:
            out += ["--memory-limit", str(self.memory_limit)]
        if self.projector:
            out += ["--projector", self.projector]
        if self.engine != "hearth":
            out += ["--engine", self.engine]
        if self.layout:
            out += ["--layout", self.layout]
        return out


@dataclass
class CompletionRequest:
    """One generation. Give `prompt` (text: special tokens are parsed, BOS is added per the
    file) or `tokens` (ids, used as they are). `options` uses Ollama's names: temperature,
    top_k, top_p, min_p, seed, repeat_penalty, repeat_last_n, presence_penalty,
    frequency_penalty, num_predict, num_keep, stop."""

    prompt: str | None = None
    tokens: list[int] | None = None
    images: list[str] = field(default_factory=list)  # base64, referenced as [img-N] in prompt
    options: dict[str, Any] = field(default_factory=dict)
    format: str | dict[str, Any] | None = None  # "json" or a JSON Schema: constrained output
    logprobs: bool = False
    top_logprobs: int = 0  # 0..20 alternatives per token
    truncate: bool = True  # prompt longer than num_ctx: keep num_keep + the tail (else error)
    shift: bool = True  # context full while generating: discard half after num_keep (else stop)
    cache_prompt: bool = True


@dataclass
class TokenLogprob:
    token: str
    logprob: float
    bytes: list[int]
    top_logprobs: list[dict[str, Any]] = field(default_factory=list)


@dataclass
class CompletionChunk:
    content: str
    logprobs: list[TokenLogprob] | None = None


@dataclass
class CompletionDone:
    done: bool = True
    done_reason: str = "stop"  # "stop" (end of turn or a stop string) | "length"
    prompt_eval_count: int = 0  # prompt tokens actually evaluated (cached ones excluded)
    prompt_cached: int = 0  # prompt tokens reused from the cache
    prompt_eval_duration: int = 0  # nanoseconds
    eval_count: int = 0
    eval_duration: int = 0  # nanoseconds
    truncated: bool = False  # the prompt was cut to fit num_ctx
    shifted: bool = False  # the context was shifted (old tokens discarded) while generating
    context: list[int] = field(default_factory=list)  # prompt + generated ids (Ollama's)


def to_dict(obj: Any) -> dict[str, Any]:
    return asdict(obj)


def from_dict(cls: type, data: dict[str, Any]) -> Any:
    """Build a protocol dataclass from a dict, ignoring unknown keys (forward compatible)."""
    names = {f.name for f in fields(cls)}
    return cls(**{k: v for k, v in data.items() if k in names})
