"""Dialogs: per-chat settings, the keyboard shortcuts sheet, the engine failure dialog, and
`Dialogs`, which opens every dialog the app asks the user something with (files to open, a
chat's new title, ...) over the main window."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from PySide6.QtCore import Qt
from PySide6.QtWidgets import (
    QCheckBox,
    QDialog,
    QDialogButtonBox,
    QDoubleSpinBox,
    QFileDialog,
    QFormLayout,
    QInputDialog,
    QLabel,
    QMessageBox,
    QPlainTextEdit,
    QPushButton,
    QSpinBox,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from ...documents import DOCUMENT_SUFFIXES
from ...history.export_files import format_for
from ...options import default as declared_default

__all__ = ["ChatSettingsDialog", "Dialogs", "ShortcutsDialog", "SHORTCUTS", "service_failed_box"]

_IMAGE_FILTER = "Images (*.png *.jpg *.jpeg *.webp *.gif *.bmp)"

# (option, label, kind, low, high, step); the value shown when the model gives no default is
# the option's declared one (hearth.options).
_OPTIONS: tuple[tuple[str, str, str, float, float, float], ...] = (
    ("temperature", "Temperature", "float", 0.0, 2.0, 0.05),
    ("top_p", "Top P", "float", 0.0, 1.0, 0.05),
    ("top_k", "Top K", "int", 0, 500, 1),
    ("min_p", "Min P", "float", 0.0, 1.0, 0.01),
    ("repeat_penalty", "Repeat penalty", "float", 0.5, 2.0, 0.05),
    ("num_predict", "Max tokens", "int", -1, 131072, 16),
    ("seed", "Seed", "int", -1, 2**31 - 1, 1),
    ("num_ctx", "Context length", "int", 256, 1 << 20, 1024),
)


class ChatSettingsDialog(QDialog):
    """System prompt and sampling overrides for one chat; unticked rows use the model's own."""

    def __init__(
        self,
        system_prompt: str,
        overrides: dict[str, Any],
        model_defaults: dict[str, Any],
        model: str,
        parent: QWidget | None = None,
    ) -> None:
        super().__init__(parent)
        self.setWindowTitle(self.tr("Chat settings"))
        self.setMinimumWidth(480)
        lay = QVBoxLayout(self)
        lay.setSpacing(10)
        lay.addWidget(QLabel(self.tr("System prompt")))
        self.system = QPlainTextEdit(system_prompt)
        self.system.setAccessibleName(self.tr("System prompt"))
        self.system.setPlaceholderText(self.tr("For example: You are a concise assistant."))
        self.system.setTabChangesFocus(True)
        self.system.setFixedHeight(110)
        lay.addWidget(self.system)
        note = QLabel(
            self.tr("Tick a setting to override %1's default for this chat.").replace("%1", model)
        )
        note.setObjectName("Muted")
        note.setWordWrap(True)
        lay.addWidget(note)
        form = QFormLayout()
        form.setVerticalSpacing(6)
        self.rows: dict[str, tuple[QCheckBox, QSpinBox | QDoubleSpinBox]] = {}
        for key, label, kind, low, high, step in _OPTIONS:
            box = QCheckBox(self.tr(label))
            box.setAccessibleName(self.tr("Override %1").replace("%1", self.tr(label)))
            spin: QSpinBox | QDoubleSpinBox
            if kind == "int":
                spin = QSpinBox()
                spin.setRange(int(low), int(high))
                spin.setSingleStep(int(step))
            else:
                spin = QDoubleSpinBox()
                spin.setRange(low, high)
                spin.setSingleStep(step)
                spin.setDecimals(2)
            spin.setAccessibleName(self.tr(label))
            default = model_defaults.get(key, declared_default(key))
            value = overrides.get(key, default)
            spin.setValue(value)
            if key == "num_predict":
                spin.setSpecialValueText(self.tr("No limit"))
            if key == "seed":
                spin.setSpecialValueText(self.tr("Random"))
            spin.setEnabled(key in overrides)
            box.setChecked(key in overrides)
            box.toggled.connect(spin.setEnabled)
            form.addRow(box, spin)
            self.rows[key] = (box, spin)
        lay.addLayout(form)
        buttons = QDialogButtonBox(
            QDialogButtonBox.StandardButton.Ok | QDialogButtonBox.StandardButton.Cancel
        )
        reset = QPushButton(self.tr("Use model defaults"))
        reset.setAccessibleName(self.tr("Clear every override"))
        buttons.addButton(reset, QDialogButtonBox.ButtonRole.ResetRole)
        reset.clicked.connect(self._clear_overrides)
        buttons.accepted.connect(self.accept)
        buttons.rejected.connect(self.reject)
        lay.addWidget(buttons)

    def _clear_overrides(self) -> None:
        for box, _spin in self.rows.values():
            box.setChecked(False)

    def system_prompt(self) -> str:
        return self.system.toPlainText().strip()

    def overrides(self) -> dict[str, Any]:
        return {key: spin.value() for key, (box, spin) in self.rows.items() if box.isChecked()}


