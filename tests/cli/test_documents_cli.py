"""`hearth run MODEL --attach FILE` against a real `hearth serve` (the default model): a fact
stated once deep in a PDF far larger than the context is found and cited by its page (full
text alone, and hybrid with vectors from /api/embed); a document that fits goes whole; an
encrypted PDF is a sentence."""

from __future__ import annotations

import pytest
from documents.make_documents import FACT_QUESTION, encrypted_pdf, headed_docx, long_pdf

from support.cli import hearth

pytestmark = pytest.mark.slow

MODEL = "gemma3:270m"


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    return long_pdf(tmp_path_factory.mktemp("cli-docs") / "annual-report.pdf", 120, 87)


def _run(server, *args: str):
    return hearth("run", MODEL, *args, "--num-ctx", "2048", "--num-predict", "24",
                  "--temperature", "0", server=server)  # fmt: skip


def test_a_long_pdf_is_searched_and_the_page_cited(live_server, report):
    out = _run(live_server, FACT_QUESTION, "--attach", str(report))
    assert out.returncode == 0, out.stderr
    assert "[annual-report.pdf: 120 pages, searched]" in out.stderr
    assert "Sources: [1] annual-report.pdf, page 87" in out.stderr
    assert out.stdout.strip()  # the model answered
    assert "(the conversation was cut to fit the context" not in out.stderr


def test_hybrid_search_through_the_services_embeddings(live_server, tmp_path, tiny_llama_path):
    # the tiny llama embeds (its vectors mean nothing, the path is what is tested): every chunk
    # of a 12-page PDF (~10,000 tokens, five times the context) goes through /api/embed
    made = hearth("create", "tiny-embed", "-f", str(tiny_llama_path), "--link", server=live_server)
    assert made.returncode == 0, made.stderr
    short = long_pdf(tmp_path / "minutes.pdf", pages=12, fact_page=9)
    out = _run(live_server, FACT_QUESTION, "--attach", str(short), "--embed-model", "tiny-embed")
    assert out.returncode == 0, out.stderr
    assert "[minutes.pdf: 12 pages, searched]" in out.stderr
    assert "no embeddings" not in out.stderr
    assert "Sources: [1] minutes.pdf, page 9" in out.stderr


def test_a_short_document_goes_whole_and_bad_files_are_sentences(live_server, tmp_path):
    trial = headed_docx(tmp_path / "trial.docx")
    out = _run(live_server, "What was the yield?", "--attach", str(trial))
    assert out.returncode == 0, out.stderr
    assert "[trial.docx: 4 sections, whole]" in out.stderr
    assert "Sources: trial.docx, Results" in out.stderr
    locked = _run(live_server, "What is in it?", "--attach", str(encrypted_pdf(tmp_path / "s.pdf")))
    assert locked.returncode == 1 and "Traceback" not in locked.stderr
    assert "hearth: s.pdf is protected by a password" in locked.stderr
    # a picture goes as an image: this text-only model refuses it with the service's sentence
    from PIL import Image

    picture = tmp_path / "chart.png"
    Image.new("RGB", (8, 8), (200, 40, 40)).save(picture)
    seen = _run(live_server, "What is this?", "--attach", str(picture))
    assert seen.returncode == 1 and "Traceback" not in seen.stderr
    assert "image" in seen.stderr.lower()
