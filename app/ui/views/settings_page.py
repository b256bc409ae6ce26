"""The Settings page: Local API, engine defaults, tools, appearance. Changes apply at once."""

from __future__ import annotations

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (
    QComboBox,
    QFormLayout,
    QFrame,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QPushButton,
    QScrollArea,
    QSizePolicy,
    QSpinBox,
    QVBoxLayout,
    QWidget,
)

from ...app_settings import AppSettings
from ..widgets.switch import ToggleSwitch
from .tools_settings import ToolsCard

__all__ = ["SettingsPage"]


def _card(title: str, subtitle: str = "") -> tuple[QFrame, QVBoxLayout]:
    card = QFrame()
    card.setObjectName("Card")
    lay = QVBoxLayout(card)
    lay.setContentsMargins(20, 16, 20, 18)
    lay.setSpacing(10)
    t = QLabel(title)
    t.setObjectName("SectionTitle")
    lay.addWidget(t)
    if subtitle:
        s = QLabel(subtitle)
        s.setObjectName("Muted")
        s.setWordWrap(True)
        lay.addWidget(s)
    return card, lay


def _form() -> QFormLayout:
    form = QFormLayout()
    form.setLabelAlignment(Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignVCenter)
    form.setFormAlignment(Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignVCenter)
    form.setHorizontalSpacing(24)
    form.setVerticalSpacing(10)
    return form


def _switch_row(label: str, switch: ToggleSwitch) -> QHBoxLayout:
    row = QHBoxLayout()
    text = QLabel(label)
    text.setBuddy(switch)
    row.addWidget(text, 1)
    row.addWidget(switch)
    return row