SHORTCUTS: tuple[tuple[str, str], ...] = (
    ("Enter", "Send the message"),
    ("Shift+Enter", "New line in the message"),
    ("Esc", "Stop the reply"),
    ("Ctrl+N", "New chat"),
    ("Ctrl+K", "Search chats"),
    ("Ctrl+L", "Go to the message box"),
    ("Ctrl+R", "Regenerate the last reply"),
    ("Ctrl+E", "Edit the last question"),
    ("Alt+Left / Alt+Right", "Previous / next version of the last reply"),
    ("Ctrl+Shift+C", "Copy the last reply"),
    ("Ctrl+O", "Attach an image"),
    ("Ctrl+V", "Paste an image or text"),
    ("Ctrl+M", "Choose the model"),
    ("Ctrl+Shift+M", "Compare: the next question to two models, side by side"),
    ("Ctrl+;", "Chat settings (system prompt, sampling)"),
    ("F2", "Rename the selected chat"),
    ("Delete", "Delete the selected chat"),
    ("Ctrl+1 / Ctrl+2 / Ctrl+3", "Chats / Models / Settings"),
    ("Ctrl+I", "Import a .gguf model"),
    ("Ctrl+,", "Settings"),
    ("Tab / Shift+Tab", "Move between controls"),
    ("F1", "This sheet"),
)


class ShortcutsDialog(QDialog):
    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setWindowTitle(self.tr("Keyboard shortcuts"))
        self.resize(520, 620)
        lay = QVBoxLayout(self)
        table = QTableWidget(len(SHORTCUTS), 2)
        table.setAccessibleName(self.tr("Keyboard shortcuts"))
        table.setHorizontalHeaderLabels([self.tr("Keys"), self.tr("Action")])
        table.verticalHeader().hide()
        table.horizontalHeader().setStretchLastSection(True)
        table.setEditTriggers(QTableWidget.EditTrigger.NoEditTriggers)
        table.setShowGrid(False)
        for row, (keys, action) in enumerate(SHORTCUTS):
            k = QTableWidgetItem(keys)
            f = k.font()
            f.setBold(True)
            k.setFont(f)
            table.setItem(row, 0, k)
            table.setItem(row, 1, QTableWidgetItem(self.tr(action)))
        table.resizeColumnToContents(0)
        table.verticalHeader().setDefaultSectionSize(30)
        lay.addWidget(table)
        close = QDialogButtonBox(QDialogButtonBox.StandardButton.Close)
        close.rejected.connect(self.reject)
        lay.addWidget(close)


def service_failed_box(parent: QWidget, reason: str, log_path: str) -> QMessageBox:
    """A non-blocking (window-modal, opened with .open()) box: why, and where the log is."""
    box = QMessageBox(parent)
    box.setIcon(QMessageBox.Icon.Critical)
    box.setWindowTitle(parent.tr("The engine could not start"))
    first, _, rest = reason.partition("\n\n")
    box.setText(first)
    box.setInformativeText(parent.tr("The log is in %1").replace("%1", log_path))
    if rest:
        box.setDetailedText(rest)
    box.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
    box.setStandardButtons(QMessageBox.StandardButton.Retry | QMessageBox.StandardButton.Close)
    box.setAccessibleName(parent.tr("Engine failure"))
    return box


