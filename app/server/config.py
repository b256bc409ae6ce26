"""Service settings: environment variables (Ollama's names with a HEARTH_ prefix) and flags.

Everything is read once into a frozen `ServerConfig`; a malformed value is a `ConfigError`
whose message names the variable, so `hearth serve` can refuse to start with one sentence.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass

from .. import env as hearth_env
from ..engine.kvcache.types import KVCacheType
from ..env import EnvError
from ..hostport import DEFAULT_HOST, DEFAULT_PORT, HostError, env_host, is_loopback, parse_host
from ..options import default
from .store.engines import ENGINE_CHOICES

__all__ = [
    "ConfigError",
    "ServerConfig",
    "DEFAULT_HOST",
    "DEFAULT_PORT",
    "FOREVER",
    "parse_duration",
    "parse_host",
    "is_loopback",
]

FOREVER = math.inf  # keep_alive < 0: never unload

_UNITS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}
_DURATION_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|ms|s|m|h)")


# A setting is malformed; the message names it (hearth.env's readers raise it too).
ConfigError = EnvError


def parse_duration(value: object, what: str = "keep_alive") -> float:
    """Seconds from Ollama's duration forms: a number of seconds, or a Go duration string
    ("5m", "1h30m", "300ms", "-1"). Negative means forever (returns `FOREVER`)."""
    if isinstance(value, bool):
        raise ConfigError(f'{what} must be a duration like "5m" or a number of seconds')
    if isinstance(value, int | float):
        seconds = float(value)
    elif isinstance(value, str):
        text = value.strip()
        sign = -1.0 if text.startswith("-") else 1.0
        body = text.lstrip("+-")
        try:
            seconds = sign * float(body)
        except ValueError:
            parts = _DURATION_PART.findall(body)
            if not body or "".join(n + u for n, u in parts) != body:
                raise ConfigError(
                    f'{what} {value!r} is not a duration (use e.g. "5m", "1h", "30s", '
                    "a number of seconds, or a negative value to keep the model loaded)"
                ) from None
            seconds = sign * sum(float(n) * _UNITS[u] for n, u in parts)
    else:
        raise ConfigError(f'{what} must be a duration like "5m" or a number of seconds')
    if math.isnan(seconds):
        raise ConfigError(f"{what} is not a number")
    return FOREVER if seconds < 0 else seconds


def _check_children(env: Mapping[str, str]) -> None:
    """The settings the service's runners and pulls read later, checked now: a malformed one
    refuses the service's start with its sentence instead of failing a request."""
    for name in ("HEARTH_OFFLINE", "HEARTH_RUNNER_LOG", "HEARTH_MULTIUSER_CACHE"):
        hearth_env.flag(name, env)
    hearth_env.whole("HEARTH_STREAM_INTERVAL_MS", 50, 0, env)
    hearth_env.whole("HEARTH_PROMPT_CACHE_SIZE", 0, 0, env)
    hearth_env.cpu_kernels(env)


