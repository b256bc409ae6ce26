"""Image bytes for a chat message: a picture (a paste) encoded as PNG, and which files are
images Hearth can send."""

from __future__ import annotations

from PySide6.QtCore import QBuffer, QByteArray, QIODevice
from PySide6.QtGui import QImage, QImageReader, QImageWriter

__all__ = ["SENT_AS_IS", "attachable_images", "png_bytes"]

# The formats the service reads (server/prompting/images.py); others Qt can read are sent as PNG.
SENT_AS_IS = frozenset({"png", "jpeg", "webp", "gif", "bmp"})


def png_bytes(image: QImage) -> bytes:
    data = QByteArray()
    buf = QBuffer(data)
    buf.open(QIODevice.OpenModeFlag.WriteOnly)
    # QImageWriter, not QImage.save: save's type stubs ask for bytes where it takes a str.
    QImageWriter(buf, QByteArray(b"png")).write(image)
    return bytes(data.data())


def _format(data: bytes) -> str:
    buf = QBuffer()
    buf.setData(QByteArray(data))
    buf.open(QIODevice.OpenModeFlag.ReadOnly)
    fmt = bytes(QImageReader.imageFormat(buf).data()).decode("ascii", "replace").lower()
    return "jpeg" if fmt == "jpg" else fmt


def attachable_images(images: list[bytes]) -> list[bytes]:
    """Those of `images` that Qt can decode, in order, each as the service will take it: PNG,
    JPEG, WebP, GIF and BMP as they are (the model sees the file's own pixels), any other
    format Qt reads (TIFF, ICO, SVG, …) converted to PNG."""
    out = []
    for data in images:
        image = QImage.fromData(data)
        if image.isNull():
            continue
        out.append(data if _format(data) in SENT_AS_IS else png_bytes(image))
    return out
