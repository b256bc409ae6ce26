"""Scanned PDF pages (images without a text layer) read by a vision model: each page is
rendered to a PNG with PDFium (`pypdfium2`), bounded in size, and transcribed once by a model
that can see (the chat's model when it can, else the first installed vision model) through
Hearth's own `/api/chat`. The transcription becomes the page's text, marked FROM_IMAGE, so it
is chunked, indexed, stored with the chat (nothing is rendered or transcribed again when the
chat is reopened) and cited "read from an image of page N".

Without a vision model (or when the service fails) the pages stay empty and the document's
notes say so and name the remedy. Bounded: at most MAX_TRANSCRIBED_PAGES pages a document, a
render at RENDER_DPI with its longer side at most MAX_RENDER_SIDE pixels, at most PAGE_TOKENS
tokens of transcription a page (and at most half the vision model's context).
"""

from __future__ import annotations

import io
import threading
from collections.abc import Callable
from pathlib import Path

from .records import FROM_IMAGE, Document, Section, page_ranges
from .service import ServiceCallError, find_model, post_json

__all__ = [
    "MAX_RENDER_SIDE",
    "MAX_TRANSCRIBED_PAGES",
    "PAGE_TOKENS",
    "RENDER_DPI",
    "SUGGESTED_VISION_MODEL",
    "TRANSCRIBE_PROMPT",
    "ScanProgress",
    "Transcriber",
    "TranscriptionError",
    "read_scanned_pages",
    "render_page",
]

RENDER_DPI = 150  # enough for body text; vision encoders downscale further (Gemma 3: 896 px)
MAX_RENDER_SIDE = 1600  # pixels: a poster-sized page is scaled down to this
MAX_TRANSCRIBED_PAGES = 100  # a long scanned book would take hours: the rest get a note
PAGE_TOKENS = 2048  # a dense page is about 1,100 tokens of text

# The catalog's vision model (hearth.ui.catalog), named in the note when none is installed.
SUGGESTED_VISION_MODEL = "Gemma 3 4B Instruct (hf.co/ggml-org/gemma-3-4b-it-GGUF:Q4_K_M)"

TRANSCRIBE_PROMPT = (
    "Transcribe all text on this page verbatim, in reading order. Keep headings, paragraphs "
    "and lists; write tables as Markdown tables. Do not summarise, translate, correct or "
    "explain anything, and do not describe pictures. Answer with the page's text only; if the "
    "page has no text, answer with nothing."
)

# ScanProgress(page, done, total): page `page` is being transcribed, `done` of `total` so far.
ScanProgress = Callable[[int, int, int], None]

_PDFIUM = threading.Lock()  # PDFium is not thread-safe; the app reads files on several threads


class TranscriptionError(ServiceCallError):
    """The vision model could not transcribe a page (the sentence says why)."""


def render_page(
    path: Path, page: int, dpi: int = RENDER_DPI, max_side: int = MAX_RENDER_SIDE
) -> bytes:
    """Page `page` (1-based) of the PDF at `path` as a PNG, at `dpi` but never more than
    `max_side` pixels on its longer side. Raises ValueError for a page PDFium cannot render."""
    try:
        import pypdfium2 as pdfium
    except ImportError as e:  # a dependency; an environment installed before it lacks it
        raise ValueError("pypdfium2 (PDFium), which renders pages, is not installed") from e

    with _PDFIUM:
        try:
            pdf = pdfium.PdfDocument(str(path))
        except pdfium.PdfiumError as e:
            raise ValueError(f"PDFium cannot open it ({e})") from e
        try:
            if not 1 <= page <= len(pdf):
                raise ValueError(f"it has no page {page}")
            pdf_page = pdf[page - 1]
            width, height = pdf_page.get_size()  # points, 1/72 inch
            scale = min(dpi / 72, max_side / max(width, height, 1.0))
            image = pdf_page.render(scale=scale).to_pil()
            pdf_page.close()
        except pdfium.PdfiumError as e:
            raise ValueError(f"PDFium cannot render page {page} ({e})") from e
        finally:
            pdf.close()
    out = io.BytesIO()
    image.convert("RGB").save(out, "PNG", optimize=False)
    return out.getvalue()


