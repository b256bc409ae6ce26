"""Hearth's environment variables: every `HEARTH_*` setting, declared once and read through one
typed reader.

`VARIABLES` holds each variable's name, default, who reads it and what it means; the README's
settings table lists the same names (tests/test_env.py checks both ways, and that no module
reads a `HEARTH_*` variable any other way). The readers:

* `flag(name)`: one boolean parser for every switch: `1 true yes on` (any case) are on,
  `0 false no off` and unset are off; anything else is an `EnvError` naming the variable.
* `whole(name, default, minimum)`: a whole number; `text(name)`: a string, stripped;
  `choice(name, allowed)`: one of a few words; `cpu_kernels()`: HEARTH_CPU_KERNELS's three
  settings.

Each reader takes `env` (default: `os.environ`) so a caller holding another environment (the
service's configuration, a test) reads the same way. Values are read when asked, not cached:
the app changes some of them for the processes it starts.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from enum import Enum

__all__ = [
    "VARIABLES",
    "CpuKernels",
    "EnvError",
    "Variable",
    "choice",
    "cpu_kernels",
    "flag",
    "text",
    "whole",
]


class EnvError(ValueError):
    """A `HEARTH_*` variable holds a value its reader cannot use; the message names it."""


@dataclass(frozen=True)
class Variable:
    name: str
    default: str  # as a user would write it ("" when unset means something said in `meaning`)
    read_by: str  # the process that reads it: service, runner, app, cli, tests, any
    meaning: str


VARIABLES: tuple[Variable, ...] = (
    Variable("HEARTH_HOST", "127.0.0.1:11434", "service, cli", "address[:port] to listen on"),
    Variable("HEARTH_API_KEY", "", "service, cli, app", "bearer key every request must carry"),
    Variable("HEARTH_ORIGINS", "", "service", "extra CORS origins, comma-separated"),
    Variable("HEARTH_HOME", "", "any", "moves all of Hearth's data (models, history, logs)"),
    Variable("HEARTH_MODELS", "", "any", "the model store (<data dir>/models)"),
    Variable("HEARTH_CONTEXT_LENGTH", "4096", "service", "default num_ctx"),
    Variable("HEARTH_KEEP_ALIVE", "5m", "service", "default keep-alive"),
    Variable("HEARTH_LOAD_TIMEOUT", "5m", "service", "how long a model may take to load"),
    Variable("HEARTH_MAX_LOADED_MODELS", "3", "service", "models loaded at once"),
    Variable("HEARTH_NUM_PARALLEL", "0", "service", "requests one model serves at once"),
    Variable("HEARTH_MAX_QUEUE", "512", "service", "requests that may wait"),
    Variable("HEARTH_FLASH_ATTENTION", "off", "service", "flash attention"),
    Variable("HEARTH_KV_CACHE_TYPE", "f16", "service", "f16, q8_0 or q4_0 K/V cache"),
    Variable("HEARTH_ENGINE", "auto", "service", "auto, hearth or llamacpp"),
    Variable("HEARTH_MAX_BODY_BYTES", "67108864", "service", "largest JSON body"),
    Variable("HEARTH_MAX_IMAGE_BYTES", "20971520", "service", "largest decoded image"),
    Variable("HEARTH_MAX_IMAGE_PIXELS", "50000000", "service", "largest image, width x height"),
    Variable("HEARTH_GPU_OVERHEAD", "0", "service", "bytes kept free on every GPU"),
    Variable(
        "HEARTH_GPU_CONTEXT",
        "",
        "service",
        "bytes a runner's GPU context and cuBLAS workspace take per GPU (unset: measured "
        "constants, CUDA 660 MiB)",
    ),
    Variable("HEARTH_RPC_SERVERS", "", "service, runner", "ggml RPC workers, host:port,..."),
    Variable("HEARTH_OFFLINE", "off", "service, app", "no network access (pulls refused)"),
    Variable("HEARTH_DISABLE_PLUGINS", "off", "any", "third-party plugins are not loaded"),
    Variable("HEARTH_RUNNER_LOG", "off", "service", "echo runners' stderr into the log"),
    Variable("HEARTH_STREAM_INTERVAL_MS", "50", "runner", "tokens faster than this share a chunk"),
    Variable("HEARTH_MULTIUSER_CACHE", "off", "runner", "share the prompt cache across users"),
    Variable(
        "HEARTH_PROMPT_CACHE_SIZE",
        "4294967296",
        "runner",
        "bytes of prompt cache kept on disk across restarts (0: off)",
    ),
    Variable("HEARTH_LOG_LEVEL", "WARNING", "runner", "the runner's log level"),
    Variable("HEARTH_CPU_KERNELS", "on", "runner", "Hearth's CPU kernels: on, off or avx2"),
    Variable(
        "HEARTH_CPU_SHARE",
        "",
        "runner",
        "lock file runners take turns on around CPU compute (set by the service; off: none)",
    ),
    Variable("HEARTH_RUNNER_TOKEN", "", "runner", "the service's secret for its runner"),
    Variable("HEARTH_SERVER", "", "app", "the service the window uses instead of its own"),
    Variable("HEARTH_LLAMACPP_CONVERT", "", "tests", "llama.cpp's convert_hf_to_gguf.py"),
    Variable(
        "HEARTH_TEST_RUNNER_FAULT",
        "",
        "runner",
        "tests only: the runner aborts at load, prompt, stream or group (runner/faults.py)",
    ),
)
_NAMES = frozenset(v.name for v in VARIABLES)

_ON = ("1", "true", "yes", "on")
_OFF = ("", "0", "false", "no", "off")


def _raw(name: str, env: Mapping[str, str] | None) -> str:
    if name not in _NAMES:
        raise KeyError(f"{name} is not declared in hearth.env.VARIABLES")
    return (os.environ if env is None else env).get(name, "").strip()


def text(name: str, env: Mapping[str, str] | None = None) -> str:
    """The variable's value, stripped ("" when unset)."""
    return _raw(name, env)


def flag(name: str, env: Mapping[str, str] | None = None) -> bool:
    value = _raw(name, env).lower()
    if value in _ON:
        return True
    if value in _OFF:
        return False
    raise EnvError(f"{name}={value!r} is not on or off (use 1, true, yes, on or 0, false, no, off)")


def whole(name: str, default: int, minimum: int = 0, env: Mapping[str, str] | None = None) -> int:
    raw = _raw(name, env)
    if not raw:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise EnvError(f"{name}={raw!r} is not a whole number") from None
    if value < minimum:
        raise EnvError(f"{name}={raw!r} must be at least {minimum}")
    return value


def choice(
    name: str, allowed: tuple[str, ...], default: str, env: Mapping[str, str] | None = None
) -> str:
    """One of `allowed` (compared in lower case); unset is `default`."""
    value = _raw(name, env).lower() or default
    if value not in allowed:
        *first, last = allowed
        raise EnvError(f"{name}={value!r} must be {', '.join(first)} or {last}")
    return value


class CpuKernels(Enum):
    ON = "on"  # the best code path this CPU has that agrees with ggml
    OFF = "off"  # ggml's own kernels only
    AVX2 = "avx2"  # Hearth's kernels, kept to their AVX2 code


def cpu_kernels(env: Mapping[str, str] | None = None) -> CpuKernels:
    """HEARTH_CPU_KERNELS: a switch (unset: on) or `avx2`."""
    value = _raw("HEARTH_CPU_KERNELS", env).lower()
    if value == "avx2":
        return CpuKernels.AVX2
    return CpuKernels.ON if not value or flag("HEARTH_CPU_KERNELS", env) else CpuKernels.OFF
