"""Turning a failed request into a sentence a person can act on."""

from __future__ import annotations

from PySide6.QtCore import QCoreApplication

from ..api_client import ApiError

__all__ = ["friendly_error"]


def _tr(text: str) -> str:
    return QCoreApplication.translate("errors", text)


# How services say that a model has no vision: Hearth ("<model> does not support images"),
# Ollama ("... does not support image input", "missing data required for image input").
_NO_VISION = ("does not support images", "support image input", "required for image input")


def _sentence(text: str) -> str:
    """`text` ending with a full stop (not capitalised: it may begin with a model's name)."""
    text = text.strip()
    return text if text.endswith((".", "!", "?")) else text + "."


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
    if any(s in low for s in _NO_VISION):
        # The service's sentence ("gemma3:270m does not support images"), then what to do.
        return (
            _sentence(msg)
            + " "
            + _tr(
                "Pick a model that can see images (the Models page shows “vision”), then press "
                "Try again: your message and its pictures are kept."
            )
        )
    if "vision" in low or "image" in low:
        return _tr("“%1” could not use the picture: %2").replace("%1", model).replace("%2", msg)
    return _tr("The engine reported an error: %1").replace("%1", msg)