class SettingsPage(QScrollArea):
    api_toggled = Signal(bool)
    port_changed = Signal(int)
    expose_toggled = Signal(bool)
    new_key_requested = Signal()
    copy_key_requested = Signal()
    num_ctx_changed = Signal(int)
    num_gpu_changed = Signal(int)
    num_thread_changed = Signal(int)
    theme_changed = Signal(str)
    models_dir_changed = Signal(str)
    browse_models_dir = Signal()
    open_logs = Signal()
    show_shortcuts = Signal()

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("SettingsPage")
        self.setWidgetResizable(True)
        body = QWidget()
        body.setObjectName("SettingsPage")
        # Stretches either side (not an alignment flag) keep the column's width fixed before
        # heights are computed, so wrapped labels get the height they need.
        outer = QHBoxLayout(body)
        outer.setContentsMargins(28, 24, 28, 28)
        column = QWidget()
        column.setMaximumWidth(720)
        column.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Preferred)
        lay = QVBoxLayout(column)
        lay.setContentsMargins(0, 0, 0, 0)
        lay.setSpacing(16)
        title = QLabel(self.tr("Settings"))
        title.setObjectName("PageTitle")
        lay.addWidget(title)
        lay.addWidget(self._api_card())
        lay.addWidget(self._engine_card())
        self.tools = ToolsCard()
        lay.addWidget(self.tools)
        lay.addWidget(self._look_card())
        lay.addStretch(1)
        outer.addStretch(0)
        outer.addWidget(column, 1)
        outer.addStretch(0)
        self.setWidget(body)

    def _api_card(self) -> QFrame:
        card, lay = _card(
            self.tr("Local API"),
            self.tr(
                "Let other programs (editors, scripts, Open WebUI…) use your models through "
                "Hearth's Ollama- and OpenAI-compatible API."
            ),
        )
        self.api_switch = ToggleSwitch(self.tr("Local API on or off"))
        lay.addLayout(_switch_row(self.tr("Serve the API on this computer"), self.api_switch))
        form = _form()
        self.port = QSpinBox()
        self.port.setRange(1024, 65535)
        self.port.setAccessibleName(self.tr("API port"))
        self.port.setKeyboardTracking(False)
        self.port.setFixedWidth(200)
        form.addRow(self.tr("Port"), self.port)
        lay.addLayout(form)
        self.expose_switch = ToggleSwitch(self.tr("Expose the API to the network"))
        lay.addLayout(_switch_row(self.tr("Expose to the network"), self.expose_switch))
        self.warning = QLabel(
            self.tr(
                "⚠ Anyone on your network who has the key below can use your models and see "
                "what they are asked. Turn this on only on networks you trust."
            )
        )
        self.warning.setObjectName("Warning")
        self.warning.setWordWrap(True)
        lay.addWidget(self.warning)
        key_row = QHBoxLayout()
        self.key = QLineEdit()
        self.key.setReadOnly(True)
        self.key.setAccessibleName(self.tr("API key"))
        self.copy_key = QPushButton(self.tr("Copy"))
        self.copy_key.setAccessibleName(self.tr("Copy the API key"))
        self.new_key = QPushButton(self.tr("New key"))
        self.new_key.setAccessibleName(self.tr("Generate a new API key"))
        key_row.addWidget(QLabel(self.tr("API key")))
        key_row.addWidget(self.key, 1)
        key_row.addWidget(self.copy_key)
        key_row.addWidget(self.new_key)
        self.key_row = QWidget()
        self.key_row.setLayout(key_row)
        key_row.setContentsMargins(0, 0, 0, 0)
        lay.addWidget(self.key_row)
        self.api_status = QLabel()
        self.api_status.setObjectName("Muted")
        self.api_status.setWordWrap(True)
        self.api_status.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.api_status.setAccessibleName(self.tr("API address"))
        lay.addWidget(self.api_status)
        self.api_switch.toggled.connect(self.api_toggled)
        self.expose_switch.toggled.connect(self.expose_toggled)
        self.port.valueChanged.connect(self.port_changed)
        self.new_key.clicked.connect(self.new_key_requested)
        self.copy_key.clicked.connect(self.copy_key_requested)
        return card

    def _engine_card(self) -> QFrame:
        card, lay = _card(
            self.tr("Engine"),
            self.tr("Defaults for every chat; a chat's own settings come first."),
        )
        form = _form()
        self.num_ctx = QComboBox()
        self.num_ctx.setAccessibleName(self.tr("Default context length"))
        self.num_ctx.view().setAccessibleName(self.tr("Context lengths"))
        # 0: none sent, the service decides (the model's own num_ctx, else its default)
        self.num_ctx.addItem(self.tr("Automatic"), 0)
        for n in (2048, 4096, 8192, 16384, 32768, 65536, 131072):
            self.num_ctx.addItem(self.tr("%1 tokens").replace("%1", f"{n:,}"), n)
        self.num_gpu = QSpinBox()
        self.num_gpu.setRange(-1, 999)
        self.num_gpu.setSpecialValueText(self.tr("Automatic"))
        self.num_gpu.setAccessibleName(self.tr("GPU layers"))
        self.num_gpu.setToolTip(self.tr("Layers to put on the GPU; 0 runs on the CPU only"))
        self.num_thread = QSpinBox()
        self.num_thread.setRange(0, 256)
        self.num_thread.setSpecialValueText(self.tr("Automatic"))
        self.num_thread.setAccessibleName(self.tr("CPU threads"))
        for spin in (self.num_gpu, self.num_thread):
            spin.setKeyboardTracking(False)
        for w in (self.num_ctx, self.num_gpu, self.num_thread):
            w.setFixedWidth(200)
        folder = QHBoxLayout()
        self.models_dir = QLineEdit()
        self.models_dir.setPlaceholderText(self.tr("Default folder"))
        self.models_dir.setAccessibleName(self.tr("Models folder"))
        self.browse = QPushButton(self.tr("Browse…"))
        self.browse.setAccessibleName(self.tr("Choose the models folder"))
        folder.addWidget(self.models_dir, 1)
        folder.addWidget(self.browse)
        form.addRow(self.tr("Context length"), self.num_ctx)
        form.addRow(self.tr("GPU layers"), self.num_gpu)
        form.addRow(self.tr("CPU threads"), self.num_thread)
        form.addRow(self.tr("Models folder"), folder)
        lay.addLayout(form)
        self.num_ctx.activated.connect(
            lambda i: self.num_ctx_changed.emit(self.num_ctx.itemData(i))
        )
        self.num_gpu.valueChanged.connect(self.num_gpu_changed)
        self.num_thread.valueChanged.connect(self.num_thread_changed)
        self.models_dir.editingFinished.connect(
            lambda: self.models_dir_changed.emit(self.models_dir.text().strip())
        )
        self.browse.clicked.connect(self.browse_models_dir)
        return card

    def _look_card(self) -> QFrame:
        card, lay = _card(self.tr("Appearance and help"))
        form = _form()
        self.theme = QComboBox()
        self.theme.setAccessibleName(self.tr("Theme"))
        self.theme.view().setAccessibleName(self.tr("Themes"))
        for key, label in (
            ("system", self.tr("Follow the system")),
            ("light", self.tr("Light")),
            ("dark", self.tr("Dark")),
        ):
            self.theme.addItem(label, key)
        self.theme.setFixedWidth(200)
        form.addRow(self.tr("Theme"), self.theme)
        lay.addLayout(form)
        row = QHBoxLayout()
        keys = QPushButton(self.tr("Keyboard shortcuts (F1)"))
        keys.setAccessibleName(self.tr("Show keyboard shortcuts"))
        logs = QPushButton(self.tr("Open the log folder"))
        logs.setAccessibleName(self.tr("Open the folder with the engine log"))
        row.addWidget(keys)
        row.addWidget(logs)
        row.addStretch(1)
        lay.addLayout(row)
        self.theme.activated.connect(lambda i: self.theme_changed.emit(self.theme.itemData(i)))
        keys.clicked.connect(self.show_shortcuts)
        logs.clicked.connect(self.open_logs)
        return card

    def api_status_text(self, s: AppSettings, port: int | None) -> str:
        """The Local API's state in a sentence; `port` is where the service listens (None
        while it is starting)."""
        if not s.api_enabled:
            return self.tr("Off: only Hearth itself can reach its engine (a private port and key).")
        if port is None:
            return self.tr("Starting on port %1…").replace("%1", str(s.api_port))
        if s.api_expose:
            return self.tr(
                "On: listening on every network interface, port %1. Clients send the header "
                "“Authorization: Bearer <key>”."
            ).replace("%1", str(port))
        return (
            self.tr("On: listening at http://127.0.0.1:%1 (try %2).")
            .replace("%1", str(port))
            .replace("%2", f"curl http://127.0.0.1:{port}/api/tags")
        )

    def show_settings(self, s: AppSettings, api_text: str) -> None:
        """Reflect the settings without sending change signals back."""
        widgets = (
            self.api_switch,
            self.expose_switch,
            self.port,
            self.num_ctx,
            self.num_gpu,
            self.num_thread,
            self.theme,
        )
        for w in widgets:
            w.blockSignals(True)
        self.api_switch.setChecked(s.api_enabled)
        self.port.setValue(s.api_port)
        self.expose_switch.setChecked(s.api_expose)
        self.key.setText(s.api_key)
        idx = self.num_ctx.findData(s.num_ctx)
        if idx < 0:
            self.num_ctx.addItem(self.tr("%1 tokens").replace("%1", f"{s.num_ctx:,}"), s.num_ctx)
            idx = self.num_ctx.count() - 1
        self.num_ctx.setCurrentIndex(idx)
        self.num_gpu.setValue(s.num_gpu)
        self.num_thread.setValue(s.num_thread)
        self.theme.setCurrentIndex(max(0, self.theme.findData(s.theme)))
        if not self.models_dir.hasFocus():
            self.models_dir.setText(s.models_dir)
        for w in widgets:
            w.blockSignals(False)
        self.port.setEnabled(s.api_enabled)
        self.expose_switch.setEnabled(s.api_enabled)
        exposed = s.api_enabled and s.api_expose
        self.warning.setVisible(exposed)
        self.key_row.setVisible(exposed)
        self.api_status.setText(api_text)
