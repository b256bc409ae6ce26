"""The transcript's notice for a summary message (history.compaction): "Earlier messages were
summarised to fit the context", the summary behind a Show/Hide toggle, and Undo (the original
messages go back into the prompt) or, once undone, Summarise again (the summary stands in
for them once more)."""

from __future__ import annotations

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import QFrame, QHBoxLayout, QLabel, QPushButton, QVBoxLayout, QWidget

from ...history.records import UNDONE
from ..item_models.conversation import MessageItem
from ..theme import Palette

__all__ = ["SummaryNotice"]


class SummaryNotice(QFrame):
    """One summary message in the transcript; `undo_requested(id, undone)` asks the chat
    controller to take the summary back (True) or to use it again (False)."""

    undo_requested = Signal(int, bool)

    def __init__(self, item: MessageItem, palette: Palette, parent: QWidget | None = None):
        super().__init__(parent)
        self.setObjectName("SummaryNotice")
        self.item = item
        box = QVBoxLayout(self)
        box.setContentsMargins(14, 10, 14, 10)
        row = QHBoxLayout()
        self.title = QLabel()
        self.title.setWordWrap(True)
        self.title.setObjectName("RoleLabel")
        row.addWidget(self.title, 1)
        self.toggle = QPushButton(self.tr("Show summary"))
        self.toggle.setCheckable(True)
        self.toggle.toggled.connect(self._on_toggled)
        row.addWidget(self.toggle)
        self.undo = QPushButton()
        self.undo.clicked.connect(
            lambda: self.undo_requested.emit(self.item.id, self.item.state != UNDONE)
        )
        row.addWidget(self.undo)
        box.addLayout(row)
        self.body = QLabel()
        self.body.setWordWrap(True)
        self.body.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.body.setObjectName("Muted")
        self.body.hide()
        box.addWidget(self.body)
        self.set_item(item)

    def _on_toggled(self, on: bool) -> None:
        self.body.setVisible(on)
        self.toggle.setText(self.tr("Hide summary") if on else self.tr("Show summary"))

    @property
    def expanded(self) -> bool:
        return self.toggle.isChecked()

    def set_item(self, item: MessageItem) -> None:
        self.item = item
        undone = item.state == UNDONE
        covers = str(item.covers)
        if undone:
            title = self.tr(
                "Summary undone: the %1 earlier messages go to the model as they were"
            ).replace("%1", covers)
        else:
            title = self.tr("Earlier messages were summarised to fit the context")
        self.title.setText(title)
        self.body.setText(item.content)
        self.undo.setText(self.tr("Use summary") if undone else self.tr("Undo"))
        self.undo.setToolTip(
            self.tr("Send the summary instead of the earlier messages")
            if undone
            else self.tr("Send the original messages to the model again")
        )

    def set_busy(self, busy: bool) -> None:
        self.undo.setEnabled(not busy)

    def set_palette(self, palette: Palette) -> None:
        pass  # styled by the application's style sheet (#SummaryNotice)
