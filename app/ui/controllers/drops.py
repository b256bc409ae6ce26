"""What a drop or a paste means: a .gguf is imported, an image is attached (vision models), a
document is read to go with the next message."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import QMimeData, QObject
from PySide6.QtGui import QImage

from ...documents import DOCUMENT_SUFFIXES
from .chat import ChatController
from .images import png_bytes
from .models import ModelsController

__all__ = ["DropController", "IMAGE_SUFFIXES"]

IMAGE_SUFFIXES = {".png", ".jpg", ".jpeg", ".webp", ".gif", ".bmp"}


def _local_paths(mime: QMimeData) -> list[Path]:
    return [Path(u.toLocalFile()) for u in mime.urls() if u.isLocalFile()]


class DropController(QObject):
    def __init__(
        self, chat: ChatController, models: ModelsController, parent: QObject | None = None
    ) -> None:
        super().__init__(parent)
        self._chat = chat
        self._models = models

    def kind(self, mime: QMimeData) -> str:
        """'model', 'image', 'document' or '' (not something Hearth takes)."""
        paths = _local_paths(mime)
        if any(p.suffix.lower() == ".gguf" for p in paths):
            return "model"
        if any(p.suffix.lower() in DOCUMENT_SUFFIXES for p in paths):
            return "document"
        if any(p.suffix.lower() in IMAGE_SUFFIXES for p in paths) or mime.hasImage():
            return "image"
        return ""

    def hint(self, mime: QMimeData) -> str:
        kind = self.kind(mime)
        if kind == "model":
            return self.tr("Drop to import this model")
        if kind == "document":
            return self.tr("Drop to attach the document")
        if kind == "image":
            if self._chat.can_see_images():
                return self.tr("Drop to attach the image")
            return self.tr("“%1” cannot see images").replace("%1", self._chat.model)
        return ""

    def handle(self, mime: QMimeData) -> bool:
        paths = _local_paths(mime)
        if paths:
            return self.open_paths(paths)
        if mime.hasImage():
            image = mime.imageData()
            if isinstance(image, QImage) and not image.isNull():
                return self._chat.attach_images([png_bytes(image)])
        return False

    def open_paths(self, paths: list[Path]) -> bool:
        handled = False
        for p in paths:
            if p.suffix.lower() == ".gguf":
                handled = self._models.import_gguf(p) or handled
        documents = [p for p in paths if p.suffix.lower() in DOCUMENT_SUFFIXES]
        if documents:
            handled = self._chat.attach_documents(documents) or handled
        images = [p for p in paths if p.suffix.lower() in IMAGE_SUFFIXES]
        if images:
            data = []
            for p in images:
                try:
                    data.append(p.read_bytes())
                except OSError:
                    continue
            handled = self._chat.attach_images(data) or handled
        return handled
