"""Documents on screen: chips (name, pages, "whole" or "searched") in the composer and on the
question that carried them, the reading progress line, and the sources under a reply, each
clickable to show the passage."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QResizeEvent
from PySide6.QtWidgets import (
    QGridLayout,
    QHBoxLayout,
    QLabel,
    QLayout,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from ...documents.records import Citation

__all__ = ["ChipInfo", "DocumentStrip", "SourcesView", "chip_row"]

_MODES = {"whole": "whole", "searched": "searched"}


@dataclass(frozen=True)
class ChipInfo:
    """What a document chip shows: name, extent ("300 pages"), how it is sent, its notes."""

    name: str
    extent: str
    mode: str
    notes: list[str] = field(default_factory=list)

    def text(self) -> str:
        return f"{self.name} · {self.extent} · {_MODES.get(self.mode, self.mode)}"

    def tooltip(self) -> str:
        how = (
            "Sent whole: it fits the context with the conversation."
            if self.mode == "whole"
            else "Too long for the context: the passages that answer each question are sent."
        )
        return "\n".join([how, *self.notes])


def _empty(row: QLayout) -> None:
    """Take every widget out of `row` and delete it (once the event loop runs)."""
    while row.count():
        item = row.takeAt(0)
        widget = item.widget() if item is not None else None
        if widget is not None:
            widget.hide()
            widget.deleteLater()


def _chip(info: ChipInfo) -> QLabel:
    label = QLabel(info.text())
    label.setObjectName("DocumentChip")
    label.setToolTip(info.tooltip())
    label.setAccessibleName(info.text())
    label.setStyleSheet(
        "QLabel#DocumentChip { border: 1px solid palette(mid); border-radius: 10px;"
        " padding: 3px 9px; }"
    )
    return label


def chip_row(infos: Sequence[ChipInfo]) -> tuple[QWidget, list[QLabel]]:
    """A row of chips (the question that carried the documents)."""
    row = QWidget()
    lay = QHBoxLayout(row)
    lay.setContentsMargins(0, 0, 0, 0)
    lay.setSpacing(6)
    chips = [_chip(i) for i in infos]
    for c in chips:
        lay.addWidget(c)
    lay.addStretch(1)
    return row, chips


class DocumentStrip(QWidget):
    """The composer's documents waiting to go (each removable) and the reading progress."""

    remove_requested = Signal(int)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        lay = QVBoxLayout(self)
        lay.setContentsMargins(0, 0, 0, 4)
        lay.setSpacing(2)
        self._row = QHBoxLayout()
        self._row.setSpacing(6)
        lay.addLayout(self._row)
        self.progress = QLabel()
        self.progress.setObjectName("Stats")
        self.progress.setAccessibleName(self.tr("Reading documents"))
        self.progress.hide()
        lay.addWidget(self.progress)
        self.chips: list[QLabel] = []
        self.hide()

    def set_documents(self, infos: Sequence[ChipInfo], progress: str = "") -> None:
        _empty(self._row)
        self.chips = []
        for n, info in enumerate(infos):
            chip = _chip(info)
            self.chips.append(chip)
            remove = QToolButton()
            remove.setText("✕")
            remove.setAccessibleName(self.tr("Remove %1").replace("%1", info.name))
            remove.clicked.connect(lambda _=False, i=n: self.remove_requested.emit(i))
            self._row.addWidget(chip)
            self._row.addWidget(remove)
        self._row.addStretch(1)
        self.progress.setText(progress)
        self.progress.setVisible(bool(progress))
        self.setVisible(bool(infos) or bool(progress))


class SourcesView(QWidget):
    """The sources under a reply: one button per passage the prompt drew on ("[1] page 217"
    under "Sources · report.pdf", or "[1] report.pdf, page 217" when several documents are
    cited), a few to a row; a click shows the passage below them (a second click hides it)."""

    PER_ROW = 6

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._citations: list[Citation] = []
        self.shown = -1
        lay = QVBoxLayout(self)
        lay.setContentsMargins(0, 2, 0, 2)
        lay.setSpacing(4)
        self.title = QLabel()
        self.title.setObjectName("Stats")
        lay.addWidget(self.title)
        self._row = QGridLayout()
        self._row.setHorizontalSpacing(4)
        self._row.setVerticalSpacing(2)
        self._row.setAlignment(Qt.AlignmentFlag.AlignLeft)
        lay.addLayout(self._row)
        self.passage = QLabel()
        self.passage.setObjectName("SourcePassage")
        self.passage.setWordWrap(True)
        self.passage.setTextFormat(Qt.TextFormat.PlainText)
        self.passage.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.passage.setAccessibleName(self.tr("Source passage"))
        self.passage.setStyleSheet(
            "QLabel#SourcePassage { border-left: 3px solid palette(mid); padding: 4px 10px; }"
        )
        self.passage.hide()
        lay.addWidget(self.passage)
        self.buttons: list[QToolButton] = []
        self.hide()

    def set_citations(self, citations: Sequence[Citation]) -> None:
        if list(citations) == self._citations:
            return
        self._citations = list(citations)
        _empty(self._row)
        self.buttons = []
        names = list(dict.fromkeys(c.document for c in citations))
        one = len(names) == 1
        self.title.setText(self.tr("Sources") + (f" · {names[0]}" if one else ""))
        for n, c in enumerate(citations):
            b = QToolButton()
            b.setText((f"[{c.number}] " if c.number else "") + (c.where() if one else c.label()))
            b.setAccessibleName(self.tr("Show the passage from %1").replace("%1", c.label()))
            b.setToolTip(c.text[:300])
            b.setCursor(Qt.CursorShape.PointingHandCursor)
            b.clicked.connect(lambda _=False, i=n: self.show_passage(i))
            self.buttons.append(b)
            self._row.addWidget(b, n // self.PER_ROW, n % self.PER_ROW)
        self.shown = -1
        self.passage.hide()
        self.setVisible(bool(citations))

    def show_passage(self, index: int) -> None:
        """Show (or, shown already, hide) the passage of the `index`-th source."""
        if index == self.shown or not 0 <= index < len(self._citations):
            self.shown = -1
            self.passage.hide()
            return
        c = self._citations[index]
        self.shown = index
        self.passage.setText(f"{c.label()}\n\n{' '.join(c.text.split())}")
        self.passage.show()
        self._fit_passage()

    def _fit_passage(self) -> None:
        # A wrapping label in the transcript's nested layouts may get the height of too few
        # lines; ask for the height its text needs at this width.
        if self.passage.isVisible():
            self.passage.setMinimumHeight(self.passage.heightForWidth(max(1, self.width())))

    def resizeEvent(self, e: QResizeEvent) -> None:
        super().resizeEvent(e)
        self._fit_passage()
