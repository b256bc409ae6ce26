"""A model whose Hearth plugin refuses the file falls back to the llama.cpp engine (issue 34):
the service starts the runner again on llama.cpp, answers the request (never a 500), logs a
sentence, and `/api/show` says which engine runs the model and why from then on. A choice
that was not automatic (the model's `engine` parameter, HEARTH_ENGINE) and a start that failed
for another reason (memory) do not fall back."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from hearth.server.app import create_app
from hearth.server.config import ServerConfig
from hearth.server.store import engines

from .fakes import FakeLauncher, add_model

REFUSAL = "tiny.gguf lacks tensor 'blk.0.attn_q.weight', which the llama architecture needs"


@pytest.fixture
def make(tmp_path: Path, tiny_llama_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """make(**model params) -> (client, launcher), the tiny llama model named "tiny"."""
    monkeypatch.setattr(engines, "llamacpp_installed", lambda: True)
    clients: list[TestClient] = []

    def start(**params: bytes) -> tuple[TestClient, FakeLauncher]:
        launcher = FakeLauncher()
        app = create_app(ServerConfig(num_parallel=1), models_dir=tmp_path / f"m{len(clients)}",
                         launcher=launcher, register_default=False)  # fmt: skip
        add_model(app.state.service.store, "tiny", tiny_llama_path, **params)
        client = TestClient(app, base_url="http://127.0.0.1")
        client.__enter__()
        clients.append(client)
        return client, launcher

    yield start
    for client in clients:
        client.__exit__(None, None, None)


def _show(client: TestClient) -> dict[str, Any]:
    response = client.post("/api/show", json={"model": "tiny"})
    assert response.status_code == 200
    return response.json()["hearth"]  # type: ignore[no-any-return]


def test_a_refused_file_runs_on_llamacpp_and_show_says_why(make, caplog) -> None:
    client, launcher = make()
    before = _show(client)
    assert before["engine"] == "hearth"
    assert before["engine_reason"] == "a Hearth plugin runs architecture 'llama'"
    launcher.fail, launcher.refused = REFUSAL, True
    with caplog.at_level(logging.WARNING):
        response = client.post("/api/generate", json={"model": "tiny", "prompt": "hi"})
    assert response.status_code == 200, response.text
    assert [r.options.engine for r in launcher.started] == ["llamacpp"]
    assert f"Hearth's plugin could not load tiny:latest ({REFUSAL}); running it on the " \
        "llama.cpp engine" in caplog.text  # fmt: skip
    after = _show(client)
    assert after["engine"] == "llamacpp"
    assert after["engine_reason"] == (
        f"Hearth's plugin for architecture 'llama' could not load the file ({REFUSAL}); "
        "the llama.cpp engine runs it"
    )
    ps = client.get("/api/ps").json()["models"][0]
    assert ps["hearth"]["engine"] == "llamacpp"
    # The next request runs on the same llama.cpp runner: no second start.
    assert client.post("/api/generate", json={"model": "tiny", "prompt": "x"}).status_code == 200
    assert len(launcher.started) == 1


def test_a_chosen_engine_does_not_fall_back(make) -> None:
    client, launcher = make(params=b'{"engine": "hearth"}')
    launcher.fail, launcher.refused = REFUSAL, True
    response = client.post("/api/generate", json={"model": "tiny", "prompt": "hi"})
    assert response.status_code == 500 and REFUSAL in response.text
    assert launcher.started == [] and _show(client)["engine"] == "hearth"


def test_a_start_without_memory_does_not_fall_back(make) -> None:
    client, launcher = make()
    launcher.fail = "not enough memory: the model needs 9 GiB, 2 GiB are free"
    response = client.post("/api/generate", json={"model": "tiny", "prompt": "hi"})
    assert response.status_code == 500 and launcher.started == []
    assert _show(client)["engine"] == "hearth"
