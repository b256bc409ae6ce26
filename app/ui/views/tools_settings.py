"""Settings → Tools: the MCP servers (add, edit, remove, paste a `{"mcpServers": ...}`
document), each one's status and tools, the step limit and call timeout, and the tools that
run without asking. Views only: the wiring (wiring_tools.py) fills them and acts on them."""

from __future__ import annotations

import json
import shlex
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QDialog,
    QDialogButtonBox,
    QFormLayout,
    QFrame,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QListWidget,
    QPlainTextEdit,
    QPushButton,
    QSpinBox,
    QStackedWidget,
    QTreeWidget,
    QTreeWidgetItem,
    QVBoxLayout,
    QWidget,
)

__all__ = ["ToolsCard", "ServerRow", "ServerDialog", "PasteServersDialog"]

# validate(document) -> "" when it parses, else the sentence saying what is wrong
Validate = Callable[[dict[str, Any] | str], str]


@dataclass
class ServerRow:
    """One server as the card shows it."""

    name: str
    summary: str  # the command line or the URL
    enabled: bool = True
    state: str = "stopped"
    error: str = ""
    tools: list[tuple[str, str]] = field(default_factory=list)  # (name, description)
    protocol: str = ""  # the MCP version agreed when it last started


STATE_NAMES = {
    "stopped": "not started",
    "starting": "starting…",
    "running": "running",
    "failed": "failed",
}


