"""Tiny vision models for tests against libmtmd: built, or the test skipped with the reason."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import pytest

from hearth.plugins.testing import ConverterUnavailableError
from hearth.plugins.testing.llamacpp_mtmd import libmtmd_missing

T = TypeVar("T")


def build_or_skip(build: Callable[[Path], T], folder: Path) -> T:
    """`build(folder)`; the test is skipped when llama-cpp-python lacks libmtmd or llama.cpp's
    converter cannot be fetched."""
    missing = libmtmd_missing()
    if missing:
        pytest.skip(missing)
    try:
        return build(folder)
    except ConverterUnavailableError as e:
        pytest.skip(str(e))
