"""Reading documents the tests write: page numbers, headings, scanned pages, encrypted and
damaged files, the limits, and the text formats."""

from __future__ import annotations

import pytest
from make_documents import (
    FACT,
    FACT_PAGE,
    LONG_PAGES,
    damaged_docx,
    damaged_pdf,
    encrypted_pdf,
    headed_docx,
    scanned_pdf,
)

from hearth.documents import DocumentError, read_document
from hearth.documents import readers as readers_module
from hearth.documents.chunking import CHUNK_CHARS, chunk_sections


def _flat(text: str) -> str:
    return " ".join(text.split())


def test_a_pdf_is_read_page_by_page(long_pdf_path):
    doc = read_document(long_pdf_path)
    assert doc.kind == "pdf" and doc.pages == LONG_PAGES and doc.notes == []
    assert [s.label for s in doc.sections] == [f"page {n}" for n in range(1, LONG_PAGES + 1)]
    holding = [s.label for s in doc.sections if _flat(FACT) in _flat(s.text)]
    assert holding == [f"page {FACT_PAGE}"]
    assert doc.extent() == f"{LONG_PAGES} pages"


def test_chunks_keep_their_page_and_rebuild_the_text(long_pdf_path):
    doc = read_document(long_pdf_path)
    chunks = chunk_sections(doc.sections)
    assert all(len(c.text) <= CHUNK_CHARS for c in chunks)
    assert [c.position for c in chunks] == list(range(len(chunks)))
    for section in doc.sections[:5]:
        assert "".join(c.text for c in chunks if c.section == section.label) == section.text


def test_a_scanned_page_is_said_not_silently_empty(tmp_path):
    doc = read_document(scanned_pdf(tmp_path / "inspection.pdf"))
    assert doc.pages == 3
    assert "Page 1 of the inspection report" in doc.sections[0].text
    assert doc.sections[1].text == "" and "Page 3" in doc.sections[2].text
    assert (
        len(doc.notes) == 1 and "page 2" in doc.notes[0] and "without a text layer" in doc.notes[0]
    )


def test_an_encrypted_pdf_gets_a_sentence(tmp_path):
    with pytest.raises(DocumentError, match="protected by a password"):
        read_document(encrypted_pdf(tmp_path / "salaries.pdf"))


def test_a_pdf_encrypted_with_the_empty_password_is_read(tmp_path):
    doc = read_document(encrypted_pdf(tmp_path / "open.pdf", password=""))
    assert "Confidential salary table" in doc.sections[0].text


@pytest.mark.parametrize(
    ("name", "make"),
    [
        ("cut.pdf", lambda p, src: damaged_pdf(p, src)),
        ("garbage.pdf", lambda p, src: damaged_pdf(p)),
        ("broken.docx", lambda p, src: damaged_docx(p)),
    ],
)
def test_a_damaged_file_gets_a_sentence(tmp_path, long_pdf_path, name, make):
    path = make(tmp_path / name, long_pdf_path)
    with pytest.raises(DocumentError, match=f"^{name} is damaged"):
        read_document(path)


def test_a_docx_is_split_at_its_headings(tmp_path):
    doc = read_document(headed_docx(tmp_path / "trial.docx"))
    assert [s.label for s in doc.sections] == [
        "Field Trial Report",
        "Method",
        "Method › Irrigation",
        "Results",
    ]
    assert "18 millimetres" in doc.sections[2].text
    assert "Plot | Yield" in doc.sections[3].text  # tables are read too


def test_the_limits_are_sentences(tmp_path, long_pdf_path, monkeypatch):
    monkeypatch.setattr(readers_module, "MAX_FILE_BYTES", 1000)
    with pytest.raises(DocumentError, match="documents of up to 0 MiB|MiB can be attached"):
        read_document(long_pdf_path)
    monkeypatch.undo()
    from hearth.documents import pdf as pdf_module

    monkeypatch.setattr(pdf_module, "MAX_PAGES", 50)
    with pytest.raises(DocumentError, match=f"has {LONG_PAGES} pages; .* up to 50 pages"):
        read_document(long_pdf_path)
    with pytest.raises(DocumentError, match="does not read “.exe” files"):
        read_document(tmp_path / "setup.exe")
    (tmp_path / "blank.txt").write_text("  \n")
    with pytest.raises(DocumentError, match="is empty"):
        read_document(tmp_path / "blank.txt")
    (tmp_path / "binary.txt").write_bytes(b"\x00\x01\x02" * 10)
    with pytest.raises(DocumentError, match="not a text file"):
        read_document(tmp_path / "binary.txt")


def test_text_formats(tmp_path):
    html = tmp_path / "page.html"
    html.write_text(
        "<html><head><title>T</title><style>p{color:red}</style></head><body>"
        "<script>var secret = 1;</script><h1>Intro</h1><p>Hello &amp; welcome.</p>"
        "<h2>Prices</h2><table><tr><td>tea</td><td>3 €</td></tr></table></body></html>"
    )
    doc = read_document(html)
    assert [s.label for s in doc.sections] == ["Intro", "Intro › Prices"]
    text = "\n".join(s.text for s in doc.sections)
    assert "Hello & welcome." in text and "tea | 3 €" in text
    assert "secret" not in text and "color" not in text
    md = tmp_path / "notes.md"
    md.write_text("Preface.\n# Setup\nRun it.\n```\n# not a heading\n```\n## Linux\napt.\n")
    assert [s.label for s in read_document(md).sections] == ["start", "Setup", "Setup › Linux"]
    csv_file = tmp_path / "sales.csv"
    csv_file.write_text("region,amount\n" + "".join(f"r{i},{i}\n" for i in range(90)))
    sections = read_document(csv_file).sections
    assert [s.label for s in sections] == ["rows 2–41", "rows 42–81", "rows 82–91"]
    assert all(s.text.startswith("region,amount\n") for s in sections)
    code = tmp_path / "tool.py"
    code.write_text("".join(f"x{i} = {i}\n" for i in range(50)))
    doc = read_document(code)
    assert doc.kind == "code" and [s.label for s in doc.sections] == ["lines 1–40", "lines 41–50"]
    latin = tmp_path / "old.txt"
    latin.write_bytes("café crème".encode("cp1252"))
    assert read_document(latin).sections[0].text == "café crème"