class ToolsCard(QFrame):
    add_requested = Signal()
    edit_requested = Signal(str)  # server name
    remove_requested = Signal(str)
    paste_requested = Signal()
    check_requested = Signal()
    max_steps_changed = Signal(int)
    call_timeout_changed = Signal(int)
    forget_allowed = Signal(int)  # the row of the "always allow" grant to revoke

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("Card")
        lay = QVBoxLayout(self)
        lay.setContentsMargins(20, 16, 20, 18)
        lay.setSpacing(10)
        title = QLabel(self.tr("Tools"))
        title.setObjectName("SectionTitle")
        lay.addWidget(title)
        sub = QLabel(
            self.tr(
                "Programs (MCP servers) a model may use while it answers: search files, "
                "fetch pages, query a database. Each call asks you first. Turn servers on per "
                "chat with the Tools button above the conversation."
            )
        )
        sub.setObjectName("Muted")
        sub.setWordWrap(True)
        lay.addWidget(sub)
        self.load_error = QLabel()
        self.load_error.setObjectName("Warning")
        self.load_error.setWordWrap(True)
        self.load_error.hide()
        lay.addWidget(self.load_error)

        self.tree = QTreeWidget()
        self.tree.setAccessibleName(self.tr("Tool servers and their tools"))
        self.tree.setHeaderLabels([self.tr("Server / tool"), self.tr("Status")])
        self.tree.setColumnWidth(0, 360)
        self.tree.setMinimumHeight(150)
        self.tree.itemDoubleClicked.connect(self._on_double_click)
        self.tree.currentItemChanged.connect(lambda *_a: self._refresh_buttons())
        lay.addWidget(self.tree)
        self.empty = QLabel(
            self.tr("No servers yet. Add one, or paste the JSON of another app's MCP settings.")
        )
        self.empty.setObjectName("Muted")
        self.empty.setWordWrap(True)
        lay.addWidget(self.empty)

        row = QHBoxLayout()
        self.add_btn = QPushButton(self.tr("Add…"))
        self.add_btn.setAccessibleName(self.tr("Add a tool server"))
        self.edit_btn = QPushButton(self.tr("Edit…"))
        self.edit_btn.setAccessibleName(self.tr("Edit the selected tool server"))
        self.remove_btn = QPushButton(self.tr("Remove"))
        self.remove_btn.setAccessibleName(self.tr("Remove the selected tool server"))
        self.paste_btn = QPushButton(self.tr("Paste JSON…"))
        self.paste_btn.setAccessibleName(self.tr("Add servers from pasted JSON"))
        self.check_btn = QPushButton(self.tr("Start and list tools"))
        self.check_btn.setAccessibleName(self.tr("Start the servers and list their tools"))
        for b in (self.add_btn, self.edit_btn, self.remove_btn, self.paste_btn):
            row.addWidget(b)
        row.addStretch(1)
        row.addWidget(self.check_btn)
        lay.addLayout(row)
        self.add_btn.clicked.connect(self.add_requested)
        self.paste_btn.clicked.connect(self.paste_requested)
        self.check_btn.clicked.connect(self.check_requested)
        self.edit_btn.clicked.connect(lambda: self._emit_selected(self.edit_requested))
        self.remove_btn.clicked.connect(lambda: self._emit_selected(self.remove_requested))

        form = QFormLayout()
        form.setHorizontalSpacing(24)
        self.max_steps = QSpinBox()
        self.max_steps.setRange(1, 100)
        self.max_steps.setAccessibleName(self.tr("Step limit"))
        self.max_steps.setToolTip(
            self.tr("How many times one reply may go back to the model after calling tools")
        )
        self.call_timeout = QSpinBox()
        self.call_timeout.setRange(1, 3600)
        self.call_timeout.setSuffix(self.tr(" s"))
        self.call_timeout.setAccessibleName(self.tr("Call timeout"))
        self.call_timeout.setToolTip(
            self.tr("A call that runs longer is stopped and the model is told it timed out")
        )
        for spin in (self.max_steps, self.call_timeout):
            spin.setKeyboardTracking(False)
            spin.setFixedWidth(200)
        form.addRow(self.tr("Step limit"), self.max_steps)
        form.addRow(self.tr("Call timeout"), self.call_timeout)
        lay.addLayout(form)
        self.max_steps.valueChanged.connect(self.max_steps_changed)
        self.call_timeout.valueChanged.connect(self.call_timeout_changed)

        allowed_title = QLabel(self.tr("Tools and servers that run without asking"))
        allowed_title.setToolTip(
            self.tr("A grant holds while the server's command or address stays the same")
        )
        lay.addWidget(allowed_title)
        arow = QHBoxLayout()
        self.allowed = QListWidget()
        self.allowed.setAccessibleName(self.tr("Tools and servers that run without asking"))
        self.allowed.setMaximumHeight(90)
        self.forget_btn = QPushButton(self.tr("Ask again"))
        self.forget_btn.setAccessibleName(self.tr("Ask before each call the selected grant allows"))
        self.forget_btn.clicked.connect(self._forget)
        arow.addWidget(self.allowed, 1)
        arow.addWidget(self.forget_btn, 0, Qt.AlignmentFlag.AlignTop)
        lay.addLayout(arow)
        self._refresh_buttons()

    # -- showing -------------------------------------------------------------------------------

    def show_servers(self, rows: list[ServerRow], load_error: str = "") -> None:
        selected = self.selected_server()
        self.tree.clear()
        for r in rows:
            state = self.tr(STATE_NAMES.get(r.state, r.state))
            if not r.enabled:
                state = self.tr("off")
            if r.state == "running":
                state += " · " + self.tr("%1 tools").replace("%1", str(len(r.tools)))
                if r.protocol:
                    state += " · MCP " + r.protocol
            top = QTreeWidgetItem([f"{r.name}  —  {r.summary}", state])
            top.setData(0, Qt.ItemDataRole.UserRole, r.name)
            top.setToolTip(0, r.summary)
            if r.error:
                top.setToolTip(1, r.error)
                err = QTreeWidgetItem([r.error, ""])
                err.setFirstColumnSpanned(True)
                top.addChild(err)
            for name, description in r.tools:
                child = QTreeWidgetItem([name, ""])
                child.setToolTip(0, description)
                child.setData(0, Qt.ItemDataRole.UserRole, r.name)
                if description:
                    child.setText(0, f"{name} — {description.splitlines()[0][:90]}")
                top.addChild(child)
            self.tree.addTopLevelItem(top)
            top.setExpanded(bool(r.error) or len(r.tools) <= 6)
            if r.name == selected:
                self.tree.setCurrentItem(top)
        self.tree.setVisible(bool(rows))
        self.empty.setVisible(not rows)
        self.load_error.setText(load_error)
        self.load_error.setVisible(bool(load_error))
        self._refresh_buttons()

    def show_limits(self, max_steps: int, call_timeout: int) -> None:
        for spin, value in ((self.max_steps, max_steps), (self.call_timeout, call_timeout)):
            spin.blockSignals(True)
            spin.setValue(value)
            spin.blockSignals(False)

    def show_allowed(self, labels: list[str]) -> None:
        """The "always allow" grants, as "server: tool" or "server: every tool"."""
        self.allowed.clear()
        self.allowed.addItems(labels)
        self.forget_btn.setEnabled(bool(labels))

    def _server_items(self) -> list[QTreeWidgetItem]:
        found = (self.tree.topLevelItem(i) for i in range(self.tree.topLevelItemCount()))
        return [item for item in found if item is not None]

    def server_names(self) -> list[str]:
        return [str(item.data(0, Qt.ItemDataRole.UserRole)) for item in self._server_items()]

    def server_item(self, name: str) -> QTreeWidgetItem | None:
        items = self._server_items()
        return next((i for i in items if i.data(0, Qt.ItemDataRole.UserRole) == name), None)

    def selected_server(self) -> str:
        item = self.tree.currentItem()
        return str(item.data(0, Qt.ItemDataRole.UserRole) or "") if item else ""

    def select_server(self, name: str) -> None:
        item = self.server_item(name)
        if item is not None:
            self.tree.setCurrentItem(item)

    # -- acting --------------------------------------------------------------------------------

    def _refresh_buttons(self) -> None:
        chosen = bool(self.selected_server())
        self.edit_btn.setEnabled(chosen)
        self.remove_btn.setEnabled(chosen)
        self.check_btn.setEnabled(self.tree.topLevelItemCount() > 0)

    def _emit_selected(self, signal: Any) -> None:
        name = self.selected_server()
        if name:
            signal.emit(name)

    def _on_double_click(self, item: QTreeWidgetItem, _column: int) -> None:
        name = item.data(0, Qt.ItemDataRole.UserRole)
        if name and item.parent() is None:
            self.edit_requested.emit(str(name))

    def _forget(self) -> None:
        row = self.allowed.currentRow()
        if self.allowed.count():
            self.forget_allowed.emit(max(row, 0))


