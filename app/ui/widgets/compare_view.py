"""The transcript's row for a compared reply (Compare, controllers/compare.py): the replies of
two models to the same question side by side, each in its own column with its model's name,
its state while it streams and its figures (tokens/s, time to first token, tokens) once done,
as the transcript shows them under any reply. The column the chat goes on with is marked;
the other offers "Continue with this reply"."""

from __future__ import annotations

from dataclasses import replace

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (
    QFrame,
    QHBoxLayout,
    QLabel,
    QPushButton,
    QSizePolicy,
    QVBoxLayout,
    QWidget,
)

from ...history.records import STREAMING
from ..item_models.conversation import MessageItem
from ..theme import Palette
from .message import MessageWidget

__all__ = ["CompareView", "CompareColumn"]


class CompareColumn(QFrame):
    """One model's reply in a comparison, and the button that continues the chat with it."""

    continue_requested = Signal(int)  # the reply's message id

    def __init__(self, item: MessageItem, palette: Palette, parent: QWidget | None = None):
        super().__init__(parent)
        self.setObjectName("CompareColumn")
        # Columns share the width equally, whatever their text asks for.
        self.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
        lay = QVBoxLayout(self)
        lay.setContentsMargins(12, 6, 12, 10)
        self.message = MessageWidget(item, palette)
        self.message.regen_btn.hide()  # a column is answered once; Regenerate is for the branch
        self.message.stats_label.setWordWrap(True)  # the figures fit half the width
        lay.addWidget(self.message)
        self.choose_btn = QPushButton(self.tr("Continue with this reply"))
        self.choose_btn.clicked.connect(lambda: self.continue_requested.emit(self.item.id))
        self.chosen_label = QLabel(self.tr("✓ The chat continues with this reply"))
        self.chosen_label.setObjectName("Stats")
        lay.addWidget(self.choose_btn, 0, Qt.AlignmentFlag.AlignLeft)
        lay.addWidget(self.chosen_label)
        lay.addStretch(1)
        self._busy = False
        self._chosen = False

    @property
    def item(self) -> MessageItem:
        return self.message.item

    def set_item(self, item: MessageItem, chosen: bool) -> None:
        self._chosen = chosen
        self.message.set_item(item)
        self.setProperty("chosen", "true" if chosen else "false")
        self.style().unpolish(self)
        self.style().polish(self)
        self._render()

    def set_busy(self, busy: bool) -> None:
        self._busy = busy
        self.message.set_busy(busy)
        self._render()

    def _render(self) -> None:
        self.choose_btn.setVisible(not self._chosen)
        self.choose_btn.setEnabled(not self._busy and self.item.state != STREAMING)
        self.choose_btn.setAccessibleName(
            self.tr("Continue the chat with %1's reply").replace("%1", self.item.model)
        )
        self.chosen_label.setVisible(self._chosen)


class CompareView(QFrame):
    """A compared reply's row: `item` is the reply on the chat's branch, `item.compared` its
    comparison's replies by column. `continue_requested(id)` asks to go on with reply `id`."""

    continue_requested = Signal(int)
    copy_requested = Signal(int)
    code_copied = Signal()

    def __init__(self, item: MessageItem, palette: Palette, parent: QWidget | None = None):
        super().__init__(parent)
        self.setObjectName("CompareView")
        self.item = item
        self._palette = palette
        box = QVBoxLayout(self)
        box.setContentsMargins(0, 6, 0, 6)
        self.title = QLabel()
        self.title.setObjectName("Stats")
        box.addWidget(self.title)
        row = QHBoxLayout()
        row.setSpacing(10)
        box.addLayout(row)
        self.columns: list[CompareColumn] = []
        for column in item.compared:
            view = CompareColumn(_plain(column), palette)
            view.continue_requested.connect(self.continue_requested)
            view.message.copy_requested.connect(self.copy_requested)
            view.message.code_copied.connect(self.code_copied)
            row.addWidget(view, 1)
            self.columns.append(view)
        self.set_item(item)

    def set_item(self, item: MessageItem) -> None:
        self.item = item
        models = [c.model for c in item.compared]
        self.title.setText(
            self.tr("Compared: %1. Continue with either reply.").replace(
                "%1", self.tr(" and ").join(models)
            )
        )
        self.setAccessibleName(self.title.text())
        for view, column in zip(self.columns, item.compared, strict=False):
            view.set_item(_plain(column), column.id == item.id)

    def set_busy(self, busy: bool) -> None:
        for view in self.columns:
            view.set_busy(busy)

    def set_palette(self, palette: Palette) -> None:
        self._palette = palette
        for view in self.columns:
            view.message.set_palette(palette)


def _plain(item: MessageItem) -> MessageItem:
    """A column's reply as a lone message: no versions (its siblings are the other columns)."""
    return replace(item, version=1, versions=1, compared=[])
