"""Documents the tests (and bench/documents.py) write: a long PDF with a text layer that states
one fact once, deep inside; a PDF with a scanned page (an image, no text); an encrypted PDF; a
DOCX with headings; damaged files; a zip-bomb DOCX. fpdf2 writes the PDFs, pypdf encrypts,
python-docx writes the DOCX."""

from __future__ import annotations

import io
import random
import zlib
from pathlib import Path

__all__ = [
    "FACT",
    "FACT_PAGE",
    "FACT_QUESTION",
    "LONG_PAGES",
    "bomb_docx",
    "damaged_docx",
    "damaged_pdf",
    "declare_size",
    "encrypted_pdf",
    "headed_docx",
    "long_pdf",
    "scanned_pdf",
    "scanned_text_pdf",
    "text_picture",
]

# The long PDF (conftest.py's long_pdf_path): its pages, and the page that states FACT.
LONG_PAGES = 120
FACT_PAGE = 87

# Stated once, on one page; the question shares its rare words, the filler never uses them.
FACT = (
    "The Harbour Commission approved 4,812,000 kroner for restoring the Skagen lighthouse, "
    "to be finished before the autumn storms."
)
FACT_QUESTION = "How much money did the Harbour Commission approve for the Skagen lighthouse?"

_SYLLABLES = ["ka", "lo", "mi", "ne", "ru", "sa", "ti", "vo", "be", "da", "fe", "gu", "po", "zi"]


def _filler(rng: random.Random, words: int) -> str:
    """Sentences of made-up words: text with a real vocabulary's spread, sharing no word with
    FACT_QUESTION (every made-up word has three or more syllables)."""
    out, sentence = [], []
    for _ in range(words):
        sentence.append("".join(rng.choice(_SYLLABLES) for _ in range(rng.randint(3, 4))))
        if len(sentence) >= rng.randint(8, 16):
            out.append(" ".join(sentence).capitalize() + ".")
            sentence = []
    return " ".join(out)


def _pdf() -> object:
    from fpdf import FPDF

    pdf = FPDF(format="A4")
    pdf.set_auto_page_break(False)
    pdf.set_font("Helvetica", size=10)
    return pdf


def long_pdf(path: Path, pages: int = 300, fact_page: int = 217, words: int = 380) -> Path:
    """A PDF of `pages` pages of text (about 2,800 characters each); FACT is on `fact_page`
    only, in the middle of its text."""
    rng = random.Random(7)
    pdf = _pdf()
    for n in range(1, pages + 1):
        pdf.add_page()  # type: ignore[attr-defined]
        text = _filler(rng, words)
        if n == fact_page:
            half = len(text) // 2
            cut = text.index(". ", half) + 2
            text = text[:cut] + FACT + " " + text[cut:]
        pdf.multi_cell(0, 4.2, text)  # type: ignore[attr-defined]
    pdf.output(str(path))  # type: ignore[attr-defined]
    return path


def _png(width: int = 400, height: int = 300) -> bytes:
    from PIL import Image, ImageDraw

    img = Image.new("RGB", (width, height), (250, 250, 245))
    draw = ImageDraw.Draw(img)
    for y in range(20, height - 20, 14):  # lines of "print" a scanner would see
        draw.rectangle([30, y, width - 30 - (y * 7) % 90, y + 6], fill=(40, 40, 40))
    out = io.BytesIO()
    img.save(out, "PNG")
    return out.getvalue()


def scanned_pdf(path: Path) -> Path:
    """Three pages: text, a scanned page (an image with no text layer), text."""
    pdf = _pdf()
    for n in (1, 2, 3):
        pdf.add_page()  # type: ignore[attr-defined]
        if n == 2:
            pdf.image(io.BytesIO(_png()), x=10, y=10, w=190)  # type: ignore[attr-defined]
        else:
            pdf.multi_cell(0, 5, f"Page {n} of the inspection report. The roof is sound.")  # type: ignore[attr-defined]
    pdf.output(str(path))  # type: ignore[attr-defined]
    return path


def text_picture(lines: list[str], width: int = 800, height: int = 500) -> bytes:
    """A PNG of `lines` of black text on white (a photographed or scanned page of print)."""
    from PIL import Image, ImageDraw, ImageFont

    img = Image.new("RGB", (width, height), (255, 255, 255))
    draw = ImageDraw.Draw(img)
    font = ImageFont.load_default(size=36)
    for n, line in enumerate(lines):
        draw.text((40, 40 + 60 * n), line, fill=(0, 0, 0), font=font)
    out = io.BytesIO()
    img.save(out, "PNG")
    return out.getvalue()


def scanned_text_pdf(path: Path, pictures: list[bytes], text_first: bool = True) -> Path:
    """A PDF whose pages are a text page (if `text_first`), then one page per picture: the
    picture alone, 190 mm wide at (10 mm, 10 mm), no text layer (a scanned page)."""
    pdf = _pdf()
    if text_first:
        pdf.add_page()  # type: ignore[attr-defined]
        pdf.multi_cell(0, 5, "Page 1 of the supplier file. The invoices follow.")  # type: ignore[attr-defined]
    for picture in pictures:
        pdf.add_page()  # type: ignore[attr-defined]
        pdf.image(io.BytesIO(picture), x=10, y=10, w=190)  # type: ignore[attr-defined]
    pdf.output(str(path))  # type: ignore[attr-defined]
    return path


