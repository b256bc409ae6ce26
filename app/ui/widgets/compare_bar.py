"""The bar over the message box while Compare is on: the next question goes to the chat's
model and to the one picked here, and their replies are shown side by side."""

from __future__ import annotations

from PySide6.QtCore import QAbstractItemModel, Signal
from PySide6.QtWidgets import QComboBox, QFrame, QHBoxLayout, QLabel, QToolButton, QWidget

__all__ = ["CompareBar"]


class CompareBar(QFrame):
    """Hidden while Compare is off. `model_chosen(name)` when the user picks the second model,
    `close_requested` when they turn Compare off."""

    model_chosen = Signal(str)
    close_requested = Signal()

    def __init__(self, models: QAbstractItemModel, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("CompareBar")
        lay = QHBoxLayout(self)
        lay.setContentsMargins(12, 6, 8, 6)
        self.label = QLabel()
        self.label.setObjectName("Muted")
        self.model_box = QComboBox()
        self.model_box.setModel(models)
        self.model_box.setModelColumn(0)
        self.model_box.setMinimumWidth(180)
        self.model_box.setAccessibleName(self.tr("Model to compare with"))
        self.model_box.view().setAccessibleName(self.tr("Installed models"))
        self.model_box.activated.connect(lambda _i: self.model_chosen.emit(self.other()))
        self.close_btn = QToolButton()
        self.close_btn.setText("✕")
        self.close_btn.setAccessibleName(self.tr("Turn Compare off"))
        self.close_btn.setToolTip(self.tr("Turn Compare off: the next question goes to one model"))
        self.close_btn.clicked.connect(self.close_requested)
        lay.addWidget(self.label)
        lay.addWidget(self.model_box)
        lay.addStretch(1)
        lay.addWidget(self.close_btn)
        self.hide()

    def other(self) -> str:
        return self.model_box.currentText()

    def show_compare(self, chat_model: str, other: str) -> None:
        """Show that the next question goes to `chat_model` and `other` ('' hides the bar)."""
        if not other:
            self.hide()
            return
        self.label.setText(
            self.tr("Compare: the next question goes to %1 and to").replace("%1", chat_model)
        )
        self.model_box.blockSignals(True)
        self.model_box.setCurrentIndex(self.model_box.findText(other))
        self.model_box.blockSignals(False)
        self.show()
