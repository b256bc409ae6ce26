"""One message in the transcript: a user bubble, an assistant reply with its details, or a
tool call with its result (collapsed)."""

from __future__ import annotations

from dataclasses import replace

from PySide6.QtCore import QEvent, Qt, QTimer, Signal
from PySide6.QtGui import QKeyEvent, QResizeEvent
from PySide6.QtWidgets import (
    QFrame,
    QHBoxLayout,
    QLabel,
    QPlainTextEdit,
    QPushButton,
    QSizePolicy,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from ...history.records import ERROR, INTERRUPTED, STOPPED, STREAMING
from ..controllers.reply import format_stats
from ..item_models.conversation import MessageItem
from ..markdown import split_thinking
from ..theme import Palette
from .bits import thumbnail_row
from .documents import SourcesView, chip_row
from .markdown_view import MarkdownView
from .tool_call import ToolCallView

__all__ = ["MessageWidget"]

_RENDER_MS = 60  # streaming re-renders at most ~16 times a second


def _tool(text: str, name: str, tip: str = "") -> QToolButton:
    b = QToolButton()
    b.setText(text)
    b.setAccessibleName(name)
    b.setToolTip(tip or name)
    b.setFocusPolicy(Qt.FocusPolicy.StrongFocus)
    b.setCursor(Qt.CursorShape.PointingHandCursor)
    return b


class _EditBox(QPlainTextEdit):
    submit = Signal()
    cancel = Signal()

    def event(self, e: QEvent) -> bool:
        # Esc cancels the edit here; without this the window's Esc (stop) would take it.
        override = e.type() == QEvent.Type.ShortcutOverride
        if override and isinstance(e, QKeyEvent) and e.key() == Qt.Key.Key_Escape:
            e.accept()
            return True
        return super().event(e)

    def keyPressEvent(self, e: QKeyEvent) -> None:
        if e.key() in (Qt.Key.Key_Return, Qt.Key.Key_Enter) and not (
            e.modifiers() & Qt.KeyboardModifier.ShiftModifier
        ):
            self.submit.emit()
        elif e.key() == Qt.Key.Key_Escape:
            self.cancel.emit()
        else:
            super().keyPressEvent(e)


class MessageWidget(QFrame):
    copy_requested = Signal(int)
    regenerate_requested = Signal(int)
    edit_submitted = Signal(int, str)
    version_requested = Signal(int, int)  # message id, -1 / +1
    code_copied = Signal()

    def __init__(self, item: MessageItem, palette: Palette, parent: QWidget | None = None):
        super().__init__(parent)
        self.item = item
        self._palette = palette
        self._render_timer = QTimer(self, singleShot=True, interval=_RENDER_MS)
        self._render_timer.timeout.connect(self._render)
        self._busy = False
        self.thumbnails: list[QLabel] = []  # the pictures sent with a user message
        self.setObjectName("Message")
        outer = QVBoxLayout(self)
        outer.setContentsMargins(0, 6, 0, 6)
        outer.setSpacing(4)
        if item.role == "user":
            self._build_user(outer)
        elif item.role == "tool":
            self.tool_view = ToolCallView()
            outer.addWidget(self.tool_view)
        else:
            self._build_assistant(outer)
        self._render()

    # -- layout ------------------------------------------------------------------------------

    def _versions_row(self, lay: QHBoxLayout) -> None:
        self.prev_btn = _tool("‹", self.tr("Previous version"))
        self.version_label = QLabel()
        self.version_label.setObjectName("Stats")
        self.next_btn = _tool("›", self.tr("Next version"))
        self.prev_btn.clicked.connect(lambda: self.version_requested.emit(self.item.id, -1))
        self.next_btn.clicked.connect(lambda: self.version_requested.emit(self.item.id, 1))
        for w in (self.prev_btn, self.version_label, self.next_btn):
            lay.addWidget(w)

    def _build_user(self, outer: QVBoxLayout) -> None:
        row = QHBoxLayout()
        row.addStretch(1)
        self.bubble = QFrame()
        self.bubble.setObjectName("UserBubble")
        self.bubble.setSizePolicy(QSizePolicy.Policy.Maximum, QSizePolicy.Policy.Preferred)
        blay = QVBoxLayout(self.bubble)
        blay.setContentsMargins(14, 10, 14, 10)
        if self.item.images:
            pictures, self.thumbnails = thumbnail_row(self.item.images)
            blay.addWidget(pictures)
        self.document_chips: list[QLabel] = []  # the documents sent with a user message
        if self.item.documents:
            documents, self.document_chips = chip_row(self.item.documents)
            blay.addWidget(documents)
        self.text_label = QLabel()
        self.text_label.setWordWrap(True)
        self.text_label.setTextFormat(Qt.TextFormat.PlainText)
        self.text_label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.text_label.setAccessibleName(self.tr("Your message"))
        blay.addWidget(self.text_label)
        row.addWidget(self.bubble)
        outer.addLayout(row)

        self.editor = QWidget()
        elay = QVBoxLayout(self.editor)
        elay.setContentsMargins(0, 0, 0, 0)
        self.edit_box = _EditBox()
        self.edit_box.setAccessibleName(self.tr("Edit your message"))
        self.edit_box.setFixedHeight(96)
        erow = QHBoxLayout()
        hint = QLabel(self.tr("Sends as a new version; the original stays one ‹ away."))
        hint.setObjectName("Stats")
        erow.addWidget(hint)
        erow.addStretch(1)
        cancel = QPushButton(self.tr("Cancel"))
        cancel.setAccessibleName(self.tr("Cancel editing"))
        send = QPushButton(self.tr("Send"))
        send.setProperty("kind", "primary")
        send.setAccessibleName(self.tr("Send edited message"))
        erow.addWidget(cancel)
        erow.addWidget(send)
        elay.addWidget(self.edit_box)
        elay.addLayout(erow)
        self.editor.hide()
        outer.addWidget(self.editor)
        cancel.clicked.connect(self.cancel_edit)
        self.edit_box.cancel.connect(self.cancel_edit)
        send.clicked.connect(self._submit_edit)
        self.edit_box.submit.connect(self._submit_edit)

        actions = QHBoxLayout()
        actions.addStretch(1)
        self._versions_row(actions)
        self.edit_btn = _tool(self.tr("Edit"), self.tr("Edit and resend"))
        self.copy_btn = _tool(self.tr("Copy"), self.tr("Copy message"))
        self.edit_btn.clicked.connect(self.start_edit)
        self.copy_btn.clicked.connect(lambda: self.copy_requested.emit(self.item.id))
        actions.addWidget(self.edit_btn)
        actions.addWidget(self.copy_btn)
        outer.addLayout(actions)

    def _build_assistant(self, outer: QVBoxLayout) -> None:
        head = QHBoxLayout()
        self.role_label = QLabel()
        self.role_label.setObjectName("RoleLabel")
        self.state_label = QLabel()
        self.state_label.setObjectName("Stats")
        head.addWidget(self.role_label)
        head.addWidget(self.state_label)
        head.addStretch(1)
        outer.addLayout(head)

        self.think_btn = _tool("", self.tr("Show or hide the model's reasoning"))
        self.think_btn.setCheckable(True)
        self.think_btn.setToolButtonStyle(Qt.ToolButtonStyle.ToolButtonTextOnly)
        self.thinking_view = MarkdownView(self.tr("Model reasoning"))
        self.think_box = QFrame()
        self.think_box.setObjectName("ThinkingBox")
        tlay = QVBoxLayout(self.think_box)
        tlay.setContentsMargins(12, 0, 0, 0)
        tlay.addWidget(self.thinking_view)
        self.think_box.hide()
        self.think_btn.toggled.connect(self.think_box.setVisible)
        self.think_btn.toggled.connect(self._refresh_think_label)
        outer.addWidget(self.think_btn, 0, Qt.AlignmentFlag.AlignLeft)
        outer.addWidget(self.think_box)

        self.body = MarkdownView(self.tr("Reply"))
        self.body.code_copied.connect(lambda _n: self.code_copied.emit())
        outer.addWidget(self.body)
        self.sources = SourcesView()  # the passages of the documents the reply draws on
        outer.addWidget(self.sources)

        self.error_card = QFrame()
        self.error_card.setObjectName("ErrorCard")
        clay = QHBoxLayout(self.error_card)
        clay.setContentsMargins(12, 8, 12, 8)
        self.error_label = QLabel()
        self.error_label.setWordWrap(True)
        self.error_label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.error_label.setAccessibleName(self.tr("Error"))
        clay.addWidget(self.error_label, 1)
        self.retry_btn = QPushButton(self.tr("Try again"))
        self.retry_btn.setAccessibleName(self.tr("Try this reply again"))
        self.retry_btn.clicked.connect(lambda: self.regenerate_requested.emit(self.item.id))
        clay.addWidget(self.retry_btn, 0, Qt.AlignmentFlag.AlignTop)
        self.error_card.hide()
        outer.addWidget(self.error_card)

        foot = QHBoxLayout()
        self.stats_label = QLabel()
        self.stats_label.setObjectName("Stats")
        self.stats_label.setAccessibleName(self.tr("Reply statistics"))
        foot.addWidget(self.stats_label)
        foot.addStretch(1)
        self._versions_row(foot)
        self.copy_btn = _tool(self.tr("Copy"), self.tr("Copy reply"))
        self.regen_btn = _tool(self.tr("Regenerate"), self.tr("Regenerate reply"))
        self.copy_btn.clicked.connect(lambda: self.copy_requested.emit(self.item.id))
        self.regen_btn.clicked.connect(lambda: self.regenerate_requested.emit(self.item.id))
        foot.addWidget(self.copy_btn)
        foot.addWidget(self.regen_btn)
        outer.addLayout(foot)

    # -- editing -----------------------------------------------------------------------------

    def start_edit(self) -> None:
        if self.item.role != "user":
            return
        self.edit_box.setPlainText(self.item.content)
        self.bubble.hide()
        self.editor.show()
        self.edit_box.setFocus()
        self.edit_box.selectAll()

    def cancel_edit(self) -> None:
        self.editor.hide()
        self.bubble.show()

    def _submit_edit(self) -> None:
        text = self.edit_box.toPlainText()
        self.cancel_edit()
        self.edit_submitted.emit(self.item.id, text)

    # -- content -----------------------------------------------------------------------------

    def set_item(self, item: MessageItem) -> None:
        self.item = item
        if item.state == STREAMING:
            if not self._render_timer.isActive():
                self._render_timer.start()
        else:
            self._render_timer.stop()
            self._render()

    def set_palette(self, palette: Palette) -> None:
        self._palette = palette
        self._render()

    def set_busy(self, busy: bool) -> None:
        """While a reply streams, nothing may change the branch under it."""
        self._busy = busy
        self._render()

    def _render(self) -> None:
        it = self.item
        if it.role == "tool":
            self.tool_view.set_tool(it.content, it.tool, it.images)
            return
        many = it.versions > 1
        for w in (self.prev_btn, self.version_label, self.next_btn):
            w.setVisible(many)
        self.version_label.setText(f"{it.version} / {it.versions}")
        self.prev_btn.setEnabled(it.version > 1 and not self._busy)
        self.next_btn.setEnabled(it.version < it.versions and not self._busy)
        if it.role == "user":
            self.edit_btn.setEnabled(not self._busy)
            self.text_label.setText(it.content)
            self._fit_bubble()
            self.setAccessibleName(self.tr("You said: %1").replace("%1", it.content[:200]))
            return
        self._render_assistant(it)

    def _render_assistant(self, it: MessageItem) -> None:
        streaming = it.state == STREAMING
        if "<think>" in it.content:  # a service that leaves reasoning inline
            thought, answer = split_thinking(it.content)
            it = replace(it, content=answer, thinking=(it.thinking + "\n\n" + thought).strip())
        self.role_label.setText(it.model or self.tr("Assistant"))
        states = {
            STREAMING: self.tr("writing…") if it.content else self.tr("thinking…"),
            INTERRUPTED: self.tr("interrupted: Hearth closed before this reply finished"),
            STOPPED: self.tr("stopped"),
        }
        calls = ", ".join(str(c.get("name", "")) for c in it.tool_calls)
        called = self.tr("calls %1").replace("%1", calls) if calls else ""
        self.state_label.setText(" · ".join(x for x in (states.get(it.state, ""), called) if x))
        if it.thinking:
            secs = it.thinking_seconds or float(it.stats.get("thinking_seconds", 0) or 0)
            label = (
                self.tr("Thinking…")
                if streaming and not it.content
                else self.tr("Thought for %1 s").replace("%1", f"{secs:.1f}")
                if secs
                else self.tr("Reasoning")
            )
            self.think_btn.setText(("▾ " if self.think_btn.isChecked() else "▸ ") + label)
            self.think_btn.show()
            if self.think_btn.isChecked() or not streaming:
                self.thinking_view.set_markdown(it.thinking, self._palette)
        else:
            self.think_btn.hide()
        if it.content != self.body.markdown_source() or not streaming:
            self.body.set_markdown(it.content, self._palette)
        self.body.setVisible(bool(it.content) or streaming)
        self.sources.set_citations(it.sources)
        self.error_card.setVisible(it.state == ERROR)
        self.error_label.setText(it.error)
        self.stats_label.setText(format_stats(it.stats) if it.state != STREAMING else "")
        self.copy_btn.setEnabled(bool(it.content))
        self.regen_btn.setEnabled(not streaming and not self._busy)
        self.retry_btn.setEnabled(not self._busy)
        self.setAccessibleName(
            self.tr("%1 replied: %2").replace("%1", it.model).replace("%2", it.content[:200])
        )

    def _refresh_think_label(self, _checked: bool) -> None:
        self._render()

    def resizeEvent(self, e: QResizeEvent) -> None:
        super().resizeEvent(e)
        if self.item.role == "user":
            self._fit_bubble()

    def _fit_bubble(self) -> None:
        # A wrapping QLabel asks for little width; size the bubble to its longest line instead.
        limit = max(240, int(self.width() * 0.8))
        self.bubble.setMaximumWidth(limit)
        fm = self.text_label.fontMetrics()
        longest = max(
            (fm.horizontalAdvance(ln) for ln in self.item.content.splitlines()), default=0
        )
        self.text_label.setMinimumWidth(min(longest + 4, limit - 28))
