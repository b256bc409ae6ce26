"""The main window: sidebar, the three pages, toasts, the drop overlay, the shortcuts, and
the dialogs (views.dialogs.Dialogs) opened over it.

The shortcuts that only move around the window (pages, search, message box, model chooser,
the shortcuts sheet) are connected here; those that act on a chat or a model are connected
by the page wiring (wiring_chat.py, wiring_models.py)."""

from __future__ import annotations

from PySide6.QtCore import QEvent, QObject, Qt
from PySide6.QtGui import QAction, QDragEnterEvent, QDropEvent, QKeySequence, QResizeEvent
from PySide6.QtWidgets import QHBoxLayout, QMainWindow, QStackedWidget, QWidget

from ..controllers.drops import DropController
from ..item_models.chat_list import ChatListModel
from ..item_models.conversation import ConversationModel
from ..item_models.model_list import ModelListModel
from ..theme import Palette
from ..widgets.bits import DropOverlay, Toast
from .chat_page import ChatPage
from .dialogs import Dialogs
from .models_page import ModelsPage
from .settings_page import SettingsPage
from .sidebar import Sidebar

__all__ = ["MainWindow", "CHAT_PAGE", "MODELS_PAGE", "SETTINGS_PAGE"]

CHAT_PAGE, MODELS_PAGE, SETTINGS_PAGE = 0, 1, 2
_DRAG_EVENTS = (
    QEvent.Type.DragEnter,
    QEvent.Type.DragMove,
    QEvent.Type.DragLeave,
    QEvent.Type.Drop,
)


class MainWindow(QMainWindow):
    def __init__(
        self,
        chats: ChatListModel,
        conversation: ConversationModel,
        models: ModelListModel,
        drops: DropController,
        palette: Palette,
    ) -> None:
        super().__init__()
        self.setWindowTitle("Hearth")
        self.setAccessibleName(self.tr("Hearth"))
        self.resize(1180, 780)
        self.setMinimumSize(820, 520)
        self._drops = drops
        central = QWidget()
        lay = QHBoxLayout(central)
        lay.setContentsMargins(0, 0, 0, 0)
        lay.setSpacing(0)
        self.sidebar = Sidebar(chats)
        self.stack = QStackedWidget()
        self.chat_page = ChatPage(conversation, models, palette)
        self.models_page = ModelsPage(models)
        self.settings_page = SettingsPage()
        for page in (self.chat_page, self.models_page, self.settings_page):
            self.stack.addWidget(page)
        lay.addWidget(self.sidebar)
        lay.addWidget(self.stack, 1)
        self.setCentralWidget(central)
        self.dialogs = Dialogs(self)
        self.toast = Toast(self.stack)
        self.overlay = DropOverlay(central)
        self.sidebar.page_requested.connect(self.show_page)
        self.setAcceptDrops(True)
        self._make_actions()
        self.show_page(CHAT_PAGE)

    def _make_actions(self) -> None:
        def act(name: str, keys: list[QKeySequence | str]) -> QAction:
            a = QAction(name, self)
            a.setShortcuts([QKeySequence(k) for k in keys])
            a.setShortcutContext(Qt.ShortcutContext.WindowShortcut)
            self.addAction(a)
            return a

        self.act_new_chat = act(self.tr("New chat"), ["Ctrl+N"])
        self.act_search = act(self.tr("Search chats"), ["Ctrl+K", "Ctrl+F"])
        self.act_focus = act(self.tr("Go to the message box"), ["Ctrl+L"])
        self.act_stop = act(self.tr("Stop"), ["Esc"])
        self.act_regenerate = act(self.tr("Regenerate"), ["Ctrl+R"])
        self.act_edit_last = act(self.tr("Edit the last question"), ["Ctrl+E"])
        self.act_prev_version = act(self.tr("Previous version"), ["Alt+Left"])
        self.act_next_version = act(self.tr("Next version"), ["Alt+Right"])
        self.act_copy_last = act(self.tr("Copy the last reply"), ["Ctrl+Shift+C"])
        self.act_attach = act(self.tr("Attach an image"), ["Ctrl+O"])
        self.act_model = act(self.tr("Choose the model"), ["Ctrl+M"])
        self.act_chat_settings = act(self.tr("Chat settings"), ["Ctrl+;"])
        self.act_compare = act(self.tr("Compare two models"), ["Ctrl+Shift+M"])
        self.act_import = act(self.tr("Import a model"), ["Ctrl+I"])
        self.act_settings = act(self.tr("Settings"), ["Ctrl+,", "Ctrl+3"])
        self.act_chats = act(self.tr("Chats"), ["Ctrl+1"])
        self.act_models = act(self.tr("Models"), ["Ctrl+2"])
        self.act_help = act(self.tr("Keyboard shortcuts"), ["F1"])
        self.act_chats.triggered.connect(lambda: self.show_page(CHAT_PAGE))
        self.act_models.triggered.connect(lambda: self.show_page(MODELS_PAGE))
        self.act_settings.triggered.connect(lambda: self.show_page(SETTINGS_PAGE))
        self.act_search.triggered.connect(self._focus_search)
        self.act_focus.triggered.connect(self.focus_composer)
        self.act_model.triggered.connect(self._focus_model)
        self.act_help.triggered.connect(self.dialogs.show_shortcuts)

    def show_page(self, page: int) -> None:
        self.stack.setCurrentIndex(page)
        self.sidebar.set_page(page)
        if page == CHAT_PAGE:
            self.focus_composer()

    def focus_composer(self) -> None:
        self.stack.setCurrentIndex(CHAT_PAGE)
        self.sidebar.set_page(CHAT_PAGE)
        self.chat_page.composer.edit.setFocus()

    def _focus_search(self) -> None:
        self.sidebar.search.setFocus()
        self.sidebar.search.selectAll()

    def _focus_model(self) -> None:
        self.show_page(CHAT_PAGE)
        self.chat_page.model_box.setFocus()
        self.chat_page.model_box.showPopup()

    def notify(self, level: str, text: str) -> None:
        self.toast.show_message(level, text)

    # -- drag and drop anywhere on the window ---------------------------------------------------
    # Child widgets (text boxes especially) would take a drop as text; an event filter on the
    # application sees the drag first, for every widget of this window.

    def eventFilter(self, obj: QObject, event: QEvent) -> bool:
        if event.type() in _DRAG_EVENTS and isinstance(obj, QWidget) and obj.window() is self:
            return self._drag(event)
        return super().eventFilter(obj, event)

    def _drag(self, event: QEvent) -> bool:
        if event.type() == QEvent.Type.DragLeave:
            self.overlay.hide()
            return True
        assert isinstance(event, QDragEnterEvent | QDropEvent)
        mime = event.mimeData()
        if not self._drops.kind(mime):
            self.overlay.hide()
            return False
        if event.type() == QEvent.Type.Drop:
            self.overlay.hide()
            event.acceptProposedAction()
            self._drops.handle(mime)
            return True
        self.overlay.show_hint(self._drops.hint(mime))
        event.acceptProposedAction()
        return True

    def dragEnterEvent(self, event: QDragEnterEvent) -> None:
        self._drag(event)

    def dropEvent(self, event: QDropEvent) -> None:
        self._drag(event)

    def resizeEvent(self, e: QResizeEvent) -> None:
        super().resizeEvent(e)
        self.toast.reposition()
        central = self.centralWidget()
        if self.overlay.isVisible() and central is not None:
            self.overlay.setGeometry(central.rect())
