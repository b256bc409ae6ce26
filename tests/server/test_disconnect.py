"""A client that goes away cancels its request on every route, streamed or not
(api/shared/disconnect.py), on fake runners whose completions and embeddings never end: the
runner call is closed, the lease released, and a complete response is left alone. The same
against a real runner, over real sockets, is in test_disconnect_live.py."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from .fakes import FakeService

CHAT = [{"role": "user", "content": "Count to a million."}]
ROUTES: list[tuple[str, dict[str, Any]]] = [
    ("/api/generate", {"model": "tiny", "prompt": "Count to a million."}),
    ("/api/chat", {"model": "tiny", "messages": CHAT}),
    ("/v1/chat/completions", {"model": "tiny", "messages": CHAT}),
    ("/v1/completions", {"model": "tiny", "prompt": "Count to a million."}),
    ("/v1/responses", {"model": "tiny", "input": "Count to a million."}),
    ("/v1/messages", {"model": "tiny", "max_tokens": 100000, "messages": CHAT}),
]
EMBEDDINGS: list[tuple[str, dict[str, Any]]] = [
    ("/api/embed", {"model": "tiny", "input": ["a", "b"]}),
    ("/api/embeddings", {"model": "tiny", "prompt": "a"}),
    ("/v1/embeddings", {"model": "tiny", "input": "a"}),
]


class _Client:
    """One HTTP request as the ASGI server hands it to the app: the body, then (once `leave()`
    is called) the disconnect; what the app sends is kept."""

    def __init__(self, path: str, body: dict[str, Any]) -> None:
        self.data = json.dumps(body).encode()
        self.scope = {
            "type": "http",
            "asgi": {"version": "3.0", "spec_version": "2.3"},  # as uvicorn says
            "http_version": "1.1",
            "method": "POST",
            "scheme": "http",
            "path": path,
            "raw_path": path.encode(),
            "query_string": b"",
            "root_path": "",
            "headers": [
                (b"host", b"127.0.0.1"),
                (b"content-type", b"application/json"),
                (b"content-length", str(len(self.data)).encode()),
            ],
            "client": ("127.0.0.1", 50000),
            "server": ("127.0.0.1", 80),
        }
        self.sent: list[dict[str, Any]] = []
        self._read = False
        self._gone = asyncio.Event()

    def leave(self) -> None:
        self._gone.set()

    async def receive(self) -> dict[str, Any]:
        if not self._read:
            self._read = True
            return {"type": "http.request", "body": self.data, "more_body": False}
        await self._gone.wait()
        return {"type": "http.disconnect"}

    async def send(self, message: dict[str, Any]) -> None:
        self.sent.append(dict(message))
        if message["type"] == "http.response.body" and not message.get("more_body", False):
            self.leave()  # the server reports a disconnect once the response is complete


async def _abandon(app: Any, runner_busy: Any, path: str, body: dict[str, Any]) -> dict[str, Any]:
    client = _Client(path, body)
    task = asyncio.ensure_future(app(client.scope, client.receive, client.send))
    for _ in range(200):  # the request reaches its runner
        await asyncio.sleep(0.01)
        if runner_busy() == 1:
            break
    busy = runner_busy()
    client.leave()
    loop = asyncio.get_running_loop()
    left = loop.time()
    try:
        await asyncio.wait_for(asyncio.shield(task), 2.0)
    except TimeoutError:
        task.cancel()
        return {"busy": busy, "returned": False}
    for _ in range(100):
        if runner_busy() == 0:
            break
        await asyncio.sleep(0.01)
    return {"busy": busy, "returned": True, "freed": runner_busy() == 0,
            "seconds": loop.time() - left}  # fmt: skip


def _run_abandoned(s: FakeService, path: str, body: dict[str, Any]) -> dict[str, Any]:
    s.launcher.endless = True

    def busy() -> int:
        return s.launcher.started[0].busy if s.launcher.started else 0

    out = s.client.portal.call(_abandon, s.app, busy, path, body)  # type: ignore[union-attr]
    scheduler = s.app.state.service.scheduler
    out["refs"] = [e.refs for e in scheduler.loaded()]
    return out


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
@pytest.mark.parametrize(("path", "body"), ROUTES, ids=[p for p, _ in ROUTES])
def test_a_client_that_goes_away_cancels_its_generation(
    fake_service: FakeService, path: str, body: dict[str, Any], stream: bool
) -> None:
    out = _run_abandoned(fake_service, path, {**body, "stream": stream})
    assert out["busy"] == 1, "the generation never started"
    assert out["returned"], "the route went on after its client had gone"
    assert out["freed"] and out["refs"] == [0], out


@pytest.mark.parametrize(("path", "body"), EMBEDDINGS, ids=[p for p, _ in EMBEDDINGS])
def test_a_client_that_goes_away_cancels_its_embedding(
    fake_service: FakeService, path: str, body: dict[str, Any]
) -> None:
    out = _run_abandoned(fake_service, path, body)
    assert out["busy"] == 1 and out["returned"] and out["freed"] and out["refs"] == [0], out


def test_a_complete_answer_is_not_cancelled_by_the_close_that_follows(
    fake_service: FakeService,
) -> None:
    """The server reports a disconnect once the response is sent: nothing is cancelled, the
    stream's background close runs (the lease is released)."""

    async def whole() -> list[dict[str, Any]]:
        client = _Client("/api/chat", {"model": "tiny", "messages": CHAT, "stream": True})
        await fake_service.app(client.scope, client.receive, client.send)
        return client.sent

    sent = fake_service.client.portal.call(whole)  # type: ignore[union-attr]
    body = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
    lines = [json.loads(x) for x in body.decode().splitlines() if x.strip()]
    assert sent[0]["status"] == 200 and lines[-1]["done"] is True
    scheduler = fake_service.app.state.service.scheduler
    assert [e.refs for e in scheduler.loaded()] == [0]


def test_busy_slots_in_ps_come_from_the_runner(fake_service: FakeService) -> None:
    c = fake_service.client
    answer = c.post("/api/generate", json={"model": "tiny", "prompt": "hi", "stream": False})
    assert answer.is_success
    (entry,) = c.get("/api/ps").json()["models"]
    assert entry["hearth"]["busy_slots"] == 0 and entry["hearth"]["active_requests"] == 0
    fake_service.launcher.started[0].busy = 3
    (entry,) = c.get("/api/ps").json()["models"]
    assert entry["hearth"]["busy_slots"] == 3 and entry["hearth"]["passes"] == 1
