"""The system clipboard, in one place (so the controllers never touch QGuiApplication)."""

from __future__ import annotations

from PySide6.QtGui import QGuiApplication

__all__ = ["copy_text"]


def copy_text(text: str) -> None:
    QGuiApplication.clipboard().setText(text)
