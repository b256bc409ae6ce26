"""Server test fixtures: an in-process app on fake runners, and a live `hearth serve`.

The fake runner (fakes.py) answers like `RunnerProcess` without loading a model, so the API
layers, scheduler and error paths are tested in milliseconds. Real-model tests use
`live_server` (tests/conftest.py), a `hearth serve` subprocess on the default model.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from hearth.server.app import create_app
from hearth.server.config import ServerConfig

from .fakes import FakeLauncher, FakeService, add_model


@pytest.fixture
def fake_service(tmp_path: Path, tiny_llama_path: Path) -> Iterator[FakeService]:
    """An in-process app with `tiny:latest` (the tiny llama) on fake runners."""
    yield from _fake_service(tmp_path, tiny_llama_path, ServerConfig())


def _fake_service(tmp_path: Path, gguf: Path, config: ServerConfig) -> Iterator[FakeService]:
    launcher = FakeLauncher()
    app = create_app(
        config,
        models_dir=tmp_path / "models",
        launcher=launcher,
        register_default=False,
        available_memory=lambda: None,
    )
    store = app.state.service.store
    add_model(store, "tiny", gguf)
    with TestClient(app, base_url="http://127.0.0.1") as client:
        yield FakeService(client, launcher, store, app)


@pytest.fixture
def make_fake_service(tmp_path: Path, tiny_llama_path: Path) -> Iterator[Any]:
    """Like fake_service, with a ServerConfig of your own: make_fake_service(config)."""
    gens: list[Iterator[FakeService]] = []

    def make(config: ServerConfig) -> FakeService:
        gen = _fake_service(tmp_path / f"s{len(gens)}", tiny_llama_path, config)
        gens.append(gen)
        return next(gen)

    yield make
    for gen in gens:
        for _ in gen:
            pass
