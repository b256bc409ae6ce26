"""The sidebar: brand (with the chats menu: import, export all), new chat, search, the chat
list (rename, export, delete), page buttons, engine status."""

from __future__ import annotations

from PySide6.QtCore import QModelIndex, Qt, Signal, SignalInstance
from PySide6.QtGui import QAction, QKeySequence
from PySide6.QtWidgets import (
    QAbstractItemView,
    QButtonGroup,
    QFrame,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QListView,
    QMenu,
    QPushButton,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from ..item_models.chat_list import ChatListModel
from ..widgets.chat_delegate import ChatDelegate

__all__ = ["Sidebar"]


class Sidebar(QFrame):
    new_chat = Signal()
    chat_selected = Signal(int)
    rename_requested = Signal(int)
    delete_requested = Signal(int)
    export_requested = Signal(int)  # one chat
    export_all_requested = Signal()
    import_requested = Signal()
    search_changed = Signal(str)
    page_requested = Signal(int)  # 0 chats, 1 models, 2 settings

    def __init__(self, chats: ChatListModel, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("Sidebar")
        self.setFixedWidth(272)
        self._chats = chats
        lay = QVBoxLayout(self)
        lay.setContentsMargins(12, 14, 12, 12)
        lay.setSpacing(10)

        brand = QHBoxLayout()
        mark = QLabel("◆")
        mark.setObjectName("BrandMark")
        mark.setAccessibleName(self.tr("Hearth logo"))
        name = QLabel("Hearth")
        name.setObjectName("Brand")
        brand.addWidget(mark)
        brand.addWidget(name)
        brand.addStretch(1)
        self.chats_menu = QMenu(self)
        self.act_import_chats = self.chats_menu.addAction(self.tr("Import chats…"))
        self.act_import_chats.triggered.connect(self.import_requested)
        self.act_export_all = self.chats_menu.addAction(self.tr("Export all chats…"))
        self.act_export_all.triggered.connect(self.export_all_requested)
        self.menu_btn = QToolButton()
        self.menu_btn.setText("⋯")
        self.menu_btn.setAccessibleName(self.tr("Chats menu"))
        self.menu_btn.setToolTip(self.tr("Import or export chats"))
        self.menu_btn.setPopupMode(QToolButton.ToolButtonPopupMode.InstantPopup)
        self.menu_btn.setMenu(self.chats_menu)
        brand.addWidget(self.menu_btn)
        lay.addLayout(brand)

        self.new_btn = QPushButton(self.tr("+  New chat"))
        self.new_btn.setProperty("kind", "primary")
        self.new_btn.setAccessibleName(self.tr("New chat"))
        self.new_btn.setToolTip(self.tr("New chat (Ctrl+N)"))
        self.new_btn.clicked.connect(self.new_chat)
        lay.addWidget(self.new_btn)

        self.search = QLineEdit()
        self.search.setPlaceholderText(self.tr("Search chats  (Ctrl+K)"))
        self.search.setAccessibleName(self.tr("Search chats"))
        self.search.setClearButtonEnabled(True)
        self.search.textChanged.connect(self.search_changed)
        lay.addWidget(self.search)

        self.list = QListView()
        self.list.setObjectName("ChatList")
        self.list.setModel(chats)
        self.list.setItemDelegate(ChatDelegate(self.list))
        self.list.setAccessibleName(self.tr("Chats"))
        self.list.setMouseTracking(True)
        self.list.setVerticalScrollMode(QAbstractItemView.ScrollMode.ScrollPerPixel)
        self.list.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.list.setContextMenuPolicy(Qt.ContextMenuPolicy.ActionsContextMenu)
        self.list.clicked.connect(self._on_activated)
        self.list.activated.connect(self._on_activated)
        rename = QAction(self.tr("Rename…"), self.list)
        rename.setShortcut(QKeySequence(Qt.Key.Key_F2))
        rename.setShortcutContext(Qt.ShortcutContext.WidgetShortcut)
        rename.triggered.connect(lambda: self._emit_current(self.rename_requested))
        delete = QAction(self.tr("Delete…"), self.list)
        delete.setShortcut(QKeySequence(QKeySequence.StandardKey.Delete))
        delete.setShortcutContext(Qt.ShortcutContext.WidgetShortcut)
        delete.triggered.connect(lambda: self._emit_current(self.delete_requested))
        export = QAction(self.tr("Export chat…"), self.list)
        export.triggered.connect(lambda: self._emit_current(self.export_requested))
        self.list.addActions([rename, export, delete])
        lay.addWidget(self.list, 1)

        nav = QVBoxLayout()
        nav.setSpacing(2)
        self.nav = QButtonGroup(self)
        self.nav.setExclusive(True)
        for page, (text, tip) in enumerate(
            (
                (self.tr("Chats"), self.tr("Chats (Ctrl+1)")),
                (self.tr("Models"), self.tr("Models (Ctrl+2)")),
                (self.tr("Settings"), self.tr("Settings (Ctrl+3)")),
            )
        ):
            b = QPushButton(text)
            b.setProperty("kind", "nav")
            b.setCheckable(True)
            b.setAccessibleName(text)
            b.setToolTip(tip)
            self.nav.addButton(b, page)
            nav.addWidget(b)
        self.nav.idClicked.connect(self.page_requested)
        lay.addLayout(nav)

        self.status = QLabel()
        self.status.setObjectName("Stats")
        self.status.setWordWrap(True)
        self.status.setAccessibleName(self.tr("Engine status"))
        lay.addWidget(self.status)

    def _on_activated(self, index: QModelIndex) -> None:
        chat_id = index.data(ChatListModel.ChatIdRole)
        if chat_id:
            self.chat_selected.emit(int(chat_id))

    def _emit_current(self, signal: SignalInstance) -> None:
        chat_id = self.list.currentIndex().data(ChatListModel.ChatIdRole)
        if chat_id:
            signal.emit(int(chat_id))

    def select_chat(self, chat_id: int) -> None:
        row = self._chats.row_of(chat_id)
        if row >= 0:
            self.list.setCurrentIndex(self._chats.index(row))
        else:
            self.list.clearSelection()

    def set_page(self, page: int) -> None:
        self.nav.button(page).setChecked(True)

    def set_status(self, text: str, ok: bool) -> None:
        dot = "●"
        color = "#3FA34D" if ok else "#C8552B"
        self.status.setText(f"<span style='color:{color}'>{dot}</span> {text}")
