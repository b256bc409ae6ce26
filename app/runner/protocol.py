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
"""

from __future__ import annotations

import argparse
import contextlib
import types
from dataclasses import MISSING, dataclass, field, fields, is_dataclass
from enum import Enum, StrEnum
from typing import Any, TypeVar, Union, get_args, get_origin, get_type_hints

from ..engine.kvcache.types import KVCacheType
from ..options import GenerationOptions, default

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

TOKEN_ENV = "HEARTH_RUNNER_TOKEN"


class EngineKind(StrEnum):
    """The runner's forward engines (`--engine`; the service's engine choice names them)."""

    HEARTH = "hearth"  # Hearth's own, with an architecture plugin
    LLAMACPP = "llamacpp"  # llama.cpp through llama-cpp-python, for every other GGUF


ENGINES = tuple(EngineKind)


class ProtocolError(ValueError):
    """A message that breaks this protocol: an unknown field, or a value of the wrong type.
    The sentence names the field (`options.temperature`)."""


def runner_option(
    default: Any, help: str, *, reload: str | None = None, explicit: str = "", always: bool = False
) -> Any:
    """A `hearth runner` option: its default and help (`--NAME`, the field's name with dashes),
    whether `args()` always writes it (`always`; else only when it is not the default), and
    its reload rule, which `reloads()` reads: "same" (a runner started otherwise cannot serve
    the request), "larger" (one started with less cannot), "asked" (one started otherwise
    cannot when the request asks for a value), "explicit" (one started otherwise cannot when
    the request's option `explicit` set it) or None (any runner can)."""
    meta = {"help": help, "reload": reload, "explicit": explicit, "always": always}
    return field(default=default, metadata=meta)


@dataclass(frozen=True, kw_only=True)
class RunnerOptions:
    """How a runner serves its model: the command-line options above, with their defaults.
    The runner's argument parser (`add_arguments`), its command line (`args`) and whether a
    runner can take a request as it is (`reloads`) are read from the fields' metadata."""

    num_ctx: int = runner_option(
        default("num_ctx"), "context per sequence", reload="larger", always=True
    )
    parallel: int = runner_option(1, "sequences at once", always=True)
    num_batch: int = runner_option(
        default("num_batch"), "prompt tokens per pass", reload="explicit",
        explicit="num_batch", always=True,
    )  # fmt: skip
    threads: int | None = runner_option(
        None, "CPU threads (default: the physical cores)", reload="explicit",
        explicit="num_thread",
    )  # fmt: skip
    flash_attention: bool = runner_option(False, "use flash attention", reload="same")
    # q8_0 and q4_0 need flash attention
    kv_type: KVCacheType = runner_option(
        KVCacheType.F16, "the KV cache's type", reload="same", always=True
    )
    memory_limit: int | None = runner_option(
        None, "bytes at most; a model needing more fails at load"
    )
    # a vision projector GGUF beside the model (mmproj-*.gguf)
    projector: str | None = runner_option(None, "vision projector .gguf", reload="asked")
    engine: EngineKind = runner_option(
        EngineKind.HEARTH, "forward engine: hearth or llama.cpp", reload="same"
    )
    # Where layers go: the service's layout as JSON, {"gpus": [{"device": "CUDA0" | "RPC0",
    # "layers": [0, 1, ...]}], "projector": device | null} (layer `blocks` is the output
    # layer); None: everything on the CPU. RPC devices come from HEARTH_RPC_SERVERS. (The
    # scheduler compares the request's placement itself: LoadSpec.layout_options.)
    layout: str | None = runner_option(None, "layers per device (JSON)")
    # A smaller GGUF with the same vocabulary that drafts tokens for speculative decoding
    # (runner/draft_model.py), loaded beside the model on Hearth's engine; None: prompt
    # lookup. A runner without it, or with another, gives the same text, only its speed
    # differs: so only a request that asks for one needs a runner that has it.
    draft_model: str | None = runner_option(
        None, "a .gguf that drafts tokens (speculation)", reload="asked"
    )

    def args(self) -> list[str]:
        """These options as `hearth runner` arguments (those at their default, or unset: None,
        0, false, left out, unless the field says `always`)."""
        out: list[str] = []
        for f in fields(self):
            value = getattr(self, f.name)
            flag = "--" + f.name.replace("_", "-")
            if not f.metadata["always"] and (not value or value == f.default):
                continue
            if isinstance(value, bool):
                out += [flag] if value else []
            else:
                out += [flag, str(value)]
        return out

    @classmethod
    def add_arguments(cls, parser: argparse.ArgumentParser) -> None:
        """The runner's argument parser's options (`--NAME`; parsed into the field's name)."""
        hints = _hints(cls)
        for f in fields(cls):
            flag, kind = "--" + f.name.replace("_", "-"), _plain(hints[f.name])
            text = f.metadata["help"]
            if kind is bool:
                parser.add_argument(flag, action="store_true", default=f.default, help=text)
            elif isinstance(kind, type) and issubclass(kind, Enum):
                choices = list(kind)
                parser.add_argument(flag, type=kind, default=f.default, choices=choices, help=text)
            else:
                parser.add_argument(flag, type=kind, default=f.default, help=text)

    def reloads(self, want: RunnerOptions, explicit: frozenset[str]) -> str | None:
        """The option that keeps a runner started with these options from serving a request
        that wants `want` (`explicit`: the request options it set), or None when it can."""
        for f in fields(self):
            rule, have, asked = f.metadata["reload"], getattr(self, f.name), getattr(want, f.name)
            if (
                (rule == "same" and asked != have)
                or (rule == "larger" and asked > have)
                or (rule == "asked" and asked is not None and asked != have)
                or (rule == "explicit" and f.metadata["explicit"] in explicit and asked != have)
            ):
                return f.name
        return None


def _plain(hint: Any) -> Any:
    """`X | None` -> X."""
    if get_origin(hint) in (Union, types.UnionType):
        return next(h for h in get_args(hint) if h is not type(None))
    return hint


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


# -- JSON ------------------------------------------------------------------------------------

T = TypeVar("T")


def to_wire(obj: Any) -> Any:
    """A protocol record as JSON data: fields that are None are left out; nested records and
    lists of them are converted too; enums become their values."""
    if is_dataclass(obj) and not isinstance(obj, type):
        return {
            f.name: to_wire(value)
            for f in fields(obj)
            if (value := getattr(obj, f.name)) is not None
        }
    if isinstance(obj, list | tuple):
        return [to_wire(v) for v in obj]
    if isinstance(obj, dict):
        return {k: to_wire(v) for k, v in obj.items()}
    if isinstance(obj, Enum):
        return obj.value
    return obj


def from_wire(cls: type[T], data: Any, where: str = "") -> T:
    """A protocol record from JSON data, checked: an unknown field or a value of the wrong
    type is a ProtocolError naming it (`where` prefixes the names, for nested records)."""
    label = where or cls.__name__
    if not isinstance(data, dict):
        raise ProtocolError(f"{label} must be a JSON object, not {_shown(data)}")
    hints = _hints(cls)
    unknown = sorted(set(data) - hints.keys())
    if unknown:
        raise ProtocolError(
            f"unknown field {_path(where, unknown[0])!r} in {cls.__name__} "
            f"(its fields: {', '.join(hints)})"
        )
    missing = [
        _path(where, f.name)
        for f in fields(cls)  # type: ignore[arg-type]
        if f.default is MISSING and f.default_factory is MISSING and f.name not in data
    ]
    if missing:
        raise ProtocolError(f"{cls.__name__} lacks {', '.join(missing)}")
    values = {name: _value(value, hints[name], _path(where, name)) for name, value in data.items()}
    return cls(**values)


def completion_line(data: Any) -> CompletionChunk | CompletionDone | CompletionError:
    """One line of a completion's stream: an error (it has `error`), the last line (it has
    `done`) or a chunk."""
    if isinstance(data, dict) and "error" in data:
        return from_wire(CompletionError, data)
    if isinstance(data, dict) and "done" in data:
        return from_wire(CompletionDone, data)
    return from_wire(CompletionChunk, data)


_HINTS: dict[type, dict[str, Any]] = {}


def _hints(cls: type) -> dict[str, Any]:
    """A record's field types, resolved (once per record)."""
    if cls not in _HINTS:
        names = {f.name for f in fields(cls)}
        _HINTS[cls] = {k: v for k, v in get_type_hints(cls).items() if k in names}
    return _HINTS[cls]


def _path(where: str, name: str) -> str:
    return f"{where}.{name}" if where else name


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _value(value: Any, hint: Any, where: str) -> Any:
    """`value` checked against the type `hint` (and converted: a record, an enum, a float)."""
    origin = get_origin(hint)
    if origin in (Union, types.UnionType):
        options = [h for h in get_args(hint) if h is not type(None)]
        if value is None and len(options) < len(get_args(hint)):
            return None
        if len(options) == 1:  # `X | None`: the error X's check gives is the more precise
            return _value(value, options[0], where)
        for option in options:
            with contextlib.suppress(ProtocolError):
                return _value(value, option, where)
        raise ProtocolError(f"{where} must be {_described(hint)}, not {_shown(value)}")
    if hint is Any:
        return value
    if isinstance(hint, type) and is_dataclass(hint):
        return from_wire(hint, value, where)
    if isinstance(hint, type) and issubclass(hint, Enum):
        try:
            return hint(value)
        except ValueError:
            raise ProtocolError(
                f"{where} must be one of {', '.join(str(m.value) for m in hint)}, "
                f"not {_shown(value)}"
            ) from None
    if origin is list:
        if not isinstance(value, list):
            raise ProtocolError(f"{where} must be {_described(hint)}, not {_shown(value)}")
        (item,) = get_args(hint)
        return [_value(v, item, f"{where}[{i}]") for i, v in enumerate(value)]
    if origin is dict:
        if not isinstance(value, dict) or not all(isinstance(k, str) for k in value):
            raise ProtocolError(f"{where} must be {_described(hint)}, not {_shown(value)}")
        _, item = get_args(hint)
        return {k: _value(v, item, _path(where, k)) for k, v in value.items()}
    plain = hint in (int, float) and isinstance(value, bool)  # JSON's true is not a number
    wanted = (int, float) if hint is float else hint
    if plain or not isinstance(value, wanted):
        raise ProtocolError(f"{where} must be {_described(hint)}, not {_shown(value)}")
    return float(value) if hint is float else value


def _described(hint: Any) -> str:
    """A type as the sentence of an error says it ("a number or null")."""
    origin = get_origin(hint)
    if origin in (Union, types.UnionType):
        return " or ".join(_described(h) for h in get_args(hint))
    if origin is list:
        return f"a list of {_described(get_args(hint)[0]).removeprefix('a ').removeprefix('an ')}s"
    if origin is dict:
        return "a JSON object"
    if isinstance(hint, type) and is_dataclass(hint):
        return "a JSON object"
    names = {type(None): "null", bool: "true or false", int: "an integer", float: "a number",
             str: "a string", Any: "any value"}  # fmt: skip
    return names.get(hint, getattr(hint, "__name__", str(hint)))