class Transcriber:
    """Transcribes page images with a vision model on the service at `base_url`: `model` when
    given, else `prefer` (the chat's model) when it can see, else the first installed vision
    model, found on first use (one /api/tags and a few /api/show calls, only for a document
    that has scanned pages). `progress`, if given, hears of each page before it is sent."""

    def __init__(
        self,
        base_url: str,
        token: str = "",
        prefer: str = "",
        model: str | None = None,
        progress: ScanProgress | None = None,
        num_predict: int = PAGE_TOKENS,
        timeout: float = 600.0,
    ) -> None:
        self.base_url, self.token, self.prefer = base_url, token, prefer
        self._model = model
        self._sized = False  # num_predict fitted to the model's context yet
        self.progress = progress
        self.num_predict, self.timeout = num_predict, timeout

    def vision_model(self) -> str:
        """The model that reads the pages ('' when the service has none that can see). Its
        context (/api/show's hearth.num_ctx) caps a page's transcription at half of it, so the
        image, the prompt and the text fit without the service cutting them."""
        if self._model is None:
            self._model = find_model(self.base_url, "vision", self.token, self.prefer)
        if self._model and not self._sized:
            self._sized = True
            try:
                show = post_json(
                    self.base_url, "/api/show", {"model": self._model}, self.token, 30.0
                )
                num_ctx = int((show.get("hearth") or {}).get("num_ctx") or 0)
            except (ServiceCallError, AttributeError, TypeError, ValueError):
                num_ctx = 0
            if num_ctx:
                self.num_predict = min(self.num_predict, max(64, num_ctx // 2))
        return self._model

    def request(self, png: bytes) -> dict[str, object]:
        """The /api/chat body that transcribes one page image."""
        import base64

        return {
            "model": self.vision_model(),
            "messages": [
                {
                    "role": "user",
                    "content": TRANSCRIBE_PROMPT,
                    "images": [base64.b64encode(png).decode("ascii")],
                }
            ],
            "stream": False,
            "options": {"temperature": 0, "num_predict": self.num_predict},
        }

    def transcribe(self, png: bytes) -> str:
        """The text of the page image `png`, as the model wrote it (stripped)."""
        reply = post_json(
            self.base_url, "/api/chat", self.request(png), self.token, self.timeout,
            TranscriptionError,
        )  # fmt: skip
        message = reply.get("message") if isinstance(reply, dict) else None
        if not isinstance(message, dict):
            raise TranscriptionError("/api/chat answered without a message")
        return str(message.get("content") or "").strip()


def _no_model_note(pages: list[int]) -> str:
    which = "page" if len(pages) == 1 else "pages"
    verb = "is an image" if len(pages) == 1 else "are images"
    return (
        f"{which} {page_ranges(pages)} {verb} without a text layer (scanned?): Hearth reads text "
        f"from images only with a vision model; install one, such as {SUGGESTED_VISION_MODEL},"
        " and attach the file again to read scanned pages"
    )


def read_scanned_pages(path: Path, document: Document, transcriber: Transcriber | None) -> None:
    """Fill `document`'s scanned pages (document.scanned) with their transcriptions, marked
    FROM_IMAGE, and add notes on what was read and what was not; without a transcriber or a
    vision model the pages stay empty and a note names the remedy. Changes `document`."""
    scanned = list(document.scanned)
    if not scanned:
        return
    model = transcriber.vision_model() if transcriber is not None else ""
    if transcriber is None or not model:
        document.notes.insert(0, _no_model_note(scanned))
        return
    todo, skipped = scanned[:MAX_TRANSCRIBED_PAGES], scanned[MAX_TRANSCRIBED_PAGES:]
    index = {s.label: i for i, s in enumerate(document.sections)}
    read: list[int] = []
    empty: list[int] = []
    failed = ""
    for done, page in enumerate(todo):
        if transcriber.progress is not None:
            transcriber.progress(page, done, len(todo))
        try:
            text = transcriber.transcribe(render_page(path, page))
        except (ValueError, TranscriptionError) as e:
            failed = f"page {page}: {e}"
            skipped = todo[done:] + skipped
            break
        if not text:
            empty.append(page)
            continue
        label = f"page {page}"
        document.sections[index[label]] = Section(label, text, FROM_IMAGE)
        read.append(page)
    notes = []
    if read:
        which, was = ("page", "was") if len(read) == 1 else ("pages", "were")
        notes.append(
            f"{which} {page_ranges(read)} had no text layer and {was} read from an image of"
            f" the page by {model} (a transcription: it may hold errors)"
        )
    if empty:
        notes.append(f"{model} found no text in the image of page(s) {page_ranges(empty)}")
    if skipped:
        why = failed or f"Hearth transcribes at most {MAX_TRANSCRIBED_PAGES} scanned pages a file"
        notes.append(
            f"page(s) {page_ranges(skipped)} are images without a text layer that were not read"
            f" ({why})"
        )
    document.notes[:0] = notes
