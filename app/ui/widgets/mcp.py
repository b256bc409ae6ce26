"""MCP's widgets beside the composer: the MCP menu (the open chat's servers' prompts and
resources), the small form a prompt's arguments are typed into, and the form a server's
question during a tool call (elicitation) is answered in, built from its fields
(`hearth.agent.elicit`: text, numbers, yes/no, one choice or several)."""

from __future__ import annotations

from typing import Any

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QDialog,
    QDialogButtonBox,
    QFormLayout,
    QLabel,
    QLineEdit,
    QListWidget,
    QListWidgetItem,
    QMenu,
    QPushButton,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from ...agent.content import PromptSpec, ResourceSpec
from ...agent.elicit import ElicitAnswer, Elicitation, FormField, check_values

__all__ = ["ElicitationDialog", "McpButton", "PromptArgsDialog", "prompt_hint"]


def prompt_hint(spec: PromptSpec) -> str:
    """`/name code=… language=…?` (a ? marks an optional argument)."""
    args = " ".join(f"{a.name}=…" + ("" if a.required else "?") for a in spec.arguments)
    return f"/{spec.name} {args}".rstrip()


class McpButton(QToolButton):
    """ "+ MCP": a menu of the chat's servers' prompts and resources, listed again each time it
    opens (`opening`; the lists arrive through `show_items`)."""

    opening = Signal()
    prompt_chosen = Signal(object)  # PromptSpec
    resource_chosen = Signal(object)  # ResourceSpec

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setText(self.tr("+ MCP"))
        self.setAccessibleName(self.tr("Prompts and resources of the chat's tool servers"))
        self.setToolTip(
            self.tr("Use a prompt of the chat's MCP servers (or type /name), or attach a resource")
        )
        self.setPopupMode(QToolButton.ToolButtonPopupMode.InstantPopup)
        self.menu_ = QMenu(self)
        self.setMenu(self.menu_)
        self.menu_.aboutToShow.connect(self.opening)
        self.show_items([], [])

    def show_items(self, prompts: list[PromptSpec], resources: list[ResourceSpec]) -> None:
        self.menu_.clear()
        self.menu_.addSection(self.tr("Prompts"))
        for p in prompts:
            act = self.menu_.addAction(prompt_hint(p))
            act.setToolTip(p.description or p.title)
            act.triggered.connect(lambda _c=False, spec=p: self.prompt_chosen.emit(spec))
        if not prompts:
            self.menu_.addAction(self.tr("(none)")).setEnabled(False)
        self.menu_.addSection(self.tr("Attach a resource"))
        for r in resources:
            act = self.menu_.addAction(f"{r.label}  ·  {r.server}")
            act.setToolTip(r.description or r.uri)
            act.triggered.connect(lambda _c=False, spec=r: self.resource_chosen.emit(spec))
        if not resources:
            self.menu_.addAction(self.tr("(none)")).setEnabled(False)


class PromptArgsDialog(QDialog):
    """The arguments of one prompt, one line each (required ones marked *)."""

    def __init__(
        self, spec: PromptSpec, values: dict[str, str], parent: QWidget | None = None
    ) -> None:
        super().__init__(parent)
        self.spec = spec
        self.setWindowTitle(self.tr("Prompt /%1").replace("%1", spec.name))
        lay = QVBoxLayout(self)
        if spec.description:
            about = QLabel(spec.description)
            about.setWordWrap(True)
            lay.addWidget(about)
        form = QFormLayout()
        self.edits: dict[str, QLineEdit] = {}
        for a in spec.arguments:
            edit = QLineEdit(values.get(a.name, ""))
            edit.setPlaceholderText(a.description)
            edit.setAccessibleName(a.name)
            self.edits[a.name] = edit
            form.addRow(a.name + (" *" if a.required else ""), edit)
        lay.addLayout(form)
        self.buttons = QDialogButtonBox(
            QDialogButtonBox.StandardButton.Ok | QDialogButtonBox.StandardButton.Cancel
        )
        self.buttons.accepted.connect(self.accept)
        self.buttons.rejected.connect(self.reject)
        lay.addWidget(self.buttons)
        for edit in self.edits.values():
            edit.textChanged.connect(self._check)
        self._check()

    def values(self) -> dict[str, str]:
        return {name: edit.text() for name, edit in self.edits.items()}

    def _check(self) -> None:
        ok = self.buttons.button(QDialogButtonBox.StandardButton.Ok)
        ok.setEnabled(not self.spec.missing(self.values()))


