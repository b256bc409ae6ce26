"""The Local API switch: on, the app's own service answers /api/tags on the chosen port; off,
that port goes quiet (the service moves back to a private port with a key)."""

from __future__ import annotations

import json
import socket
import urllib.request

import pytest


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _tags(port: int) -> list[str]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/tags", timeout=5) as r:
        return [m["name"] for m in json.load(r)["models"]]


@pytest.mark.slow
def test_api_switch_on_serves_the_port_and_off_stops_it(qtbot, make_app, real_service):
    app = make_app()  # no --server: the app starts its own `hearth serve`
    private = app.service.endpoint
    assert private is not None and private.token  # private port, random key
    assert app.service.owns_process
    port = _port()
    page = app.window.settings_page
    page.port.setValue(port)
    with qtbot.waitSignal(app.service.ready, timeout=120_000):
        page.api_switch.click()  # the switch, as a user flips it
    assert app.settings.api_enabled and app.service.endpoint.port == port
    assert "gemma3:270m" in _tags(port)  # no key needed on loopback, like Ollama
    assert f"127.0.0.1:{port}" in page.api_status.text()

    with qtbot.waitSignal(app.service.ready, timeout=120_000):
        page.api_switch.click()
    assert not app.settings.api_enabled
    with pytest.raises(OSError):
        _tags(port)
    # the app still talks to its engine, now on a private port again
    assert app.service.endpoint.port != port and app.service.endpoint.token
    qtbot.waitUntil(lambda: "gemma3:270m" in app.models.names(), timeout=30_000)
