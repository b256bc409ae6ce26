"""hearth.launcher: the command line and environment of a private `hearth serve`, its ready line,
the sentence that explains a failed start, and stopping it."""

from __future__ import annotations

import signal
import socket
import sys
import textwrap
import time

import pytest

from hearth import launcher
from hearth.launcher import LaunchError

SERVE_ARGS = ["serve", "--host", "127.0.0.1", "--port", "0", "--exit-on-stdin-close"]


def fake_service(monkeypatch: pytest.MonkeyPatch, script: str) -> None:
    """Make `launch` run `script` (Python) instead of `hearth serve`."""
    code = textwrap.dedent(script)
    monkeypatch.setattr(launcher, "serve_command", lambda *_args: [sys.executable, "-c", code])


def test_the_command_line_runs_this_interpreter_or_the_frozen_app(monkeypatch):
    monkeypatch.delattr(sys, "frozen", raising=False)
    assert launcher.serve_command() == [sys.executable, "-m", "hearth", *SERVE_ARGS]
    monkeypatch.setattr(sys, "frozen", True, raising=False)
    monkeypatch.setattr(sys, "executable", "/opt/Hearth/hearth")
    assert launcher.serve_command() == ["/opt/Hearth/hearth", *SERVE_ARGS]
    assert launcher.serve_command("0.0.0.0", 8080, "warning") == [
        "/opt/Hearth/hearth", "serve", "--host", "0.0.0.0", "--port", "8080",
        "--exit-on-stdin-close", "--log-level", "warning",
    ]  # fmt: skip


def test_the_environment_has_its_own_key_and_no_hearth_host(monkeypatch):
    monkeypatch.setenv("HEARTH_HOST", "0.0.0.0:9999")
    monkeypatch.setenv("HEARTH_API_KEY", "the user's key")
    env = launcher.service_env("secret", {"HEARTH_CONTEXT_LENGTH": "8192"})
    assert "HEARTH_HOST" not in env
    assert env["HEARTH_API_KEY"] == "secret" and env["HEARTH_CONTEXT_LENGTH"] == "8192"
    assert "HEARTH_API_KEY" not in launcher.service_env("")  # "": a service without a key


def test_the_shared_service_url_follows_hearth_host():
    assert launcher.service_url({}) == "http://127.0.0.1:11434"
    assert launcher.service_url({"HEARTH_HOST": "0.0.0.0:9999"}) == "http://127.0.0.1:9999"
    assert launcher.service_url({"HEARTH_HOST": "[::1]:5000"}) == "http://[::1]:5000"
    assert launcher.service_url({"HEARTH_HOST": "http://box:8080/"}) == "http://box:8080"
    with pytest.raises(ValueError, match="HEARTH_HOST"):
        launcher.service_url({"HEARTH_HOST": "box:port"})


def test_the_error_sentence_is_the_services_own(tmp_path):
    log = tmp_path / "serve.log"
    said = "cannot listen on 127.0.0.1:11434: Address already in use"
    log.write_text(f"INFO:     Started server process\nhearth: {said}\nINFO:     shutting down\n\n")
    assert launcher.error_sentence(log) == said
    log.write_text("Traceback (most recent call last):\n  ...\nImportError: no module x\n")
    assert launcher.error_sentence(log) == "ImportError: no module x"  # else the last line
    assert launcher.log_tail(log, 2) == "  ...\nImportError: no module x"
    assert launcher.error_sentence(tmp_path / "none.log") == ""


def test_a_private_service_starts_answers_and_stop_ends_it(tmp_path, monkeypatch):
    monkeypatch.setenv("HEARTH_HOST", "0.0.0.0:1")  # not for a private service
    service = launcher.start_private_service(log_path=tmp_path / "serve.log")
    try:
        assert service.url == f"http://127.0.0.1:{service.port}" and service.port > 0
        assert service.token and launcher.hearth_answers(service.url, service.token)
        assert launcher.hearth_answers(service.url, "wrong")  # a 401 is a Hearth service too
    finally:
        code = service.stop()
    assert code is not None and service.returncode is not None
    assert not launcher.hearth_answers(service.url, service.token)
    assert "Hearth listening" not in (tmp_path / "serve.log").read_text()


def test_an_occupied_port_is_one_sentence(tmp_path):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        service = launcher.launch(port=port, log_path=tmp_path / "serve.log")
        with pytest.raises(LaunchError) as failure:
            service.wait_ready(60)
    message = str(failure.value)
    assert message.startswith(f"cannot listen on 127.0.0.1:{port}")
    assert "Traceback" not in message and failure.value.log_path == tmp_path / "serve.log"
    assert service.returncode == 1


def test_a_bad_flag_is_reported_in_its_own_words(tmp_path):
    with pytest.raises(LaunchError, match="invalid choice: 'loud'"):
        launcher.start_private_service(log_level="loud", log_path=tmp_path / "serve.log")


def test_output_after_the_ready_line_goes_to_the_log(tmp_path, monkeypatch):
    fake_service(
        monkeypatch,
        """
        import sys
        print("Hearth listening on http://0.0.0.0:4321", flush=True)
        print("later on stdout", flush=True)
        sys.stderr.write("hearth: no GPU driver found\\n")
        sys.exit(3)
        """,
    )
    service = launcher.launch(log_path=tmp_path / "serve.log")
    assert service.wait_ready(30) == "http://127.0.0.1:4321"  # a wildcard bind: this machine
    assert service.wait(30) == 3
    log = (tmp_path / "serve.log").read_text()
    assert "later on stdout" in log and "no GPU driver found" in log and "listening" not in log
    assert service.failure() == "no GPU driver found"


def test_a_service_that_never_gets_ready_times_out(tmp_path, monkeypatch):
    fake_service(monkeypatch, "import time; time.sleep(60)")
    service = launcher.launch(log_path=tmp_path / "serve.log")
    try:
        with pytest.raises(LaunchError, match="did not start within 0.5 seconds"):
            service.wait_ready(0.5)
        assert service.returncode is None  # left running: the caller decides
    finally:
        service.kill()
    assert service.returncode is not None


def test_stop_kills_a_service_that_ignores_stdin_and_sigterm(tmp_path, monkeypatch):
    fake_service(
        monkeypatch,
        """
        import signal, time
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        print("Hearth listening on http://127.0.0.1:4321", flush=True)
        time.sleep(60)
        """,
    )
    service = launcher.launch(log_path=tmp_path / "serve.log")
    service.wait_ready(30)
    started = time.monotonic()
    code = service.stop(timeout=1.0)
    assert time.monotonic() - started < 10
    assert service.returncode is not None
    if sys.platform != "win32":
        assert code == -signal.SIGKILL


def test_a_missing_executable_is_a_launch_error(tmp_path, monkeypatch):
    monkeypatch.setattr(launcher, "serve_command", lambda *_args: [str(tmp_path / "no-such")])
    with pytest.raises(LaunchError, match="cannot run"):
        launcher.launch(log_path=tmp_path / "serve.log")