def encrypted_pdf(path: Path, password: str = "secret") -> Path:
    """A one-page PDF that opens only with `password` (pypdf's writer, AES-free RC4-128)."""
    from pypdf import PdfReader, PdfWriter

    plain = path.with_suffix(".plain.pdf")
    pdf = _pdf()
    pdf.add_page()  # type: ignore[attr-defined]
    pdf.multi_cell(0, 5, "Confidential salary table.")  # type: ignore[attr-defined]
    pdf.output(str(plain))  # type: ignore[attr-defined]
    writer = PdfWriter(clone_from=PdfReader(plain))
    writer.encrypt(user_password=password, owner_password="owner", algorithm="RC4-128")
    with path.open("wb") as f:
        writer.write(f)
    plain.unlink()
    return path


def headed_docx(path: Path) -> Path:
    """A DOCX with a title, headings two levels deep, body text and a table."""
    import docx

    d = docx.Document()
    d.add_heading("Field Trial Report", level=0)
    d.add_paragraph("This report covers the spring trial of the drought-tolerant barley.")
    d.add_heading("Method", level=1)
    d.add_paragraph("Plots were sown on 12 March in loam soil.")
    d.add_heading("Irrigation", level=2)
    d.add_paragraph("Each plot received 18 millimetres of water per week.")
    d.add_heading("Results", level=1)
    d.add_paragraph("The yield was 6.4 tonnes per hectare, up from 5.1 the year before.")
    table = d.add_table(rows=2, cols=2)
    table.cell(0, 0).text, table.cell(0, 1).text = "Plot", "Yield"
    table.cell(1, 0).text, table.cell(1, 1).text = "A", "6.4"
    d.save(str(path))
    return path


def damaged_pdf(path: Path, source: Path | None = None) -> Path:
    """A PDF cut off in the middle (a download that stopped), or garbage with a PDF header."""
    data = source.read_bytes()[:400] if source else b"%PDF-1.7\n" + bytes(range(256)) * 4
    path.write_bytes(data)
    return path


def damaged_docx(path: Path) -> Path:
    path.write_bytes(b"PK\x03\x04 this is not really a zip archive")
    return path


class _RepeatingDeflate:
    """A raw deflate compressor for data that repeats one block: each block ends with a full
    flush (the compressor forgets what came before), so a block already seen compresses to the
    same bytes, kept from the first time. Written through zipfile, a gigabyte takes a second."""

    def __init__(self) -> None:
        self._z = zlib.compressobj(9, zlib.DEFLATED, -15)
        self._seen: dict[bytes, bytes] = {}

    def compress(self, data: bytes) -> bytes:
        if data not in self._seen:
            self._seen[data] = self._z.compress(data) + self._z.flush(zlib.Z_FULL_FLUSH)
        return self._seen[data]

    def flush(self) -> bytes:
        return self._z.flush()


def bomb_docx(path: Path, unpacked: int, declared: int | None = None) -> Path:
    """A zip-bomb DOCX: a real document (`headed_docx`) whose word/document.xml is replaced by
    `unpacked` bytes of one repeated byte, deflated (1 GiB packs into ~1 MiB; the writer holds
    one MiB at a time). `declared`: the size the zip's headers then claim for that part (a zip
    that lies)."""
    import zipfile

    source = headed_docx(path.with_name(path.stem + "-source.docx"))
    with zipfile.ZipFile(source) as src, zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as out:
        for info in src.infolist():
            if info.filename != "word/document.xml":
                out.writestr(info, src.read(info))
        with out.open("word/document.xml", "w") as part:
            part._compressor = _RepeatingDeflate()  # zipfile's deflate, only faster here
            block = b"A" * (1 << 20)
            for start in range(0, unpacked, len(block)):
                part.write(block[: unpacked - start])
    source.unlink()
    if declared is not None:
        declare_size(path, b"word/document.xml", declared)
    return path


def declare_size(path: Path, name: str | bytes, size: int) -> None:
    """Rewrite the uncompressed size the zip's local and central headers give for part
    `name` (the data and its checksum stay as they are)."""
    import struct

    data = bytearray(path.read_bytes())
    name = name.encode() if isinstance(name, str) else name
    for signature, name_at, size_at in ((b"PK\x03\x04", 26, 22), (b"PK\x01\x02", 28, 24)):
        at = data.find(signature)
        while at >= 0:
            length = struct.unpack_from("<H", data, at + name_at)[0]
            start = at + name_at + (4 if signature == b"PK\x03\x04" else 18)
            if bytes(data[start : start + length]) == name:
                struct.pack_into("<I", data, at + size_at, size)
            at = data.find(signature, at + 4)
    path.write_bytes(bytes(data))
