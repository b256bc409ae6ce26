"""A tool call and its result in the transcript (a role "tool" message), collapsed to one line
("▸ Used read_file · files") that opens to the arguments, the result text and its images;
and the approval card that asks before a call runs."""

from __future__ import annotations

import json
from typing import Any

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QFontDatabase, QShowEvent
from PySide6.QtWidgets import (
    QFrame,
    QHBoxLayout,
    QLabel,
    QPlainTextEdit,
    QPushButton,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from .bits import thumbnail_row

__all__ = ["ToolCallView", "ApprovalCard", "arguments_text", "ONCE", "ALWAYS", "SERVER", "DENY"]

# The user's answers on the approval card (the chat controller maps them to the loop's Decision).
ONCE, ALWAYS, SERVER, DENY = "allow_once", "allow_always", "allow_server", "deny"

_RESULT_LINES = 14  # the result box's height before it scrolls


def arguments_text(arguments: Any) -> str:
    """A call's arguments as indented JSON (as the model sent them)."""
    try:
        return json.dumps(arguments, indent=2, ensure_ascii=False)
    except (TypeError, ValueError):
        return str(arguments)


class _CodeBox(QPlainTextEdit):
    """Read-only monospace text, as tall as its lines up to `most` (then it scrolls); the
    height is measured again once shown, in the font the style sheet gave it."""

    def __init__(self, most: int) -> None:
        super().__init__()
        self.most = most

    def show_text(self, text: str) -> None:
        self.setPlainText(text)
        self._fit()

    def _fit(self) -> None:
        text = self.toPlainText()
        n = min(self.most, max(1, text.count("\n") + 1))
        chrome = int(self.document().documentMargin() * 2) + self.frameWidth() * 2 + 6
        self.setFixedHeight(self.fontMetrics().lineSpacing() * n + chrome)

    def showEvent(self, e: QShowEvent) -> None:
        super().showEvent(e)
        self._fit()


def _code_box(name: str, lines: int) -> _CodeBox:
    box = _CodeBox(lines)
    box.setReadOnly(True)
    box.setAccessibleName(name)
    box.setObjectName("ToolText")
    box.setFont(QFontDatabase.systemFont(QFontDatabase.SystemFont.FixedFont))
    box.setLineWrapMode(QPlainTextEdit.LineWrapMode.WidgetWidth)
    return box


class ToolCallView(QFrame):
    """One call and its result. `set_tool(content, tool, images)` shows a role "tool"
    message: `tool` is its record (call_id, name, server, arguments, decision, is_error,
    truncated), `content` the result text."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("ToolCall")
        lay = QVBoxLayout(self)
        lay.setContentsMargins(0, 0, 0, 0)
        lay.setSpacing(4)
        self.toggle = QToolButton()
        self.toggle.setCheckable(True)
        self.toggle.setToolButtonStyle(Qt.ToolButtonStyle.ToolButtonTextOnly)
        self.toggle.setCursor(Qt.CursorShape.PointingHandCursor)
        self.toggle.setAccessibleName(self.tr("Show or hide the tool call and its result"))
        lay.addWidget(self.toggle, 0, Qt.AlignmentFlag.AlignLeft)
        self.details = QFrame()
        self.details.setObjectName("ThinkingBox")
        dlay = QVBoxLayout(self.details)
        dlay.setContentsMargins(12, 0, 0, 0)
        dlay.addWidget(QLabel(self.tr("Arguments")))
        self.arguments = _code_box(self.tr("Tool call arguments"), 10)
        dlay.addWidget(self.arguments)
        self.result_title = QLabel(self.tr("Result"))
        dlay.addWidget(self.result_title)
        self.result = _code_box(self.tr("Tool result"), _RESULT_LINES)
        dlay.addWidget(self.result)
        self.pictures = QWidget()
        self.pictures_lay = QHBoxLayout(self.pictures)
        self.pictures_lay.setContentsMargins(0, 0, 0, 0)
        dlay.addWidget(self.pictures)
        self.thumbnails: list[QLabel] = []
        lay.addWidget(self.details)
        self.details.hide()
        self.toggle.toggled.connect(self._on_toggled)
        self._summary = ""
        self._images: list[bytes] = []

    def set_tool(self, content: str, tool: dict[str, Any], images: list[bytes]) -> None:
        name = str(tool.get("name") or "?")
        server = str(tool.get("server") or "")
        decision = str(tool.get("decision") or "")
        if decision == DENY:
            outcome = self.tr("denied")
        elif tool.get("is_error"):
            outcome = self.tr("failed")
        else:
            outcome = ""
        if tool.get("truncated"):
            outcome = ", ".join(x for x in (outcome, self.tr("result cut to fit")) if x)
        head = self.tr("Used %1").replace("%1", name) if decision != DENY else name
        self._summary = " · ".join(x for x in (head, server, outcome) if x)
        self.arguments.show_text(arguments_text(tool.get("arguments") or {}))
        self.result.show_text(content)
        if images != self._images:
            self._images = list(images)
            self._show_images()
        self.setAccessibleName(self.tr("Tool call: %1").replace("%1", self._summary))
        self._on_toggled(self.toggle.isChecked())

    def _show_images(self) -> None:
        while self.pictures_lay.count():
            taken = self.pictures_lay.takeAt(0)
            old = taken.widget() if taken is not None else None
            if old is not None:
                old.deleteLater()
        row, self.thumbnails = thumbnail_row(self._images)
        self.pictures_lay.addWidget(row)
        self.pictures.setVisible(bool(self._images))

    def _on_toggled(self, open_: bool) -> None:
        self.toggle.setText(("▾ " if open_ else "▸ ") + self._summary)
        self.details.setVisible(open_)

    def expanded(self) -> bool:
        """Whether the call is open (its own state: true also while the transcript is hidden)."""
        return not self.details.isHidden()


class ApprovalCard(QFrame):
    """Asks before one call runs: the tool, its server and description, its arguments, and
    Allow once / Always allow this tool / Always allow this server / Deny. `decided` carries
    ONCE, ALWAYS, SERVER or DENY (the "always" answers hold while the server's command or URL
    stays as it is: `hearth.agent.approvals`)."""

    decided = Signal(str)

    def __init__(
        self,
        tool: str,
        server: str,
        description: str,
        arguments: Any,
        parent: QWidget | None = None,
    ) -> None:
        super().__init__(parent)
        self.setObjectName("ApprovalCard")
        self.tool = tool
        lay = QVBoxLayout(self)
        lay.setContentsMargins(14, 12, 14, 12)
        lay.setSpacing(8)
        title = QLabel(
            self.tr("The model wants to use <b>%1</b> from <b>%2</b>.")
            .replace("%1", tool)
            .replace("%2", server)
        )
        title.setWordWrap(True)
        lay.addWidget(title)
        if description:
            about = QLabel(description.strip().splitlines()[0][:300])
            about.setObjectName("Muted")
            about.setWordWrap(True)
            lay.addWidget(about)
        self.arguments = _code_box(self.tr("Arguments of the call"), 12)
        self.arguments.show_text(arguments_text(arguments))
        lay.addWidget(self.arguments)
        row = QHBoxLayout()
        self.allow_btn = QPushButton(self.tr("Allow once"))
        self.allow_btn.setProperty("kind", "primary")
        self.always_btn = QPushButton(self.tr("Always allow this tool"))
        self.server_btn = QPushButton(self.tr("Always allow this server"))
        self.deny_btn = QPushButton(self.tr("Deny"))
        self.allow_btn.setAccessibleName(self.tr("Allow this call once"))
        self.always_btn.setAccessibleName(self.tr("Always allow %1").replace("%1", tool))
        self.server_btn.setAccessibleName(
            self.tr("Always allow every tool of %1").replace("%1", server)
        )
        self.deny_btn.setAccessibleName(self.tr("Deny this call"))
        row.addWidget(self.allow_btn)
        row.addWidget(self.always_btn)
        row.addWidget(self.server_btn)
        row.addStretch(1)
        row.addWidget(self.deny_btn)
        lay.addLayout(row)
        self.allow_btn.clicked.connect(lambda: self._decide(ONCE))
        self.always_btn.clicked.connect(lambda: self._decide(ALWAYS))
        self.server_btn.clicked.connect(lambda: self._decide(SERVER))
        self.deny_btn.clicked.connect(lambda: self._decide(DENY))
        self.setAccessibleName(self.tr("Allow the tool call %1?").replace("%1", tool))

    def _decide(self, answer: str) -> None:
        for b in (self.allow_btn, self.always_btn, self.server_btn, self.deny_btn):
            b.setEnabled(False)
        self.decided.emit(answer)
