"""Starting `hearth serve` as a child process, or attaching to one that already runs.

Where it listens follows the Local API settings (see Settings): a private loopback port with a
random token, 127.0.0.1:<port> for other programs, or 0.0.0.0:<port> with the API key. The
child's output goes to a log file whose path every failure message names.
"""

from __future__ import annotations

import secrets
import socket
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from PySide6.QtCore import QIODevice, QObject, QProcess, QProcessEnvironment, QTimer, Signal

from hearth.paths import logs_dir

from ..app_settings import Settings
from .api_client import ApiClient, ApiError

__all__ = ["ServiceManager", "Endpoint", "free_port", "serve_command"]

STOPPED, STARTING, READY, FAILED = "stopped", "starting", "ready", "failed"
_START_TIMEOUT_S = 120
_POLL_MS = 250


@dataclass(frozen=True)
class Endpoint:
    host: str
    port: int
    token: str  # sent as the bearer token; empty when the service runs without a key

    @property
    def url(self) -> str:
        host = "127.0.0.1" if self.host == "0.0.0.0" else self.host
        return f"http://{host}:{self.port}"


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def serve_command(host: str, port: int) -> tuple[str, list[str]]:
    """How to run `hearth serve` from this interpreter (or from a frozen app's executable)."""
    # The service ends when our stdin pipe closes, so even a killed app leaves no orphan.
    args = ["serve", "--host", host, "--port", str(port), "--exit-on-stdin-close"]
    if getattr(sys, "frozen", False):
        return sys.executable, args
    return sys.executable, ["-m", "hearth", *args]


def _tail(path: Path, lines: int = 15) -> str:
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""
    return "\n".join(text.strip().splitlines()[-lines:])