class ElicitationDialog(QDialog):
    """A server's question: its message and a field per property; Send (accept, the values
    checked first: a wrong one is said under the form), Decline, or Cancel (also closing the
    window). `answered` carries the `ElicitAnswer` once."""

    answered = Signal(object)

    def __init__(self, q: Elicitation, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.question = q
        self._done = False
        self.setWindowTitle(self.tr("%1 asks").replace("%1", q.server))
        lay = QVBoxLayout(self)
        head = QLabel(
            self.tr("The tool server <b>%1</b> asks:").replace("%1", q.server)
            + "<br>"
            + q.message.replace("&", "&amp;").replace("<", "&lt;")
        )
        head.setWordWrap(True)
        lay.addWidget(head)
        if q.url:
            link = QLabel(f'<a href="{q.url}">{q.url}</a>')
            link.setOpenExternalLinks(True)
            link.setTextInteractionFlags(Qt.TextInteractionFlag.TextBrowserInteraction)
            lay.addWidget(link)
        form = QFormLayout()
        self.inputs: dict[str, QWidget] = {}
        for f in q.fields:
            widget = _input(f)
            widget.setAccessibleName(f.label)
            if f.description:
                widget.setToolTip(f.description)
            self.inputs[f.name] = widget
            form.addRow(f.label + (" *" if f.required else ""), widget)
        lay.addLayout(form)
        self.error = QLabel()
        self.error.setObjectName("Warning")
        self.error.setWordWrap(True)
        self.error.hide()
        lay.addWidget(self.error)
        buttons = QDialogButtonBox()
        self.send_btn = QPushButton(self.tr("Open and continue") if q.url else self.tr("Send"))
        self.decline_btn = QPushButton(self.tr("Decline"))
        self.cancel_btn = QPushButton(self.tr("Cancel"))
        buttons.addButton(self.send_btn, QDialogButtonBox.ButtonRole.AcceptRole)
        buttons.addButton(self.decline_btn, QDialogButtonBox.ButtonRole.DestructiveRole)
        buttons.addButton(self.cancel_btn, QDialogButtonBox.ButtonRole.RejectRole)
        self.send_btn.setDefault(True)
        self.send_btn.clicked.connect(self._send)
        self.decline_btn.clicked.connect(lambda: self._finish(ElicitAnswer("decline")))
        self.cancel_btn.clicked.connect(lambda: self._finish(ElicitAnswer("cancel")))
        lay.addWidget(buttons)

    def values(self) -> dict[str, Any]:
        """What the form holds, field name to text, bool or list (before checking)."""
        out: dict[str, Any] = {}
        for f in self.question.fields:
            w = self.inputs[f.name]
            if isinstance(w, QCheckBox):
                out[f.name] = w.isChecked()
            elif isinstance(w, QComboBox):
                out[f.name] = w.currentData() or ""
            elif isinstance(w, QListWidget):
                out[f.name] = [
                    str(w.item(i).data(Qt.ItemDataRole.UserRole))
                    for i in range(w.count())
                    if w.item(i).checkState() == Qt.CheckState.Checked
                ]
            elif isinstance(w, QLineEdit):
                out[f.name] = w.text()
        return out

    def _send(self) -> None:
        try:
            content = check_values(self.question.fields, self.values())
        except ValueError as e:
            self.error.setText(str(e))
            self.error.show()
            return
        self._finish(ElicitAnswer("accept", content))

    def _finish(self, answer: ElicitAnswer) -> None:
        if not self._done:
            self._done = True
            self.answered.emit(answer)
        self.accept()

    def reject(self) -> None:  # Escape, or the window closed
        if not self._done:
            self._done = True
            self.answered.emit(ElicitAnswer("cancel"))
        super().reject()


def _input(f: FormField) -> QWidget:
    if f.kind == "boolean":
        box = QCheckBox()
        box.setChecked(bool(f.default))
        return box
    if f.kind == "choice":
        combo = QComboBox()
        if not f.required:
            combo.addItem("—", "")
        for value, label in f.options:
            combo.addItem(label, value)
        if f.default is not None:
            combo.setCurrentIndex(max(combo.findData(str(f.default)), 0))
        return combo
    if f.kind == "choices":
        lst = QListWidget()
        defaults = f.default if isinstance(f.default, list) else []
        for value, label in f.options:
            item = QListWidgetItem(label)
            item.setData(Qt.ItemDataRole.UserRole, value)
            checked = value in defaults
            item.setCheckState(Qt.CheckState.Checked if checked else Qt.CheckState.Unchecked)
            lst.addItem(item)
        lst.setMaximumHeight(110)
        return lst
    edit = QLineEdit("" if f.default is None else str(f.default))
    if f.kind in ("number", "integer"):
        edit.setPlaceholderText("whole number" if f.kind == "integer" else "number")
    elif f.format:
        edit.setPlaceholderText(f.format)
    return edit
