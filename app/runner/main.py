"""`hearth runner`: the process that serves one model (see protocol/ for the contract)."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import secrets
import signal
import sys
import threading
import time
from dataclasses import fields
from typing import Any

from .. import env
from ..engine.gguf import GGUFError
from ..engine.ml.api import OutOfMemoryError
from ..paths import prompt_cache_dir
from .core import Runner, RunnerConfig
from .engine import load_errors
from .faults import fault
from .http import RunnerState, make_server
from .protocol import TOKEN_ENV, RunnerOptions, to_wire

__all__ = ["main"]

_log = logging.getLogger("hearth.runner")

DEFAULT_PROMPT_CACHE_BYTES = 4 << 30  # HEARTH_PROMPT_CACHE_SIZE unset


def _emit(event: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(event) + "\n")
    sys.stdout.flush()


def _watch_parent(stop: threading.Event) -> None:
    """End with the parent: a runner must never outlive the service that started it."""
    parent = os.getppid()
    while not stop.wait(1.0):
        if os.getppid() != parent:
            os.kill(os.getpid(), signal.SIGTERM)
            return


def _no_core_dump() -> None:
    """A native abort is reported by the service (exit status, ggml's last words); a core dump
    of a process holding a model (on a GPU, the driver's mappings too) would only delay that,
    by seconds to minutes, and fill the disk."""
    try:
        import resource
    except ImportError:  # not a POSIX system
        return
    with contextlib.suppress(ValueError, OSError):
        resource.setrlimit(resource.RLIMIT_CORE, (0, resource.getrlimit(resource.RLIMIT_CORE)[1]))


def _prompt_cache_folder() -> str | None:
    """Where the prompt cache on disk lives (None, said in the log, when it cannot be made)."""
    try:
        return str(prompt_cache_dir())
    except OSError as e:
        _log.warning("prompt cache on disk is off: %s", e)
        return None


def main(args: Any) -> int:
    # A native abort (an RPC worker gone, a device out of memory) ends this process with
    # ggml's message; its backtrace would attach gdb first, slowly. The service reports it.
    os.environ.setdefault("GGML_NO_BACKTRACE", "1")
    _no_core_dump()
    logging.basicConfig(
        level=env.text("HEARTH_LOG_LEVEL").upper() or "WARNING",
        stream=sys.stderr,
        format="%(asctime)s %(name)s %(levelname)s %(message)s",
    )
    token = env.text(TOKEN_ENV) or secrets.token_hex(16)
    if not env.text(TOKEN_ENV):
        _log.warning("no %s given; using %s", TOKEN_ENV, token)
    state = RunnerState()
    server = make_server(state, token)
    threading.Thread(target=server.serve_forever, name="http", daemon=True).start()
    stop = threading.Event()
    threading.Thread(target=_watch_parent, args=(stop,), daemon=True).start()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    _emit({"event": "listening", "port": server.server_address[1]})

    last = [0.0]

    def progress(fraction: float) -> None:
        fault("load", args.model)
        state.progress = fraction
        now = time.monotonic()
        if now - last[0] > 0.1 or fraction >= 1.0:
            last[0] = now
            _emit({"event": "progress", "fraction": round(fraction, 4)})

    config = RunnerConfig(
        model=args.model,
        multi_user_cache=env.flag("HEARTH_MULTIUSER_CACHE"),
        prompt_cache_dir=_prompt_cache_folder(),
        prompt_cache_bytes=env.whole("HEARTH_PROMPT_CACHE_SIZE", DEFAULT_PROMPT_CACHE_BYTES, 0),
        **{f.name: getattr(args, f.name) for f in fields(RunnerOptions)},
    )
    errors: tuple[type[Exception], ...] = (
        GGUFError,
        *load_errors(config.engine),
        OutOfMemoryError,
        ValueError,
        OSError,
    )
    try:
        runner = Runner(config, progress)
    except errors as e:
        state.status, state.error = "error", str(e)
        # `refused`: the engine cannot run this file (a plugin's missing tensor or settings),
        # not a lack of memory or a system error: the service may try the other engine.
        refused = not isinstance(e, OutOfMemoryError | OSError)
        _emit({"event": "error", "message": str(e), "refused": refused})
        server.shutdown()
        return 1
    except Exception as e:  # a plugin's own bug while it binds the file
        # Any other exception is the architecture's code failing on this file (a plugin's
        # KeyError, AttributeError, ...): the engine cannot run it, so it is refused too, with
        # the exception named, and the service may try the other engine.
        failure = f"{type(e).__name__}: {e}"
        message = f"the {config.engine.value} engine failed to load the file ({failure})"
        logging.getLogger("hearth.runner").exception("loading %s failed", config.model)
        state.status, state.error = "error", message
        _emit({"event": "error", "message": message, "refused": True})
        server.shutdown()
        return 1
    state.runner = runner
    state.status = "ready"
    info = to_wire(runner.info())
    _emit({"event": "ready", "memory": info["memory"], "info": info})
    stop.wait()
    server.shutdown()
    runner.close()
    return 0
