"""The runner protocol: how the service talks to a `hearth runner` subprocess.

One runner process serves one loaded model; a native crash (a ggml abort, running out of
memory) ends only that process. This module is the whole contract between the two sides: the
runner writes the records below (hearth.runner.sequence, .http, .core) and the service reads
them (hearth.server.scheduling.runner_process, .scheduler, .service); a test checks that every
record here is used by both.

Starting
--------
The service starts::

    python -m hearth runner --model PATH [--num-ctx N] [--parallel P] [--num-batch B]
        [--threads T] [--flash-attention] [--kv-type f16|q8_0|q4_0] [--memory-limit BYTES]
        [--projector PATH] [--layout JSON] [--engine hearth|llamacpp]
        [--draft-model PATH]

(`RunnerOptions.args`: one `--NAME` per `RunnerOptions` field, whose metadata gives its help
and reload rule; `--kv-type` is a `KVCacheType`, `--engine` an `EngineKind`).
`--engine` picks the forward engine under the same protocol: Hearth's own (default) or
llama.cpp's (llama-cpp-python; for architectures no Hearth plugin registers). The service
decides which (see hearth.server.store.engines); `ready`'s `info.engine` says which runs.

with the environment variable ``HEARTH_RUNNER_TOKEN`` set to a random secret. The runner binds
127.0.0.1 on a free port and writes JSON lines to its stdout (and nothing else there):

* ``{"event": "listening", "port": 43817}`` first, as soon as requests can be accepted;
* ``{"event": "progress", "fraction": 0.42}`` while the weights load;
* ``{"event": "ready", "memory": RunnerMemory, "info": RunnerInfo}`` once the model is
  loaded, the KV cache allocated and the worst-case graphs reserved; or
* ``{"event": "error", "message": "..."}`` followed by exit status 1 when the model cannot be
  loaded (damaged file, unknown architecture, does not fit in memory: the message says so in a
  sentence, with the numbers).

Logs go to stderr.

Requests
--------
HTTP/1.1 on that port, JSON bodies, header ``Authorization: Bearer <token>`` (401 without it).
Streaming responses are NDJSON (one JSON object per line) and end when the connection closes.
Closing a response early (or the connection while it waits) cancels the request; the runner
frees its sequence and its slot.

``GET /health`` -> ``{"status": "loading"|"ready"|"error", "progress": float, "error": str|null,
"busy_slots": int, "passes": int}`` (`busy_slots`: slots a sequence holds now; `passes`: the
completion passes run since the model loaded).

``GET /info`` -> `RunnerInfo`: architecture, engine, context_length, num_ctx, parallel,
vocab_size, `memory` (a `RunnerMemory`: weights, cache, graph, total), `devices` (bytes per
device and part of the layout the runner was started with, `--layout`) and
`batch_invariance`.

``POST /completion`` with a `CompletionRequest` body (its `options` a `CompletionOptions`)
streams `CompletionChunk` lines, then one `CompletionDone` line; if the request fails at any
point the last line is a `CompletionError` (``{"error": "sentence"}``) instead (HTTP status
stays 200 once streaming has begun; a request that is malformed from the start gets 400 with
a `CompletionError`).

``POST /embedding`` with ``{"input": str | [int], "truncate": bool}`` ->
``{"embedding": [float], "prompt_eval_count": int}`` (400 ``{"error"}`` when too long and
truncate is false).

``POST /tokenize`` ``{"content": str, "add_special": bool, "parse_special": bool}`` ->
``{"tokens": [int]}``; ``POST /detokenize`` ``{"tokens": [int]}`` -> ``{"content": str}``.

The records travel as JSON objects with their field names (`to_wire`; a field that is None is
left out, so its default applies) and are read strictly (`from_wire`): a field the record does
not have, or a value of the wrong type, is a `ProtocolError` naming it. The runner answers such
a request with 400 and that sentence; the service fails the request with it when a runner's
line breaks the protocol. Nothing unknown is silently ignored: both sides ship together.

Prompt caching, context shift and truncation happen in the runner; the final line reports what
happened (`truncated`, `shifted`, `prompt_cached`) so the service can tell its client.

The protocol's parts: `runner_options.py` (how a runner is started), `records.py` (the
completion and runner records), `wire.py` (JSON both ways, checked). This package is the one
path the service imports of the runner (tests/test_imports.py); its names are gathered here.
"""

from __future__ import annotations

from ...engine.kvcache.types import KVCacheType
from .records import (
    CompletionChunk,
    CompletionDone,
    CompletionError,
    CompletionOptions,
    CompletionRequest,
    RunnerInfo,
    RunnerMemory,
    TokenLogprob,
    completion_line,
)
from .runner_options import ENGINES, TOKEN_ENV, EngineKind, RunnerOptions
from .wire import ProtocolError, from_wire, to_wire

__all__ = [
    "TOKEN_ENV",
    "ENGINES",
    "EngineKind",
    "KVCacheType",
    "RunnerOptions",
    "CompletionOptions",
    "CompletionRequest",
    "TokenLogprob",
    "CompletionChunk",
    "CompletionDone",
    "CompletionError",
    "RunnerMemory",
    "RunnerInfo",
    "ProtocolError",
    "to_wire",
    "from_wire",
    "completion_line",
]
