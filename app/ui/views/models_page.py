"""The Models page: installed models with their facts, import a .gguf, delete, details."""

from __future__ import annotations

from PySide6.QtCore import QItemSelection, Qt, Signal
from PySide6.QtWidgets import (
    QAbstractItemView,
    QFormLayout,
    QFrame,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QProgressBar,
    QPushButton,
    QTableView,
    QVBoxLayout,
    QWidget,
)

from ..item_models.model_list import (
    CAPABILITY_NAMES,
    CAPABILITY_TIPS,
    ModelListModel,
    ModelRow,
    human_bytes,
)

__all__ = ["ModelsPage"]


class ModelsPage(QWidget):
    get_models_requested = Signal()
    import_requested = Signal()
    refresh_requested = Signal()
    delete_requested = Signal(str)
    chat_requested = Signal(str)

    def __init__(self, model: ModelListModel, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("ModelsPage")
        self._model = model
        lay = QVBoxLayout(self)
        lay.setContentsMargins(28, 24, 28, 20)
        lay.setSpacing(12)

        top = QHBoxLayout()
        titles = QVBoxLayout()
        title = QLabel(self.tr("Models"))
        title.setObjectName("PageTitle")
        sub = QLabel(self.tr("GGUF models on this computer. Drop a .gguf anywhere to add one."))
        sub.setObjectName("Muted")
        titles.addWidget(title)
        titles.addWidget(sub)
        top.addLayout(titles, 1)
        self.refresh_btn = QPushButton(self.tr("Refresh"))
        self.refresh_btn.setAccessibleName(self.tr("Refresh the model list"))
        self.import_btn = QPushButton(self.tr("Import GGUF…"))
        self.import_btn.setProperty("kind", "primary")
        self.import_btn.setAccessibleName(self.tr("Import a GGUF model file"))
        self.import_btn.setToolTip(self.tr("Import a .gguf file (Ctrl+I)"))
        self.get_btn = QPushButton(self.tr("Get models…"))
        self.get_btn.setAccessibleName(self.tr("Download models from the internet"))
        top.addWidget(self.refresh_btn, 0, Qt.AlignmentFlag.AlignTop)
        top.addWidget(self.get_btn, 0, Qt.AlignmentFlag.AlignTop)
        top.addWidget(self.import_btn, 0, Qt.AlignmentFlag.AlignTop)
        lay.addLayout(top)

        self.progress_row = QWidget()
        pl = QHBoxLayout(self.progress_row)
        pl.setContentsMargins(0, 0, 0, 0)
        self.progress_label = QLabel()
        self.progress = QProgressBar()
        self.progress.setAccessibleName(self.tr("Import progress"))
        pl.addWidget(self.progress_label)
        pl.addWidget(self.progress, 1)
        self.progress_row.hide()
        lay.addWidget(self.progress_row)

        body = QHBoxLayout()
        body.setSpacing(16)
        self.table = QTableView()
        self.table.setModel(model)
        self.table.setAccessibleName(self.tr("Installed models"))
        self.table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.table.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
        self.table.verticalHeader().hide()
        self.table.setShowGrid(False)
        self.table.setAlternatingRowColors(False)
        self.table.verticalHeader().setDefaultSectionSize(36)
        hh = self.table.horizontalHeader()
        hh.setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
        hh.setStretchLastSection(True)
        hh.setMinimumSectionSize(60)
        self.table.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.table.setWordWrap(False)
        hh.setHighlightSections(False)
        self.table.selectionModel().selectionChanged.connect(self._on_selection)
        model.modelReset.connect(self._after_reset)
        # Bound methods (not lambdas): Qt drops them when this page is deleted.
        model.dataChanged.connect(self._on_data_changed)
        body.addWidget(self.table, 1)
        body.addWidget(self._details_card())
        lay.addLayout(body, 1)

        self.refresh_btn.clicked.connect(self.refresh_requested)
        self.import_btn.clicked.connect(self.import_requested)
        self.get_btn.clicked.connect(self.get_models_requested)
        self.delete_btn.clicked.connect(self._ask_delete)
        self.chat_btn.clicked.connect(lambda: self.chat_requested.emit(self.selected_name()))
        self._show_details(None)

    def _details_card(self) -> QFrame:
        card = QFrame()
        card.setObjectName("Card")
        card.setFixedWidth(320)
        cl = QVBoxLayout(card)
        cl.setContentsMargins(18, 16, 18, 16)
        self.d_name = QLabel()
        self.d_name.setObjectName("SectionTitle")
        self.d_name.setWordWrap(True)
        self.d_name.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        cl.addWidget(self.d_name)
        self.badge_row = QWidget()  # one badge per capability: "Vision" says it sees images
        self._badge_layout = QHBoxLayout(self.badge_row)
        self._badge_layout.setContentsMargins(0, 2, 0, 6)
        self._badge_layout.setSpacing(6)
        self.badges: dict[str, QLabel] = {}
        cl.addWidget(self.badge_row)
        form = QFormLayout()
        form.setHorizontalSpacing(16)
        form.setVerticalSpacing(8)
        self.d_fields: dict[str, QLabel] = {}
        for key, label in (
            ("size", self.tr("File size")),
            ("params", self.tr("Parameters")),
            ("quant", self.tr("Quantization")),
            ("arch", self.tr("Architecture")),
            ("ctx", self.tr("Context length")),
            ("caps", self.tr("Capabilities")),
            ("memory", self.tr("Memory when loaded")),
            ("runs", self.tr("Running on")),
        ):
            value = QLabel("—")
            value.setWordWrap(True)
            value.setAccessibleName(label)
            name = QLabel(label)
            name.setObjectName("Muted")
            form.addRow(name, value)
            self.d_fields[key] = value
        cl.addLayout(form)
        self.memory_note = QLabel()
        self.memory_note.setObjectName("Muted")
        self.memory_note.setWordWrap(True)
        cl.addWidget(self.memory_note)
        cl.addStretch(1)
        row = QHBoxLayout()
        self.chat_btn = QPushButton(self.tr("New chat"))
        self.chat_btn.setAccessibleName(self.tr("Start a chat with this model"))
        self.delete_btn = QPushButton(self.tr("Delete…"))
        self.delete_btn.setProperty("kind", "danger")
        self.delete_btn.setAccessibleName(self.tr("Delete this model"))
        row.addWidget(self.chat_btn)
        row.addStretch(1)
        row.addWidget(self.delete_btn)
        cl.addLayout(row)
        return card

    def selected(self) -> ModelRow | None:
        rows = self.table.selectionModel().selectedRows()
        if not rows:
            return None
        row = self._model.data(rows[0], ModelListModel.InfoRole)
        return row if isinstance(row, ModelRow) else None

    def selected_name(self) -> str:
        info = self.selected()
        return info.name if info else ""

    def select_name(self, name: str) -> None:
        row = self._model.row_of(name)
        if row >= 0:
            self.table.selectRow(row)

    def _after_reset(self) -> None:
        if self._model.rowCount() and not self.table.selectionModel().hasSelection():
            self.table.selectRow(0)
        self._show_details(self.selected())

    def _on_data_changed(self, *_args: object) -> None:
        self._show_details(self.selected())

    def _on_selection(self, _sel: QItemSelection, _old: QItemSelection) -> None:
        self._show_details(self.selected())

    def _show_badges(self, capabilities: list[str]) -> None:
        while self._badge_layout.count():
            item = self._badge_layout.takeAt(0)
            widget = item.widget() if item is not None else None
            if widget is not None:
                widget.hide()
                widget.deleteLater()
        self.badges = {}
        for cap in capabilities:
            badge = QLabel(self.tr(CAPABILITY_NAMES.get(cap, cap.capitalize())))
            badge.setObjectName("Badge")
            badge.setProperty("capability", cap)
            tip = self.tr(CAPABILITY_TIPS[cap]) if cap in CAPABILITY_TIPS else cap
            badge.setToolTip(tip)
            badge.setAccessibleName(badge.text() + ": " + tip)
            self._badge_layout.addWidget(badge)
            self.badges[cap] = badge
        self._badge_layout.addStretch(1)
        self.badge_row.setVisible(bool(capabilities))

    def _show_details(self, m: ModelRow | None) -> None:
        self._show_badges(m.capabilities if m is not None else [])
        self.delete_btn.setEnabled(m is not None)
        self.chat_btn.setEnabled(m is not None and m.chat)
        if m is None:
            self.d_name.setText(self.tr("No model selected"))
            for v in self.d_fields.values():
                v.setText("—")
            self.memory_note.setText("")
            return
        self.d_name.setText(m.name)
        f = self.d_fields
        f["size"].setText(human_bytes(m.size))
        f["params"].setText(m.parameter_size or "—")
        f["quant"].setText(m.quantization or "—")
        f["arch"].setText(" — ".join(filter(None, [m.architecture, m.engine])) or "—")
        f["ctx"].setText(
            self.tr("%1 tokens").replace("%1", f"{m.context_length:,}") if m.context_length else "—"
        )
        f["caps"].setText(", ".join(m.capabilities) if m.capabilities else "…")
        f["memory"].setText(human_bytes(m.memory_estimate) if m.memory_estimate else "—")
        f["runs"].setText(m.runs_on or self.tr("Not loaded"))
        parts = ", ".join(
            f"{k.replace('_', ' ')} {human_bytes(v)}" for k, v in m.memory_parts.items()
        )
        note = (
            self.tr("Estimated before loading, at the default context length (%1).").replace(
                "%1", parts
            )
            if m.memory_estimate and parts
            else ""
        )
        if m.problem:
            note = self.tr("Hearth cannot run this model: %1").replace("%1", m.problem)
        self.memory_note.setText(note)

    def _ask_delete(self) -> None:
        name = self.selected_name()
        if name and self.confirm_delete(name):
            self.delete_requested.emit(name)

    def confirm_delete(self, name: str) -> bool:
        from PySide6.QtWidgets import QMessageBox

        answer = QMessageBox.question(
            self,
            self.tr("Delete model"),
            self.tr("Delete “%1”? Its file is removed from Hearth's model store.").replace(
                "%1", name
            ),
            QMessageBox.StandardButton.Yes | QMessageBox.StandardButton.Cancel,
            QMessageBox.StandardButton.Cancel,
        )
        return answer == QMessageBox.StandardButton.Yes

    def show_import(self, status: str, completed: int, total: int) -> None:
        self.progress_row.show()
        self.progress_label.setText(status)
        if total > 0:
            self.progress.setRange(0, 1000)
            self.progress.setValue(int(1000 * completed / total))
        else:
            self.progress.setRange(0, 0)

    def hide_import(self) -> None:
        self.progress_row.hide()
