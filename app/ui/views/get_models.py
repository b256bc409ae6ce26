"""The "Get models" window: the curated list (catalog.py) with sizes and the memory each
needs, a Hugging Face search, a name field for any `hf.co/...` or library name, one progress
bar with a Cancel button per download, and the "work offline" switch. It only draws and
emits; DownloadsController acts."""

from __future__ import annotations

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (
    QCheckBox,
    QDialog,
    QFrame,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QListWidget,
    QListWidgetItem,
    QProgressBar,
    QPushButton,
    QVBoxLayout,
    QWidget,
)

from ..catalog import CATALOG, FIRST_RUN_CHOICE, CatalogEntry

__all__ = ["GetModelsDialog", "DownloadRow", "FirstModelOffer"]

_NAME_ROLE = Qt.ItemDataRole.UserRole


def _entry_text(e: CatalogEntry) -> str:
    engine = "Hearth's engine" if e.engine == "hearth" else "the llama.cpp engine"
    return (
        f"{e.title}  —  {e.kind}\n{e.blurb}\n"
        f"download ≈ {e.download_gb:.1f} GB  ·  memory ≈ {e.memory_gb:.1f} GB  ·  runs on {engine}"
    )


class DownloadRow(QWidget):
    """One download: its name, status, a progress bar and Cancel."""

    cancel_requested = Signal(str)

    def __init__(self, name: str, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.name = name
        lay = QHBoxLayout(self)
        lay.setContentsMargins(0, 0, 0, 0)
        self.label = QLabel(name)
        self.bar = QProgressBar()
        self.bar.setRange(0, 0)
        self.bar.setAccessibleName(self.tr("Download progress of %1").replace("%1", name))
        self.cancel = QPushButton(self.tr("Cancel"))
        self.cancel.clicked.connect(lambda: self.cancel_requested.emit(self.name))
        lay.addWidget(self.label, 2)
        lay.addWidget(self.bar, 3)
        lay.addWidget(self.cancel)

    def update_progress(self, status: str, completed: int, total: int) -> None:
        self.label.setText(f"{self.name}\n{status}")
        if total > 0:
            self.bar.setRange(0, 1000)
            self.bar.setValue(int(1000 * completed / total))
        else:
            self.bar.setRange(0, 0)


class GetModelsDialog(QDialog):
    pull_requested = Signal(str)
    cancel_requested = Signal(str)
    search_requested = Signal(str)
    offline_toggled = Signal(bool)

    def __init__(self, offline: bool, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("GetModels")
        self.setWindowTitle(self.tr("Get models"))
        self.resize(720, 620)
        lay = QVBoxLayout(self)

        lay.addWidget(QLabel(self.tr("Recommended: small models that run on most computers")))
        self.catalog = QListWidget()
        self.catalog.setAccessibleName(self.tr("Recommended models"))
        self.catalog.setWordWrap(True)  # a row per model, its lines all visible
        self.catalog.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.catalog.setSpacing(3)
        for e in CATALOG:
            item = QListWidgetItem(_entry_text(e))
            item.setData(_NAME_ROLE, e.name)
            self.catalog.addItem(item)
        self.catalog.itemDoubleClicked.connect(self._get_item)
        lay.addWidget(self.catalog, 3)

        search = QHBoxLayout()
        self.query = QLineEdit()
        self.query.setPlaceholderText(self.tr("Search Hugging Face for GGUF models…"))
        self.query.returnPressed.connect(self._search)
        self.search_btn = QPushButton(self.tr("Search"))
        self.search_btn.clicked.connect(self._search)
        search.addWidget(self.query, 1)
        search.addWidget(self.search_btn)
        lay.addLayout(search)
        self.results = QListWidget()
        self.results.setAccessibleName(self.tr("Search results"))
        self.results.itemDoubleClicked.connect(self._get_item)
        lay.addWidget(self.results, 2)

        by_name = QHBoxLayout()
        self.name = QLineEdit()
        self.name.setPlaceholderText(self.tr("or a name: hf.co/OWNER/REPO:Q4_K_M, llama3.2:1b"))
        self.get_btn = QPushButton(self.tr("Download"))
        self.get_btn.setProperty("kind", "primary")
        self.get_btn.clicked.connect(self._get_selected)
        by_name.addWidget(self.name, 1)
        by_name.addWidget(self.get_btn)
        lay.addLayout(by_name)

        self.downloads = QVBoxLayout()
        lay.addLayout(self.downloads)
        self.rows: dict[str, DownloadRow] = {}

        self.offline = QCheckBox(self.tr("Work offline (no downloads or searches)"))
        self.offline.setChecked(offline)
        self.offline.toggled.connect(self.offline_toggled)
        lay.addWidget(self.offline)

    def _search(self) -> None:
        if self.query.text().strip():
            self.search_requested.emit(self.query.text().strip())

    def _get_item(self, item: QListWidgetItem) -> None:
        self.pull_requested.emit(str(item.data(_NAME_ROLE)))

    def _get_selected(self) -> None:
        typed = self.name.text().strip()
        if typed:
            self.pull_requested.emit(typed)
            return
        for view in (self.results, self.catalog):
            item = view.currentItem()
            if item is not None and item.isSelected():
                self._get_item(item)
                return

    def show_results(self, models: list[dict[str, object]]) -> None:
        self.results.clear()
        for m in models:
            text = f"{m.get('repo')}  ·  {m.get('pipeline_tag') or ''}  ·  {m.get('downloads')} ⬇"
            item = QListWidgetItem(text)
            item.setData(_NAME_ROLE, str(m.get("name")))
            self.results.addItem(item)
        if not models:
            self.results.addItem(self.tr("No GGUF models found."))

    def download_started(self, name: str) -> None:
        row = DownloadRow(name, self)
        row.cancel_requested.connect(self.cancel_requested)
        self.rows[name] = row
        self.downloads.addWidget(row)

    def download_progress(self, name: str, status: str, completed: int, total: int) -> None:
        row = self.rows.get(name)
        if row is not None:
            row.update_progress(status, completed, total)

    def download_finished(self, name: str, _ok: bool, _message: str) -> None:
        row = self.rows.pop(name, None)
        if row is not None:
            row.deleteLater()


class FirstModelOffer(QFrame):
    """The first-run offer of a real chat model, a banner inside the window (no pop-up):
    Download (the suggested model), Choose another… (opens "Get models"), Not now."""

    download = Signal()
    choose = Signal()

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("FirstModelOffer")
        e = FIRST_RUN_CHOICE
        lay = QHBoxLayout(self)
        text = QLabel(
            self.tr(
                "Hearth comes with a tiny base model that can continue text but not follow "
                "instructions. Download %1 (about %2 GB, needs about %3 GB of memory) to chat?"
            )
            .replace("%1", e.title)
            .replace("%2", f"{e.download_gb:.1f}")
            .replace("%3", f"{e.memory_gb:.1f}")
        )
        text.setWordWrap(True)
        lay.addWidget(text, 1)
        self.download_btn = QPushButton(self.tr("Download"))
        self.download_btn.setProperty("kind", "primary")
        self.choose_btn = QPushButton(self.tr("Choose another…"))
        self.later_btn = QPushButton(self.tr("Not now"))
        for b in (self.download_btn, self.choose_btn, self.later_btn):
            lay.addWidget(b)
            b.clicked.connect(self.hide)
        self.download_btn.clicked.connect(self.download)
        self.choose_btn.clicked.connect(self.choose)
