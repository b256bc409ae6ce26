"""Image bytes for a chat message: a picture (a paste) encoded as PNG, and which files are
images Qt can read."""

from __future__ import annotations

from PySide6.QtCore import QBuffer, QByteArray, QIODevice
from PySide6.QtGui import QImage, QImageWriter

__all__ = ["png_bytes", "readable_images"]


def png_bytes(image: QImage) -> bytes:
    data = QByteArray()
    buf = QBuffer(data)
    buf.open(QIODevice.OpenModeFlag.WriteOnly)
    # QImageWriter, not QImage.save: save's type stubs ask for bytes where it takes a str.
    QImageWriter(buf, QByteArray(b"png")).write(image)
    return bytes(data.data())


def readable_images(images: list[bytes]) -> list[bytes]:
    """Those of `images` that Qt can decode, in order."""
    return [img for img in images if not QImage.fromData(img).isNull()]
