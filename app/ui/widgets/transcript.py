"""The scrolling conversation: mirrors ConversationModel rows into MessageWidgets, and shows
the approval card of a tool call waiting for the user under the last of them."""

from __future__ import annotations

from PySide6.QtCore import QModelIndex, Qt, Signal
from PySide6.QtWidgets import QHBoxLayout, QLabel, QScrollArea, QSizePolicy, QVBoxLayout, QWidget

from ...history.compaction import SUMMARY
from ..item_models.conversation import ConversationModel
from ..theme import Palette
from .compare_view import CompareView
from .message import MessageWidget
from .summary_notice import SummaryNotice

__all__ = ["Transcript"]

_COLUMN = 820  # a readable line length, like a book page


class Transcript(QScrollArea):
    copy_requested = Signal(int)
    regenerate_requested = Signal(int)
    edit_submitted = Signal(int, str)
    version_requested = Signal(int, int)
    code_copied = Signal()
    summary_undo_requested = Signal(int, bool)  # a summary's id; True: undo, False: use again
    continue_requested = Signal(int)  # Compare: go on with this reply of a comparison

    def __init__(self, model: ConversationModel, palette: Palette, parent: QWidget | None = None):
        super().__init__(parent)
        self.setObjectName("Transcript")
        self.setAccessibleName(self.tr("Conversation"))
        self.setWidgetResizable(True)
        self.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self._model = model
        self._palette = palette
        self._busy = False
        self.widgets: list[MessageWidget | SummaryNotice | CompareView] = []
        self.approval: QWidget | None = None  # the card asking to allow a tool call
        body = QWidget()
        body.setObjectName("TranscriptBody")
        outer = QHBoxLayout(body)
        outer.setContentsMargins(24, 16, 24, 16)
        self._column = QWidget()
        self._column.setMaximumWidth(_COLUMN)
        self._column.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Preferred)
        self._layout = QVBoxLayout(self._column)
        self._layout.setContentsMargins(0, 0, 0, 0)
        self._layout.setSpacing(10)
        self._layout.addStretch(1)
        outer.addStretch(0)
        outer.addWidget(self._column, 1)
        outer.addStretch(0)
        self.empty = QLabel()
        self.empty.setAlignment(Qt.AlignmentFlag.AlignCenter)
        self.empty.setWordWrap(True)
        self.empty.setObjectName("Muted")
        self.empty.setContentsMargins(0, 110, 0, 0)
        self._layout.insertWidget(0, self.empty)
        self.setWidget(body)
        self._stick = True
        bar = self.verticalScrollBar()
        bar.valueChanged.connect(self._on_scrolled)
        bar.rangeChanged.connect(self._on_range)
        model.modelReset.connect(self._rebuild)
        model.rowsInserted.connect(self._on_inserted)
        model.rowsRemoved.connect(self._on_removed)
        model.dataChanged.connect(self._on_changed)
        self._rebuild()

    def set_empty_text(self, html: str) -> None:
        self.empty.setText(html)

    def _on_scrolled(self, value: int) -> None:
        self._stick = value >= self.verticalScrollBar().maximum() - 48

    def _on_range(self, _lo: int, hi: int) -> None:
        if self._stick:
            self.verticalScrollBar().setValue(hi)

    def scroll_to_bottom(self) -> None:
        self._stick = True
        self.verticalScrollBar().setValue(self.verticalScrollBar().maximum())

    def _make(self, row: int) -> MessageWidget | SummaryNotice | CompareView:
        item = self._model.item(row)
        if item.compared:  # a reply written side by side with another model's (Compare)
            view = CompareView(item, self._palette)
            view.set_busy(self._busy)
            view.continue_requested.connect(self.continue_requested)
            view.copy_requested.connect(self.copy_requested)
            view.code_copied.connect(self.code_copied)
            return view
        if item.role == SUMMARY:
            notice = SummaryNotice(item, self._palette)
            notice.set_busy(self._busy)
            notice.undo_requested.connect(self.summary_undo_requested)
            return notice
        w = MessageWidget(item, self._palette)
        w.set_busy(self._busy)
        w.copy_requested.connect(self.copy_requested)
        w.regenerate_requested.connect(self.regenerate_requested)
        w.edit_submitted.connect(self.edit_submitted)
        w.version_requested.connect(self.version_requested)
        w.code_copied.connect(self.code_copied)
        return w

    def _rebuild(self) -> None:
        for w in self.widgets:
            self._layout.removeWidget(w)
            w.hide()  # gone from the screen now, not when the event loop deletes it
            w.deleteLater()
        self.widgets = []
        for row in range(self._model.rowCount()):
            w = self._make(row)
            self.widgets.append(w)
            self._layout.insertWidget(len(self.widgets), w)  # after the empty-state label
        self.empty.setVisible(not self.widgets)
        self.scroll_to_bottom()

    def _on_inserted(self, _parent: QModelIndex, first: int, last: int) -> None:
        for row in range(first, last + 1):
            w = self._make(row)
            self.widgets.insert(row, w)
            self._layout.insertWidget(row + 1, w)  # +1: the empty-state label comes first
        self.empty.setVisible(not self.widgets)
        self.scroll_to_bottom()

    def _on_removed(self, _parent: QModelIndex, first: int, last: int) -> None:
        for w in self.widgets[first : last + 1]:
            self._layout.removeWidget(w)
            w.hide()
            w.deleteLater()
        del self.widgets[first : last + 1]
        self.empty.setVisible(not self.widgets)

    def _on_changed(self, top: QModelIndex, bottom: QModelIndex, _roles: object = None) -> None:
        for row in range(top.row(), bottom.row() + 1):
            if 0 <= row < len(self.widgets):
                self.widgets[row].set_item(self._model.item(row))

    def set_busy(self, busy: bool) -> None:
        self._busy = busy
        for w in self.widgets:
            w.set_busy(busy)

    def set_palette(self, palette: Palette) -> None:
        self._palette = palette
        for w in self.widgets:
            w.set_palette(palette)

    def show_approval(self, card: QWidget) -> None:
        """Put `card` under the last message (replacing one shown before) and scroll to it."""
        self.clear_approval()
        self.approval = card
        self._layout.insertWidget(self._layout.count() - 1, card)  # before the stretch
        self.empty.hide()
        self.scroll_to_bottom()

    def clear_approval(self) -> None:
        if self.approval is not None:
            card, self.approval = self.approval, None
            self._layout.removeWidget(card)
            card.hide()
            card.deleteLater()

    def widget_for(self, message_id: int) -> MessageWidget | SummaryNotice | CompareView | None:
        return next((w for w in self.widgets if w.item.id == message_id), None)
