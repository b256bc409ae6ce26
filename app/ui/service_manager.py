"""Starting `hearth serve` as a child process (through `hearth.launcher`), or attaching to
one that already runs.

Where it listens follows the Local API settings (see AppSettings): a private loopback port (a free
one, learnt from the service's ready line) with a random token, 127.0.0.1:<port> for other
programs, or 0.0.0.0:<port> with the API key. The child's output goes to a log file whose path
every failure message names. A timer watches the child from the event loop: its ready line,
and its exit.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from PySide6.QtCore import QObject, QTimer, Signal

from ..app_settings import AppSettings
from ..launcher import LaunchError, PrivateService, error_sentence, launch, log_tail
from ..paths import logs_dir
from .api_client import ApiClient, ApiError

__all__ = ["ServiceManager", "Endpoint"]

STOPPED, STARTING, READY, FAILED = "stopped", "starting", "ready", "failed"
_START_TIMEOUT_S = 120
_POLL_MS = 250  # probing an attached service
_WATCH_MS = 100  # our child: its ready line, its exit
_RESTART_KILL_MS = 8000


@dataclass(frozen=True)
class Endpoint:
    host: str
    port: int
    token: str  # sent as the bearer token; empty when the service runs without a key

    @property
    def url(self) -> str:
        host = "127.0.0.1" if self.host == "0.0.0.0" else self.host
        return f"http://{host}:{self.port}"


class ServiceManager(QObject):
    """Owns the service child process; tells the app when the API is usable.

    `attach_url` (from `hearth --server URL`) means: never start anything, use that service.
    """

    state_changed = Signal(str, str)  # state, a sentence for the status line
    ready = Signal(str, str)  # base url, bearer token
    failed = Signal(str, str)  # reason, log file path

    def __init__(
        self,
        settings: Callable[[], AppSettings],
        attach_url: str = "",
        attach_token: str = "",
        parent: QObject | None = None,
    ) -> None:
        super().__init__(parent)
        self._settings = settings
        self._attach = (attach_url.rstrip("/"), attach_token) if attach_url else None
        self._probe_client = ApiClient(self)
        self._child: PrivateService | None = None
        self._endpoint: Endpoint | None = None
        self._child_host = ""  # where our child was asked to listen (0.0.0.0 when exposed)
        self._poll = QTimer(self, interval=_POLL_MS, singleShot=True)
        self._poll.timeout.connect(self._probe)
        self._watch = QTimer(self, interval=_WATCH_MS)
        self._watch.timeout.connect(self._watch_child)
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
        return self._child is not None

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
            self._spawn("127.0.0.1", 0, None)  # a free port, a random key
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
                self._spawn(ep.host, ep.port, ep.token)

        call.done.connect(answered)
        call.failed.connect(refused)

    def _spawn(self, host: str, port: int, token: str | None) -> None:
        """Start our own service; `_watch_child` sees it become ready, or end."""
        self._endpoint = None
        self._set_state(STARTING, self.tr("Starting the engine…"))
        s = self._settings()
        # The service's own default context (its memory estimates assume it) follows ours
        # when the user set one; "Automatic" leaves the service's.
        env = {"HEARTH_CONTEXT_LENGTH": str(s.num_ctx)} if s.num_ctx > 0 else {}
        if s.models_dir:
            env["HEARTH_MODELS"] = s.models_dir
        if s.work_offline:  # the "Work offline" switch: the service refuses every download
            env["HEARTH_OFFLINE"] = "1"
        try:
            self._child = launch(host, port, token, env, self.log_path)
        except LaunchError as e:
            self._fail(self.tr("Could not run the engine: %1").replace("%1", str(e)))
            return
        self._child_host = host
        self._watch.start()

    def _watch_child(self) -> None:
        child = self._child
        if child is None:
            self._watch.stop()
            return
        code = child.returncode
        if code is not None:
            self._watch.stop()
            self._child = None
            child.wait(2.0)  # its last output reaches the log
            self._on_exit(code, child)
        elif self.state == STARTING and child.url and not self._restart_pending:
            self._endpoint = Endpoint(self._child_host, child.port, child.token)
            self._deadline.stop()
            self._set_state(READY, self.tr("Engine ready"))
            self.ready.emit(self._endpoint.url, self._endpoint.token)

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
            self._poll.start()  # not answering yet

    def _start_timed_out(self) -> None:
        if self.state == STARTING:
            self._fail(
                self.tr("The engine did not answer within %1 seconds.").replace(
                    "%1", str(_START_TIMEOUT_S)
                )
            )

    def _on_exit(self, code: int, child: PrivateService) -> None:
        if self._restart_pending:
            self._restart_pending = False
            self.state = STOPPED
            self.start()
        elif self.state in (STARTING, READY):
            reason = self.tr("The engine stopped (exit status %1).").replace("%1", str(code))
            said = error_sentence(child.log_path)  # its own words, when it said why
            if said:
                reason += " " + said[:1].upper() + said[1:]
            self._fail(reason)

    def _fail(self, reason: str) -> None:
        self._poll.stop()
        self._deadline.stop()
        self._watch.stop()
        child, self._child = self._child, None
        if child is not None:
            child.kill()
        tail = log_tail(self.log_path) if self._attach is None else ""
        detail = reason + (("\n\n" + tail) if tail else "")
        self._set_state(FAILED, reason)
        self.failed.emit(detail, str(self.log_path))

    # -- stopping ----------------------------------------------------------------------------

    def restart(self) -> None:
        """Stop the child (if ours) and start again with the current settings."""
        if self._attach:
            return
        self._poll.stop()
        child = self._child
        if child is None or child.returncode is not None:
            self._watch.stop()
            self._child = None
            self.state = STOPPED
            self.start()
            return
        self._restart_pending = True  # `_watch_child` starts the new one when this one ends
        self._set_state(STARTING, self.tr("Restarting the engine…"))
        child.terminate()
        QTimer.singleShot(_RESTART_KILL_MS, self, lambda c=child: _kill_if_running(c))

    def stop(self, wait_ms: int = 5000) -> None:
        """End the child process (at app exit); an attached service is left running."""
        self._poll.stop()
        self._deadline.stop()
        self._watch.stop()
        self._restart_pending = False
        child, self._child = self._child, None
        self.state = STOPPED
        if child is not None:
            child.stop(wait_ms / 1000)


def _kill_if_running(child: PrivateService) -> None:
    if child.returncode is None:
        child.kill()
