"""Where the checkout and its tests are, for tests that run `hearth` or read the sources."""

from __future__ import annotations

from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]
REPO = TESTS.parent
APP = REPO / "app"