class Dialogs:
    """Opens the app's dialogs over `parent` (the main window). The pickers and questions
    block and return the answer; the others are window-modal and call back when answered."""

    def __init__(self, parent: QWidget) -> None:
        self._parent = parent
        self.failure_box: QMessageBox | None = None  # the engine failure box while it is open

    def tr(self, text: str) -> str:
        return self._parent.tr(text)

    # -- files -------------------------------------------------------------------------------

    def pick_images(self) -> list[Path]:
        paths, _ = QFileDialog.getOpenFileNames(
            self._parent, self.tr("Attach images"), str(Path.home()), self.tr(_IMAGE_FILTER)
        )
        return [Path(p) for p in paths]

    def pick_documents(self) -> list[Path]:
        suffixes = " ".join(f"*{s}" for s in sorted(DOCUMENT_SUFFIXES))
        paths, _ = QFileDialog.getOpenFileNames(
            self._parent,
            self.tr("Attach documents"),
            str(Path.home()),
            self.tr("Documents (%1)").replace("%1", suffixes),
        )
        return [Path(p) for p in paths]

    def pick_gguf(self) -> Path | None:
        path, _ = QFileDialog.getOpenFileName(
            self._parent,
            self.tr("Import a model"),
            str(Path.home()),
            self.tr("GGUF models (*.gguf)"),
        )
        return Path(path) if path else None

    def pick_models_dir(self, current: str) -> str:
        """A folder for the models ('' when cancelled), starting at `current` (else home)."""
        return QFileDialog.getExistingDirectory(
            self._parent, self.tr("Models folder"), current or str(Path.home())
        )

    # -- chats -------------------------------------------------------------------------------

    def pick_export_file(self, suggested: str) -> tuple[Path, str] | None:
        """Where to export chats, and the format ("json" or "markdown", from the filter picked
        or the name typed); None when cancelled. `suggested` is the file name offered."""
        json_filter = self.tr("Hearth chats, JSON (*.json)")
        md_filter = self.tr("Markdown, for reading (*.md)")
        start = md_filter if suggested.endswith(".md") else json_filter
        path, chosen = QFileDialog.getSaveFileName(
            self._parent,
            self.tr("Export chats"),
            str(Path.home() / suggested),
            f"{json_filter};;{md_filter}",
            start,
        )
        if not path:
            return None
        target = Path(path)
        fmt = format_for(target, "markdown" if chosen == md_filter else None)
        if not target.suffix:
            target = target.with_suffix(".md" if fmt == "markdown" else ".json")
        return target, fmt

    def pick_chats_import(self) -> Path | None:
        path, _ = QFileDialog.getOpenFileName(
            self._parent,
            self.tr("Import chats"),
            str(Path.home()),
            self.tr("Hearth chats, JSON (*.json);;All files (*)"),
        )
        return Path(path) if path else None

    def ask_chat_title(self, title: str) -> str | None:
        """A new title for the chat now called `title`; None when cancelled."""
        text, ok = QInputDialog.getText(
            self._parent, self.tr("Rename chat"), self.tr("Title"), text=title
        )
        return text if ok else None

    def confirm_delete_chat(self, title: str) -> bool:
        answer = QMessageBox.question(
            self._parent,
            self.tr("Delete chat"),
            self.tr("Delete “%1” and all its messages?").replace("%1", title or "New chat"),
        )
        return answer == QMessageBox.StandardButton.Yes

    def edit_chat_settings(
        self,
        system_prompt: str,
        overrides: dict[str, Any],
        model_defaults: dict[str, Any],
        model: str,
        apply: Callable[[str, dict[str, Any]], None],
    ) -> None:
        """The chat settings dialog; on OK, `apply(system_prompt, overrides)`."""
        dlg = ChatSettingsDialog(system_prompt, overrides, model_defaults, model, self._parent)
        dlg.accepted.connect(lambda: apply(dlg.system_prompt(), dlg.overrides()))
        dlg.open()

    # -- help and failures -------------------------------------------------------------------

    def show_shortcuts(self) -> None:
        ShortcutsDialog(self._parent).open()

    def show_service_failed(self, reason: str, log_path: str, retry: Callable[[], None]) -> None:
        """Why the engine could not start and where its log is; Retry calls `retry`."""
        box = service_failed_box(self._parent, reason, log_path)

        def answered(result: int) -> None:
            self.failure_box = None
            if result == QMessageBox.StandardButton.Retry:
                retry()

        box.finished.connect(answered)
        self.failure_box = box
        box.open()

    def close_service_failed(self) -> None:
        if self.failure_box is not None:
            self.failure_box.close()
            self.failure_box = None
