"""Turning a failed request into a sentence a person can act on."""

from __future__ import annotations

from PySide6.QtCore import QCoreApplication

from ..api_client import ApiError

__all__ = ["friendly_error"]


def _tr(text: str) -> str:
    return QCoreApplication.translate("errors", text)


def friendly_error(err: ApiError, model: str) -> str:
    msg = err.message
    low = msg.lower()
    if err.kind == "cancelled":
        return _tr("Stopped.")
    if err.kind in ("connection", "timeout"):
        return _tr(
            "Lost the connection to the engine (%1). It may have stopped; see the log."
        ).replace("%1", msg)
    if err.status == 404 or "not found" in low:
        return _tr(
            "The model “%1” is not installed. Import a .gguf on the Models page or pick another "
            "model."
        ).replace("%1", model)
    if "memory" in low or "oom" in low or "does not fit" in low:
        return (
            _tr(
                "Not enough memory to run “%1”. Lower the context length or the GPU layers in "
                "Settings, or pick a smaller model."
            ).replace("%1", model)
            + "\n"
            + msg
        )
    if "vision" in low or "image" in low:
        return _tr("“%1” cannot read images: %2").replace("%1", model).replace("%2", msg)
    return _tr("The engine reported an error: %1").replace("%1", msg)