@dataclass(frozen=True)
class ServerConfig:
    host: str = DEFAULT_HOST
    port: int = DEFAULT_PORT
    api_key: str | None = None  # bearer token; required when not bound to loopback
    origins: tuple[str, ...] = ()  # extra CORS origins (HEARTH_ORIGINS), `*` wildcards allowed
    max_loaded_models: int = 3
    num_parallel: int = 0  # 0 = automatic: 4 slots per model where the memory allows, else 1
    context_length: int = default("num_ctx")  # HEARTH_CONTEXT_LENGTH
    keep_alive: float = 300.0
    max_queue: int = 512
    load_timeout: float = 300.0
    flash_attention: bool = False
    kv_cache_type: str = "f16"
    engine: str = "auto"  # HEARTH_ENGINE: auto | hearth | llamacpp (store/engines.py)
    max_body_bytes: int = 64 * 1024 * 1024  # JSON bodies; blob uploads are streamed to disk
    max_image_bytes: int = 20 * 1024 * 1024  # one decoded image
    max_image_pixels: int = 50_000_000  # width x height of one image
    gpu_overhead: int = 0  # bytes kept free on every GPU (HEARTH_GPU_OVERHEAD, as Ollama's)
    # a runner's CUDA context + cuBLAS workspace per GPU (HEARTH_GPU_CONTEXT); None: measured
    # constants per library (scheduling.layout.BACKEND_CONTEXT)
    gpu_context: int | None = None

    @property
    def loopback(self) -> bool:
        return is_loopback(self.host)

    @property
    def base_url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    @classmethod
    def from_env(
        cls,
        env: Mapping[str, str] | None = None,
        host: str | None = None,
        port: int | None = None,
    ) -> ServerConfig:
        """Settings from the environment; `host` (may include a port) and `port` override."""
        env = os.environ if env is None else env
        try:
            h, p = env_host(env)
            if host:
                h, p = parse_host(host, default_port=p)
        except HostError as e:
            raise ConfigError(str(e)) from None
        if port is not None:
            if not 0 <= port <= 65535:
                raise ConfigError("--port must be between 0 and 65535")
            p = port
        _check_children(env)
        kv = hearth_env.choice("HEARTH_KV_CACHE_TYPE", tuple(KVCacheType), "f16", env)
        engine = hearth_env.choice("HEARTH_ENGINE", ENGINE_CHOICES, "auto", env)
        context = hearth_env.whole("HEARTH_GPU_CONTEXT", -1, 0, env)  # -1: unset
        text = hearth_env.text
        keep_alive = parse_duration(text("HEARTH_KEEP_ALIVE", env) or "5m", "HEARTH_KEEP_ALIVE")
        load_timeout = parse_duration(
            text("HEARTH_LOAD_TIMEOUT", env) or "5m", "HEARTH_LOAD_TIMEOUT"
        )
        origins = tuple(o.strip() for o in text("HEARTH_ORIGINS", env).split(",") if o.strip())
        max_loaded = hearth_env.whole("HEARTH_MAX_LOADED_MODELS", 0, 0, env)
        return cls(
            host=h,
            port=p,
            api_key=text("HEARTH_API_KEY", env) or None,
            origins=origins,
            max_loaded_models=max_loaded or 3,  # 0 = automatic: 3 on CPU, as Ollama
            num_parallel=hearth_env.whole("HEARTH_NUM_PARALLEL", 0, 0, env),  # 0: automatic
            context_length=hearth_env.whole("HEARTH_CONTEXT_LENGTH", default("num_ctx"), 4, env),
            keep_alive=keep_alive,
            max_queue=hearth_env.whole("HEARTH_MAX_QUEUE", 512, 0, env),
            load_timeout=300.0 if load_timeout == FOREVER else load_timeout,
            flash_attention=hearth_env.flag("HEARTH_FLASH_ATTENTION", env),
            kv_cache_type=kv,
            engine=engine,
            max_body_bytes=hearth_env.whole("HEARTH_MAX_BODY_BYTES", 64 * 1024 * 1024, 1024, env),
            max_image_bytes=hearth_env.whole("HEARTH_MAX_IMAGE_BYTES", 20 * 1024 * 1024, 1024, env),
            max_image_pixels=hearth_env.whole("HEARTH_MAX_IMAGE_PIXELS", 50_000_000, 1, env),
            gpu_overhead=hearth_env.whole("HEARTH_GPU_OVERHEAD", 0, 0, env),
            gpu_context=context if context >= 0 else None,
        )

    def check_exposure(self) -> None:
        """Refuse to listen beyond this machine without an API key."""
        if not self.loopback and not self.api_key:
            raise ConfigError(
                f"refusing to listen on {self.host}: binding anywhere but loopback exposes your "
                "models to the network, so set HEARTH_API_KEY to a secret first (clients then "
                "send 'Authorization: Bearer <key>')"
            )
