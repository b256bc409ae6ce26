"""llama-cpp-python loaded once per process, with llama.cpp's log captured.

* `library()` imports `llama_cpp`, initialises its backend and installs the log callback, once
  per process (the callback is process-wide); a missing llama-cpp-python is a
  `LlamaCppLoadError` with a sentence.
* `LlamaCppLog` keeps what the engine reads from the log: the recent lines (for error
  messages) and every line that reports a buffer size (for the memory report, `buffers.py`),
  numbered so that `mark()` then `since(mark)` gives what a load logged. Every line also goes
  to Python logging (`hearth.llamacpp`) at debug level.
* `load_failure()` turns what the log said while a file was refused into the user's sentence.
"""

from __future__ import annotations

import ctypes
import logging
import threading
from collections import deque
from typing import Any

__all__ = ["LlamaCppLoadError", "LlamaCppLog", "library", "load_failure"]

_log = logging.getLogger("hearth.llamacpp")


class LlamaCppLoadError(RuntimeError):
    """llama.cpp cannot load the file; the message is one sentence for the user."""


class LlamaCppLog:
    """llama.cpp's log, captured (its callback is process-wide): the last 400 lines for error
    messages, and every line reporting a buffer size (a model load logs more than 400 lines
    before its context's buffers). Lines are numbered: `mark()` then `since(mark)` gives what
    came after. Forwarded to Python logging at debug level."""

    _KEEP = 400

    def __init__(self, lib: Any) -> None:
        self._recent: deque[tuple[int, str]] = deque(maxlen=self._KEEP)
        self._buffers: list[tuple[int, str]] = []
        self._count = 0
        self._partial = ""
        self._lock = threading.Lock()

        @lib.llama_log_callback  # type: ignore[untyped-decorator]
        def callback(level: int, text: bytes, user_data: ctypes.c_void_p) -> None:
            self._add(text.decode("utf-8", "replace"))

        self._callback = callback  # llama.cpp keeps calling it: keep it alive
        lib.llama_log_set(callback, ctypes.c_void_p(0))

    def _add(self, text: str) -> None:
        with self._lock:
            text = self._partial + text
            *done, self._partial = text.split("\n")
            for line in done:
                _log.debug("%s", line)
                self._recent.append((self._count, line))
                if "buffer size" in line:
                    self._buffers.append((self._count, line))
                self._count += 1

    def mark(self) -> int:
        with self._lock:
            return self._count

    def since(self, mark: int) -> list[str]:
        """The recent lines (at most the last 400) logged since `mark`."""
        with self._lock:
            return [line for i, line in self._recent if i >= mark]

    def buffers_since(self, mark: int) -> list[str]:
        """Every buffer-size line logged since `mark`."""
        with self._lock:
            return [line for i, line in self._buffers if i >= mark]


_LIB: tuple[Any, LlamaCppLog] | None = None
_LIB_LOCK = threading.Lock()


def library() -> tuple[Any, LlamaCppLog]:
    """llama_cpp, its backend initialised and its log captured (once per process)."""
    global _LIB
    with _LIB_LOCK:
        if _LIB is None:
            try:
                import llama_cpp
            except ImportError as e:
                raise LlamaCppLoadError(
                    f"the llama.cpp engine needs llama-cpp-python, which is not installed ({e})"
                ) from None
            log = LlamaCppLog(llama_cpp)
            llama_cpp.llama_backend_init()
            _LIB = (llama_cpp, log)
        return _LIB


def load_failure(path: str, lines: list[str]) -> str:
    """A sentence for a file llama.cpp refused, from what its log said."""
    name = path.rsplit("/", 1)[-1]
    for line in reversed(lines):
        if "unknown model architecture" in line:
            arch = line.split("unknown model architecture", 1)[1].strip(" :'\"")
            return f"{name}: neither Hearth nor llama.cpp knows the architecture '{arch}'"
    errors = [ln.strip() for ln in lines if "error" in ln.lower() or "failed" in ln.lower()]
    detail = f": {errors[-1]}" if errors else ""
    return f"{name}: llama.cpp could not load the model{detail}"