def _pairs(text: str, sep: str) -> dict[str, str]:
    out = {}
    for line in text.splitlines():
        if line.strip():
            key, _, value = line.partition(sep)
            out[key.strip()] = value.strip()
    return out


def _error_and_buttons(dialog: QDialog, lay: QVBoxLayout) -> QLabel:
    """The foot of an edit dialog: a hidden line that says what is wrong, then OK/Cancel
    (OK runs the dialog's own `accept`, which checks the fields). Returns the line."""
    error = QLabel()
    error.setObjectName("Warning")
    error.setWordWrap(True)
    error.setAccessibleName(dialog.tr("What is wrong"))
    error.hide()
    lay.addWidget(error)
    buttons = QDialogButtonBox(
        QDialogButtonBox.StandardButton.Ok | QDialogButtonBox.StandardButton.Cancel
    )
    buttons.accepted.connect(dialog.accept)
    buttons.rejected.connect(dialog.reject)
    lay.addWidget(buttons)
    return error


class ServerDialog(QDialog):
    """Add or edit one server: a program to start (command, arguments, folder, environment)
    or an address (URL, headers). `entry()` is its `mcpServers` entry; OK is refused, with
    the sentence from `validate`, while it does not parse."""

    def __init__(
        self,
        validate: Validate,
        name: str = "",
        entry: dict[str, Any] | None = None,
        parent: QWidget | None = None,
    ) -> None:
        super().__init__(parent)
        self._validate = validate
        entry = entry or {}
        self.setWindowTitle(self.tr("Edit tool server") if name else self.tr("Add tool server"))
        self.setMinimumWidth(520)
        lay = QVBoxLayout(self)
        form = QFormLayout()
        self.name = QLineEdit(name)
        self.name.setAccessibleName(self.tr("Server name"))
        self.name.setPlaceholderText("files")
        self.kind = QComboBox()
        self.kind.setAccessibleName(self.tr("How Hearth reaches the server"))
        self.kind.addItem(self.tr("A program Hearth starts (stdio)"), "stdio")
        self.kind.addItem(self.tr("A server at an address (HTTP)"), "http")
        self.enabled = QCheckBox(self.tr("On"))
        self.enabled.setChecked(bool(entry.get("enabled", True)))
        form.addRow(self.tr("Name"), self.name)
        form.addRow(self.tr("Kind"), self.kind)
        form.addRow(self.tr("Enabled"), self.enabled)
        lay.addLayout(form)

        self.pages = QStackedWidget()
        stdio = QWidget()
        sform = QFormLayout(stdio)
        self.command = QLineEdit(str(entry.get("command") or ""))
        self.command.setAccessibleName(self.tr("Command"))
        self.command.setPlaceholderText("npx")
        self.args = QLineEdit(shlex.join(str(a) for a in entry.get("args") or []))
        self.args.setAccessibleName(self.tr("Arguments"))
        self.args.setPlaceholderText("-y @modelcontextprotocol/server-filesystem ~/Documents")
        self.cwd = QLineEdit(str(entry.get("cwd") or ""))
        self.cwd.setAccessibleName(self.tr("Working folder"))
        self.env = QPlainTextEdit(
            "\n".join(f"{k}={v}" for k, v in (entry.get("env") or {}).items())
        )
        self.env.setAccessibleName(self.tr("Environment variables, one NAME=value a line"))
        self.env.setFixedHeight(70)
        sform.addRow(self.tr("Command"), self.command)
        sform.addRow(self.tr("Arguments"), self.args)
        sform.addRow(self.tr("Working folder"), self.cwd)
        sform.addRow(self.tr("Environment"), self.env)
        http = QWidget()
        hform = QFormLayout(http)
        self.url = QLineEdit(str(entry.get("url") or ""))
        self.url.setAccessibleName(self.tr("Server address"))
        self.url.setPlaceholderText("http://127.0.0.1:8000/mcp")
        self.headers = QPlainTextEdit(
            "\n".join(f"{k}: {v}" for k, v in (entry.get("headers") or {}).items())
        )
        self.headers.setAccessibleName(self.tr("HTTP headers, one Name: value a line"))
        self.headers.setFixedHeight(70)
        hform.addRow(self.tr("URL"), self.url)
        hform.addRow(self.tr("Headers"), self.headers)
        self.pages.addWidget(stdio)
        self.pages.addWidget(http)
        lay.addWidget(self.pages)
        self.kind.currentIndexChanged.connect(self.pages.setCurrentIndex)
        self.kind.setCurrentIndex(1 if entry.get("url") else 0)

        self.error = _error_and_buttons(self, lay)

    def server_name(self) -> str:
        return self.name.text().strip()

    def entry(self) -> dict[str, Any]:
        """The server's `mcpServers` entry, from the fields (empty fields left out)."""
        out: dict[str, Any]
        if self.kind.currentData() == "http":
            out = {"url": self.url.text().strip()}
            headers = _pairs(self.headers.toPlainText(), ":")
            if headers:
                out["headers"] = headers
        else:
            try:
                args = shlex.split(self.args.text())
            except ValueError:
                args = self.args.text().split()
            out = {"command": self.command.text().strip(), "args": args}
            env = _pairs(self.env.toPlainText(), "=")
            if env:
                out["env"] = env
            if self.cwd.text().strip():
                out["cwd"] = self.cwd.text().strip()
        if not self.enabled.isChecked():
            out["enabled"] = False
        return out

    def problem(self) -> str:
        """Why OK cannot be accepted yet ('' when it can)."""
        if not self.server_name():
            return self.tr("Give the server a name.")
        return self._validate({"mcpServers": {self.server_name(): self.entry()}})

    def accept(self) -> None:
        why = self.problem()
        self.error.setText(why)
        self.error.setVisible(bool(why))
        if not why:
            super().accept()


