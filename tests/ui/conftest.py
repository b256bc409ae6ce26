"""Fixtures for the desktop app's tests: offscreen Qt, a real `hearth serve` on the default
model (session-wide), the stub service for failure cases, and a HearthApp per test."""

from __future__ import annotations

import os
import secrets
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

from stub_server import StubServer

if TYPE_CHECKING:  # Qt itself is imported where used, after QT_QPA_PLATFORM is set
    pass

REPO = Path(__file__).resolve().parents[2]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def serve_available() -> bool:
    proc = subprocess.run(
        [sys.executable, "-m", "hearth", "serve", "--help"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    return proc.returncode == 0


def wait_http(url: str, token: str = "", timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while True:
        req = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"})
        try:
            with urllib.request.urlopen(req, timeout=2):
                return
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


@pytest.fixture(scope="session")
def shared_models(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One model store for every service the tests start (the default model is assembled
    into it once)."""
    return tmp_path_factory.mktemp("ui-models")


@pytest.fixture(autouse=True)
def _ui_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, shared_models: Path) -> Path:
    """Each test gets its own history and settings; services share the model store."""
    home = tmp_path / "home"
    monkeypatch.setenv("HEARTH_HOME", str(home))
    monkeypatch.setenv("HEARTH_MODELS", str(shared_models))
    monkeypatch.delenv("HEARTH_SERVER", raising=False)
    return home


@pytest.fixture(scope="session")
def real_service(tmp_path_factory: pytest.TempPathFactory, shared_models: Path) -> Iterator[dict]:
    """A real `hearth serve` on a private port with a key, the way the app starts it."""
    if not serve_available():
        pytest.skip("`hearth serve` is not available in this checkout yet")
    home = tmp_path_factory.mktemp("service-home")
    port, token = _free_port(), secrets.token_urlsafe(16)
    env = dict(os.environ, HEARTH_HOME=str(home), HEARTH_MODELS=str(shared_models))
    env["HEARTH_API_KEY"] = token
    log = open(home / "serve.log", "wb")  # noqa: SIM115
    proc = subprocess.Popen(
        [sys.executable, "-m", "hearth", "serve", "--host", "127.0.0.1", "--port", str(port)],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        wait_http(url + "/api/version", token)
    except OSError:
        proc.kill()
        pytest.fail("hearth serve did not start:\n" + (home / "serve.log").read_text()[-3000:])
    yield {"url": url, "token": token, "log": home / "serve.log"}
    proc.terminate()
    try:
        proc.wait(timeout=15)
    except subprocess.TimeoutExpired:
        proc.kill()
    log.close()


@pytest.fixture
def stub() -> Iterator[StubServer]:
    server = StubServer()
    yield server
    server.close()


@pytest.fixture
def make_app(qtbot) -> Iterator[Callable[..., object]]:
    """Build a HearthApp attached to `url`, wait until its engine and models are ready."""
    from hearth.ui.app import HearthApp

    apps: list[HearthApp] = []

    def make(url: str = "", token: str = "", ready: bool = True) -> HearthApp:
        # `--api-key=` form: a token_urlsafe key may begin with "-", which argparse would
        # take for an option
        argv = ["--server", url, f"--api-key={token}"] if url else []
        app = HearthApp(argv)
        qtbot.addWidget(app.window)
        apps.append(app)
        app.start()
        if ready:
            try:
                qtbot.waitUntil(lambda: app.service.state == "ready", timeout=120_000)
            except Exception:
                log = app.service.log_path
                tail = log.read_text(errors="replace")[-3000:] if log.exists() else "(no log)"
                pytest.fail(f"engine not ready ({app.service.state}); {log}:\n{tail}")
            qtbot.waitUntil(
                lambda: (
                    app.models.loaded and all(m.details_loaded for m in app.models.model.models())
                ),
                timeout=30_000,
            )
        return app

    yield make
    for app in apps:
        app.shutdown()
