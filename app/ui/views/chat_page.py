"""The chat page: header (title, model, tools, context meter, chat settings), transcript,
composer."""

from __future__ import annotations

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QAction, QResizeEvent
from PySide6.QtWidgets import (
    QComboBox,
    QFrame,
    QHBoxLayout,
    QLabel,
    QMenu,
    QProgressBar,
    QPushButton,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from ..item_models.conversation import ConversationModel
from ..item_models.model_list import ModelListModel
from ..theme import Palette
from ..widgets.bits import ContextMeter
from ..widgets.compare_bar import CompareBar
from ..widgets.composer import Composer
from ..widgets.transcript import Transcript

__all__ = ["ChatPage"]


class ChatPage(QWidget):
    tool_server_toggled = Signal(str, bool)  # server name, on for this chat
    tools_setup_requested = Signal()  # "Set up tool servers…" (the Settings page)

    def __init__(
        self,
        conversation: ConversationModel,
        models: ModelListModel,
        palette: Palette,
        parent: QWidget | None = None,
    ) -> None:
        super().__init__(parent)
        self.setObjectName("ChatPage")
        lay = QVBoxLayout(self)
        lay.setContentsMargins(0, 0, 0, 0)
        lay.setSpacing(0)

        header = QFrame()
        header.setObjectName("ChatHeader")
        hl = QHBoxLayout(header)
        hl.setContentsMargins(20, 10, 16, 10)
        hl.setSpacing(12)
        self.title = QLabel()
        self.title.setObjectName("ChatTitle")
        self.title.setAccessibleName(self.tr("Chat title"))
        self.title.setMinimumWidth(80)
        self.model_box = QComboBox()
        self.model_box.setModel(models)
        self.model_box.setModelColumn(0)
        self.model_box.setMinimumWidth(180)
        self.model_box.setAccessibleName(self.tr("Model for this chat"))
        self.model_box.view().setAccessibleName(self.tr("Installed models"))
        self.model_box.setToolTip(self.tr("Model for this chat (Ctrl+M)"))
        self.runs_on = QLabel()
        self.runs_on.setObjectName("Muted")
        self.runs_on.setAccessibleName(self.tr("Where the model runs"))
        self.runs_on.setToolTip(
            self.tr("Where the loaded model runs (CPU only, or its GPU layers)")
        )
        self.runs_on.hide()
        self.meter = ContextMeter()
        self.tools_btn = QToolButton()
        self.tools_btn.setText(self.tr("Tools"))
        self.tools_btn.setAccessibleName(self.tr("Tool servers this chat may use"))
        self.tools_btn.setToolTip(self.tr("Which tool servers (MCP) this chat may use"))
        self.tools_btn.setPopupMode(QToolButton.ToolButtonPopupMode.InstantPopup)
        self.tools_menu = QMenu(self.tools_btn)
        self.tools_btn.setMenu(self.tools_menu)
        self.compare_btn = QToolButton()  # Compare: the next question to two models
        self.compare_btn.setText(self.tr("Compare"))
        self.compare_btn.setCheckable(True)
        self.compare_btn.setAccessibleName(self.tr("Compare two models on the next question"))
        self.compare_btn.setToolTip(
            self.tr("Send the next question to two models, side by side (Ctrl+Shift+M)")
        )
        self.settings_btn = QPushButton(self.tr("Chat settings"))
        self.settings_btn.setAccessibleName(self.tr("Chat settings: system prompt and sampling"))
        self.settings_btn.setToolTip(self.tr("System prompt and sampling for this chat (Ctrl+;)"))
        hl.addWidget(self.title, 1)
        hl.addWidget(self.model_box)
        hl.addWidget(self.runs_on)
        hl.addWidget(self.compare_btn)
        hl.addWidget(self.tools_btn)
        hl.addWidget(self.meter)
        hl.addWidget(self.settings_btn)
        lay.addWidget(header)

        self.tools_note = QLabel()
        self.tools_note.setObjectName("Warning")
        self.tools_note.setWordWrap(True)
        self.tools_note.setContentsMargins(20, 6, 20, 6)
        self.tools_note.setAccessibleName(self.tr("Tools notice"))
        self.tools_note.hide()
        lay.addWidget(self.tools_note)

        self.banner = QFrame()
        self.banner.setObjectName("Banner")
        bl = QHBoxLayout(self.banner)
        bl.setContentsMargins(20, 8, 20, 8)
        self.banner_label = QLabel()
        self.banner_label.setAccessibleName(self.tr("Engine status"))
        self.banner_bar = QProgressBar()
        self.banner_bar.setRange(0, 0)
        self.banner_bar.setFixedWidth(140)
        self.banner_bar.setAccessibleName(self.tr("Engine start progress"))
        bl.addWidget(self.banner_label, 1)
        bl.addWidget(self.banner_bar)
        lay.addWidget(self.banner)

        self.transcript = Transcript(conversation, palette)
        lay.addWidget(self.transcript, 1)

        bottom = QWidget()
        bot = QVBoxLayout(bottom)
        bot.setContentsMargins(24, 4, 24, 16)
        self.compare_bar = CompareBar(models)
        bot.addWidget(self.compare_bar, 0, Qt.AlignmentFlag.AlignHCenter)
        self.composer = Composer()
        self.composer.setMaximumWidth(820)
        bot.addWidget(self.composer, 0, Qt.AlignmentFlag.AlignHCenter)
        self.composer.setMinimumWidth(360)
        lay.addWidget(bottom)
        self.set_welcome("")

    def set_welcome(self, model: str) -> None:
        self.transcript.set_empty_text(
            "<div style='font-size:22px; font-weight:600;'>"
            + self.tr("What shall we talk about?")
            + "</div><p style='margin-top:8px;'>"
            + self.tr(
                "You are chatting with <b>%1</b>, running on this computer. "
                "Nothing you type leaves it."
            ).replace("%1", model or "…")
            + "</p><p>"
            + self.tr("Press F1 for keyboard shortcuts. Drop a .gguf file to add a model.")
            + "</p>"
        )

    def set_tools(self, servers: list[tuple[str, bool]], note: str) -> None:
        """The Tools menu: each known server, checked when this chat uses it; `note` says why
        the chat's tools will not be used ('' hides it)."""
        self.tools_menu.clear()
        for name, on in servers:
            act = QAction(name, self.tools_menu)
            act.setCheckable(True)
            act.setChecked(on)
            act.toggled.connect(lambda checked, n=name: self.tool_server_toggled.emit(n, checked))
            self.tools_menu.addAction(act)
        if servers:
            self.tools_menu.addSeparator()
        setup = self.tools_menu.addAction(self.tr("Set up tool servers…"))
        setup.triggered.connect(self.tools_setup_requested)
        used = sum(1 for _n, on in servers if on)
        self.tools_btn.setText(
            self.tr("Tools · %1").replace("%1", str(used)) if used else self.tr("Tools")
        )
        self.tools_note.setText(note)
        self.tools_note.setVisible(bool(note))

    def tool_actions(self) -> dict[str, QAction]:
        return {a.text(): a for a in self.tools_menu.actions() if a.isCheckable()}

    def set_banner(self, text: str, busy: bool) -> None:
        self.banner_label.setText(text)
        self.banner_bar.setVisible(busy)
        self.banner.setVisible(bool(text))

    def set_runs_on(self, where: str) -> None:
        """Where the chat's model runs once loaded ("CPU only", "18/19 layers on CUDA0");
        hidden while it is not loaded."""
        self.runs_on.setText(where)
        self.runs_on.setVisible(bool(where))

    def set_model(self, name: str) -> None:
        self.model_box.blockSignals(True)
        idx = self.model_box.findText(name)
        self.model_box.setCurrentIndex(idx)
        if idx < 0:
            self.model_box.setPlaceholderText(name)
        self.model_box.blockSignals(False)

    def resizeEvent(self, e: QResizeEvent) -> None:  # the composer as wide as the transcript
        super().resizeEvent(e)
        self.composer.setFixedWidth(min(820, max(360, self.width() - 48)))
        self.compare_bar.setFixedWidth(self.composer.width())