class ServiceManager(QObject):
    """Owns the service child process; tells the app when the API is usable.

    `attach_url` (from `hearth --server URL`) means: never start anything, use that service.
    """

    state_changed = Signal(str, str)  # state, a sentence for the status line
    ready = Signal(str, str)  # base url, bearer token
    failed = Signal(str, str)  # reason, log file path

    def __init__(
        self,
        settings: Callable[[], Settings],
        attach_url: str = "",
        attach_token: str = "",
        parent: QObject | None = None,
    ) -> None:
        super().__init__(parent)
        self._settings = settings
        self._attach = (attach_url.rstrip("/"), attach_token) if attach_url else None
        self._probe_client = ApiClient(self)
        self._process: QProcess | None = None
        self._endpoint: Endpoint | None = None
        self._poll = QTimer(self, interval=_POLL_MS, singleShot=True)
        self._poll.timeout.connect(self._probe)
        self._deadline = QTimer(self, singleShot=True)
        self._deadline.timeout.connect(self._start_timed_out)
        self._restart_pending = False
        self.state = STOPPED
        self.log_path = logs_dir() / "serve.log"

    @property
    def endpoint(self) -> Endpoint | None:
        return self._endpoint if self.state == READY else None

    @property
    def owns_process(self) -> bool:
        return self._process is not None

    def _set_state(self, state: str, text: str) -> None:
        self.state = state
        self.state_changed.emit(state, text)

    # -- starting ----------------------------------------------------------------------------

    def start(self) -> None:
        """Start (or attach) in the background; `ready` or `failed` follows."""
        if self.state == STARTING:
            return
        self._deadline.start(_START_TIMEOUT_S * 1000)
        if self._attach:
            url, token = self._attach
            host, _, port = url.split("//", 1)[-1].partition(":")
            self._endpoint = Endpoint(host, int(port or 80), token)
            self._set_state(STARTING, self.tr("Connecting to the engine at %1…").replace("%1", url))
            self._probe()
            return
        s = self._settings()
        if not s.api_enabled:
            self._spawn(Endpoint("127.0.0.1", free_port(), secrets.token_urlsafe(24)))
            return
        host = "0.0.0.0" if s.api_expose else "127.0.0.1"
        token = s.api_key if s.api_expose else ""
        self._check_port_then_spawn(Endpoint(host, s.api_port, token))

    def _check_port_then_spawn(self, ep: Endpoint) -> None:
        # A Hearth service that already listens there (say a headless `hearth serve`) is used
        # as it is; anything else on the port is a conflict the user must hear about.
        self._set_state(STARTING, self.tr("Starting the engine…"))
        probe = ApiClient(self)
        probe.set_endpoint(ep.url, ep.token)
        call = probe.get("/", timeout_ms=1500)

        def answered(body: object) -> None:
            if isinstance(body, str) and body.startswith("Hearth is running"):
                self._endpoint = ep
                self._probe()
            else:
                self._fail(
                    self.tr(
                        "Port %1 is already used by another program (is Ollama running?). "
                        "Stop it, or choose another port in Settings → Local API."
                    ).replace("%1", str(ep.port))
                )

        def refused(err: ApiError) -> None:
            if err.kind == "http":
                answered("")
            else:
                self._spawn(ep)

        call.done.connect(answered)
        call.failed.connect(refused)

    def _spawn(self, ep: Endpoint) -> None:
        self._endpoint = ep
        self._set_state(STARTING, self.tr("Starting the engine…"))
        proc = QProcess(self)
        env = QProcessEnvironment.systemEnvironment()
        env.remove("HEARTH_API_KEY")
        if ep.token:
            env.insert("HEARTH_API_KEY", ep.token)
        # The service's own default context (its memory estimates assume it) follows ours.
        env.insert("HEARTH_CONTEXT_LENGTH", str(self._settings().num_ctx))
        models_dir = self._settings().models_dir
        if models_dir:
            env.insert("HEARTH_MODELS", models_dir)
        env.insert("PYTHONUNBUFFERED", "1")
        proc.setProcessEnvironment(env)
        proc.setProcessChannelMode(QProcess.ProcessChannelMode.MergedChannels)
        proc.setStandardOutputFile(str(self.log_path), QIODevice.OpenModeFlag.Truncate)
        program, args = serve_command(ep.host, ep.port)
        proc.finished.connect(self._on_exit)
        proc.errorOccurred.connect(self._on_process_error)
        self._process = proc
        proc.start(program, args)
        self._poll.start()

    def _probe(self) -> None:
        if self._endpoint is None or self.state != STARTING:
            return
        self._probe_client.set_endpoint(self._endpoint.url, self._endpoint.token)
        call = self._probe_client.get("/api/version", timeout_ms=3000)
        call.done.connect(self._on_probe_ok)
        call.failed.connect(self._on_probe_failed)

    def _on_probe_ok(self, _body: object) -> None:
        if self.state != STARTING or self._endpoint is None:
            return
        self._deadline.stop()
        self._set_state(READY, self.tr("Engine ready"))
        self.ready.emit(self._endpoint.url, self._endpoint.token)

    def _on_probe_failed(self, err: ApiError) -> None:
        if self.state != STARTING:
            return
        if err.status == 401:
            self._fail(self.tr("The service refused the API key (HTTP 401)."))
        elif self._attach and err.kind == "http":
            self._fail(err.message)
        else:
            self._poll.start()  # not listening yet: the child is still importing or binding

    def _start_timed_out(self) -> None:
        if self.state == STARTING:
            self._fail(
                self.tr("The engine did not answer within %1 seconds.").replace(
                    "%1", str(_START_TIMEOUT_S)
                )
            )

    def _on_process_error(self, error: QProcess.ProcessError) -> None:
        if error == QProcess.ProcessError.FailedToStart and self.state == STARTING:
            self._process = None
            self._fail(self.tr("Could not run %1.").replace("%1", sys.executable))

    def _on_exit(self, code: int, _status: QProcess.ExitStatus) -> None:
        self._process = None
        if self._restart_pending:
            self._restart_pending = False
            self.state = STOPPED
            self.start()
        elif self.state in (STARTING, READY):
            self._fail(
                self.tr("The engine stopped (exit status %1).").replace("%1", str(code)),
            )

    def _fail(self, reason: str) -> None:
        self._poll.stop()
        self._deadline.stop()
        if self._process is not None:
            self._process.kill()
        tail = _tail(self.log_path) if self._attach is None else ""
        detail = reason + (("\n\n" + tail) if tail else "")
        self._set_state(FAILED, reason)
        self.failed.emit(detail, str(self.log_path))

    # -- stopping ----------------------------------------------------------------------------

    def restart(self) -> None:
        """Stop the child (if ours) and start again with the current settings."""
        if self._attach:
            return
        self._poll.stop()
        proc = self._process
        if proc is None or proc.state() == QProcess.ProcessState.NotRunning:
            self._process = None
            self.state = STOPPED
            self.start()
            return
        self._restart_pending = True
        self._set_state(STARTING, self.tr("Restarting the engine…"))
        proc.terminate()
        QTimer.singleShot(8000, lambda p=proc: _kill_if_running(p))

    def stop(self, wait_ms: int = 5000) -> None:
        """End the child process (at app exit); an attached service is left running."""
        self._poll.stop()
        self._deadline.stop()
        self._restart_pending = False
        proc, self._process = self._process, None
        self.state = STOPPED
        if proc is None:
            return
        proc.finished.disconnect(self._on_exit)
        proc.terminate()
        if not proc.waitForFinished(wait_ms):
            proc.kill()
            proc.waitForFinished(2000)


def _kill_if_running(proc: QProcess) -> None:
    try:
        if proc.state() != QProcess.ProcessState.NotRunning:
            proc.kill()
    except RuntimeError:
        pass  # already deleted with its parent
