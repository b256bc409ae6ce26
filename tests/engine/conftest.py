"""Fixtures the engine and runner tests share."""

from __future__ import annotations

import pytest

from hearth.engine.gguf import GGUFFile
from hearth.engine.tokenizer import load_tokenizer


@pytest.fixture(scope="module")
def tok(tiny_llama_path):
    """The tiny llama's tokenizer (tests/conftest.py writes the model)."""
    return load_tokenizer(GGUFFile(tiny_llama_path).metadata)
