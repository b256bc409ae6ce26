"""Runners take turns on the CPU: two busy runners must not starve each other.

A ggml graph on the CPU runs on a pool of threads that meet at a spinning barrier after every
op. Two runners computing at once (a chat model and an embedding model, two users' models),
each with a pool as large as the machine's cores, put two spinning threads on every core: each
barrier then waits for a thread the kernel has descheduled, and both runners crawl (a 1.5B chat
fell well under 1 token/s on 2 cores beside another runner). So every runner the service starts
takes one lock, a file all of this user's Hearth runners share (`HEARTH_CPU_SHARE`, set by the
service), around each graph it computes on the CPU: one graph at a time has the cores, whole;
a runner alone pays one uncontended `flock` per graph. The pool of a runner that waits does not
spin either: with turns on, its pool is made with ggml's polling level 0 (`poll`: between
graphs its threads sleep on a condition variable at once instead of spinning 1024 x 128 x 50
rounds, ggml's default, which would take the cores from the runner whose turn it is).

Graphs that run wholly on GPUs take no turn (their CPU threads have nothing to do). On a system
without `fcntl` (Windows) there are no turns. `bench/two_models.py` measures two models
answering at once against each alone.
"""

from __future__ import annotations

import contextlib
import getpass
import os
import tempfile
import threading
from collections.abc import Iterator, Mapping
from pathlib import Path

from .. import env as hearth_env

try:
    import fcntl
except ImportError:  # Windows
    fcntl = None  # type: ignore[assignment]

__all__ = ["CpuTurns", "default_lock_path", "runner_env", "turns_from_env"]

VARIABLE = "HEARTH_CPU_SHARE"


def default_lock_path() -> Path:
    """The lock file every runner of this user shares (one per user: two services on one
    machine share its cores too)."""
    return Path(tempfile.gettempdir()) / f"hearth-{getpass.getuser()}-cpu.lock"


def runner_env(env: Mapping[str, str]) -> dict[str, str]:
    """What the service adds to a runner's environment: the shared lock file, unless the
    user's environment already says (a path, or `off`)."""
    if hearth_env.text(VARIABLE, env) or fcntl is None:
        return {}
    return {VARIABLE: str(default_lock_path())}


class CpuTurns:
    """The shared lock: `with turns.turn(): compute()`. Thread-safe within a process."""

    def __init__(self, path: str | Path) -> None:
        if fcntl is None:
            raise OSError("taking turns on the CPU needs fcntl (not on this system)")
        self.path = Path(path)
        self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        self._local = threading.Lock()  # flock is per open file, not per thread

    @contextlib.contextmanager
    def turn(self) -> Iterator[None]:
        with self._local:
            fcntl.flock(self._fd, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(self._fd, fcntl.LOCK_UN)

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


_shared: dict[str, CpuTurns] = {}
_shared_lock = threading.Lock()


def turns_from_env(env: Mapping[str, str] | None = None) -> CpuTurns | None:
    """The turns a runner takes (`HEARTH_CPU_SHARE`: a lock file path; unset or `off`: none),
    one per process and path: a model and its draft model in one runner share it (two open
    files would make the process wait on itself). Kept open for the process's life. A lock
    file that cannot be opened means no turns, not a failed runner."""
    value = hearth_env.text(VARIABLE, env)
    if not value or value.lower() in ("0", "off", "no", "false") or fcntl is None:
        return None
    with _shared_lock:
        if value not in _shared:
            try:
                _shared[value] = CpuTurns(value)
            except OSError:
                return None
        return _shared[value]
