"""Starting a private `hearth serve`, and finding the shared one: the one place that knows how
(the CLI's `hearth run` and the desktop app both start their service here).

A private service is `hearth serve --host H --port P --exit-on-stdin-close` run from this
interpreter, or from the frozen app's own executable. It gets an API key of its own (random
unless the caller chooses one) and no HEARTH_HOST. When start-up is done its first line on
stdout is `Hearth listening on URL` (with `--port 0` that is how its port is learnt); its
stderr, and anything else on stdout, go to a log file in `hearth.paths.logs_dir()` whose tail
says why it failed. It ends when our end of its stdin closes, so even a killed parent leaves
nothing behind.

Qt-free, and no server code: the desktop app polls a `PrivateService` from its event loop,
the CLI waits on it.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import subprocess
import threading
from collections.abc import Callable, Mapping
from pathlib import Path

from .client import HearthClient, ServiceError
from .hostport import client_url, env_host, parse_host
from .paths import logs_dir
from .program import hearth_command

__all__ = [
    "READY_PREFIX",
    "LaunchError",
    "PrivateService",
    "service_url",
    "hearth_answers",
    "serve_command",
    "service_env",
    "launch",
    "start_private_service",
    "error_sentence",
    "log_tail",
]

READY_PREFIX = "Hearth listening on "  # what `hearth serve` prints once it answers
START_TIMEOUT_S = 120.0


class LaunchError(RuntimeError):
    """The service could not be started; the message says why (the log's own sentence)."""

    def __init__(self, message: str, log_path: Path | None = None) -> None:
        super().__init__(message)
        self.log_path = log_path


# -- the shared service --------------------------------------------------------------------


def service_url(env: Mapping[str, str] | None = None) -> str:
    """Where the shared service listens, from HEARTH_HOST (a wildcard bind means this machine).
    A malformed HEARTH_HOST is a ValueError naming it."""
    return client_url(*env_host(os.environ if env is None else env))


def hearth_answers(url: str, token: str | None = None, timeout: float = 2.0) -> bool:
    """True when a Hearth service answers at `url` (GET /api/version): it names itself in the
    answer (Ollama does not), or it refuses `token` (HTTP 401), which a caller should hear
    from the service itself rather than be quietly given another one."""
    client = HearthClient(url, token, timeout, connect_timeout=timeout)
    try:
        body = client.request("GET", "/api/version")
    except ServiceError as e:
        return e.status == 401
    return isinstance(body, dict) and "hearth" in body


# -- starting one ----------------------------------------------------------------------------


def serve_command(
    host: str = "127.0.0.1", port: int = 0, log_level: str | None = None
) -> list[str]:
    """The command line of `hearth serve`: from this interpreter, or from a frozen app's
    executable (`hearth.program.hearth_command`)."""
    args = ["serve", "--host", host, "--port", str(port), "--exit-on-stdin-close"]
    if log_level:
        args += ["--log-level", log_level]
    return [*hearth_command(), *args]


def service_env(token: str, extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The service's environment: ours, without HEARTH_HOST (the command line says where), with
    HEARTH_API_KEY = `token` (none when empty), and `extra` on top."""
    env = dict(os.environ)
    env.pop("HEARTH_HOST", None)
    env.pop("HEARTH_API_KEY", None)
    if token:
        env["HEARTH_API_KEY"] = token
    env["PYTHONUNBUFFERED"] = "1"
    env.update(extra or {})
    return env


class PrivateService:
    """A started `hearth serve`. `url` is empty until its ready line arrives; `returncode` is
    None while it runs. A reader thread copies its stdout (but the ready line) to the log."""

    def __init__(self, process: subprocess.Popen[str], log_path: Path, token: str) -> None:
        self.process = process
        self.log_path = log_path
        self.token = token
        self.url = ""
        self.port = 0
        self._settled = threading.Event()  # ready, or its stdout ended
        self._reader = threading.Thread(target=self._read, name="hearth-serve-out", daemon=True)
        self._reader.start()

    def _read(self) -> None:
        out = self.process.stdout
        try:
            if out is None:
                return
            with out, open(self.log_path, "a", encoding="utf-8", errors="replace") as log:
                for line in out:
                    if not self.url and line.startswith(READY_PREFIX):
                        with contextlib.suppress(ValueError):
                            host, port = parse_host(line[len(READY_PREFIX) :].strip())
                            self.port, self.url = port, client_url(host, port)
                            self._settled.set()
                            continue
                    log.write(line)
                    log.flush()
        except OSError:
            pass
        finally:
            self._settled.set()

    @property
    def pid(self) -> int:
        return self.process.pid

    @property
    def returncode(self) -> int | None:
        """The exit status once it has ended, else None."""
        return self.process.poll()

    def wait(self, timeout: float | None = None) -> int | None:
        """Wait for it to end and for its output to reach the log; the exit status, or None
        when it still runs after `timeout` seconds."""
        try:
            code = self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            return None
        self._reader.join(2.0)
        return code

    def wait_ready(self, timeout: float = START_TIMEOUT_S) -> str:
        """Its URL once it answers; LaunchError (the log's sentence) if it ends first or does not
        get there within `timeout` seconds. It is left running either way."""
        self._settled.wait(timeout)
        if self.url:
            return self.url
        code = self.wait(5.0) if self._settled.is_set() else None
        if code is None:
            raise LaunchError(f"it did not start within {timeout:g} seconds", self.log_path)
        raise LaunchError(self.failure(code), self.log_path)

    def failure(self, code: int | None = None) -> str:
        """Why it ended (or does not answer): the log's sentence, else its exit status."""
        code = self.returncode if code is None else code
        if code is not None:
            self._reader.join(2.0)  # its last output reaches the log
        sentence = error_sentence(self.log_path)
        if sentence:
            return sentence
        return f"it exited with status {code}" if code is not None else "it did not start"

    def terminate(self) -> None:
        """Ask it to end (close its stdin, SIGTERM); returns at once."""
        self._close_and_signal(self.process.terminate)

    def kill(self) -> None:
        """End it now (SIGKILL) and reap it."""
        self._close_and_signal(self.process.kill)
        self.process.wait()

    def _close_and_signal(self, send: Callable[[], None]) -> None:
        with contextlib.suppress(OSError):
            if self.process.stdin is not None:
                self.process.stdin.close()
        if self.process.poll() is None:
            with contextlib.suppress(OSError):
                send()

    def stop(self, timeout: float = 10.0) -> int:
        """End it: close its stdin and terminate it, kill it if it is still there after
        `timeout` seconds. Its exit status."""
        self.terminate()
        code = self.wait(timeout)
        if code is None:
            self.kill()
            code = self.process.returncode
        return code


def launch(
    host: str = "127.0.0.1",
    port: int = 0,
    token: str | None = None,
    env: Mapping[str, str] | None = None,
    log_path: Path | None = None,
    log_level: str | None = None,
) -> PrivateService:
    """Start `hearth serve` on (host, port) (port 0: a free one) and return at once; its
    `url` appears when it is ready. `token` None means a random API key, "" none at all;
    `env` adds to the service's environment. LaunchError when it cannot be run at all."""
    token = secrets.token_urlsafe(24) if token is None else token
    log_path = logs_dir() / "private-serve.log" if log_path is None else log_path
    command = serve_command(host, port, log_level)
    try:
        log_path.write_text("")  # the log starts afresh; both writers append
        with open(log_path, "ab") as err:
            process = subprocess.Popen(
                command,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=err,
                text=True,
                encoding="utf-8",
                errors="replace",
                env=service_env(token, env),
            )
    except OSError as e:
        raise LaunchError(f"cannot run {command[0]}: {e.strerror or e}", log_path) from None
    return PrivateService(process, log_path, token)


def start_private_service(
    host: str = "127.0.0.1",
    port: int = 0,
    token: str | None = None,
    env: Mapping[str, str] | None = None,
    log_path: Path | None = None,
    log_level: str | None = None,
    timeout: float = START_TIMEOUT_S,
) -> PrivateService:
    """`launch`, then wait until it answers; on failure it is ended and the LaunchError says
    why (the service's own sentence from its log)."""
    service = launch(host, port, token, env, log_path, log_level)
    try:
        service.wait_ready(timeout)
    except LaunchError:
        service.kill()
        raise
    return service


# -- its log -----------------------------------------------------------------------------------


def _tail(path: Path, lines: int) -> list[str]:
    """The last `lines` non-empty lines of a log ([] when there is none)."""
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return []
    return [ln for ln in text.splitlines() if ln.strip()][-lines:]


def error_sentence(path: Path) -> str:
    """The service's own sentence for why it stopped: its last `hearth: ...` line (prefix
    removed), else the log's last line; "" for an empty log."""
    lines = _tail(path, 50)
    said = [ln for ln in lines if ln.startswith("hearth:")]
    last = said[-1] if said else (lines[-1] if lines else "")
    return last.removeprefix("hearth:").strip()


def log_tail(path: Path, lines: int = 15) -> str:
    """The end of a log, to show beside a failure."""
    return "\n".join(_tail(path, lines))
