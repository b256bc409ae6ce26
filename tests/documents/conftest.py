"""Documents written once per session (the long PDF takes seconds to write)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from make_documents import FACT_PAGE, LONG_PAGES, long_pdf


@pytest.fixture(scope="session")
def long_pdf_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A 120-page PDF (about 340,000 characters: ~100,000 tokens) stating FACT on page 87."""
    return long_pdf(tmp_path_factory.mktemp("docs") / "annual-report.pdf", LONG_PAGES, FACT_PAGE)