class PasteServersDialog(QDialog):
    """Paste another app's MCP settings (`{"mcpServers": {...}}`); OK is refused, with the
    sentence from `validate`, while the text does not parse."""

    def __init__(self, validate: Validate, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._validate = validate
        self.setWindowTitle(self.tr("Paste tool servers"))
        self.setMinimumSize(560, 380)
        lay = QVBoxLayout(self)
        hint = QLabel(
            self.tr(
                "Paste the JSON other apps (Claude Desktop, LM Studio, Jan…) use: "
                '{"mcpServers": {"name": {"command": …, "args": […]}}}. Servers with the same '
                "name are replaced."
            )
        )
        hint.setWordWrap(True)
        lay.addWidget(hint)
        self.text = QPlainTextEdit()
        self.text.setAccessibleName(self.tr("MCP servers JSON"))
        self.text.setPlaceholderText(
            json.dumps(
                {"mcpServers": {"files": {"command": "npx", "args": ["-y", "server"]}}},
                indent=2,
            )
        )
        lay.addWidget(self.text, 1)
        self.error = _error_and_buttons(self, lay)

    def accept(self) -> None:
        why = self._validate(self.text.toPlainText())
        self.error.setText(why)
        self.error.setVisible(bool(why))
        if not why:
            super().accept()
