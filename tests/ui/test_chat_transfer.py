"""Export chat…, Export all chats… and Import chats… in the window: the sidebar's actions,
the file dialogs (replaced by the test's answers), the files written and the chats added."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from support.ui import send_and_wait


class _FileDialog:
    """Stands in for QFileDialog's static pickers: returns the queued answers, records asks."""

    answers: list[tuple[str, str]] = []
    asked: list[tuple[str, ...]] = []

    @classmethod
    def getSaveFileName(cls, parent, caption, start, filters, selected=""):
        cls.asked.append(("save", caption, start, filters, selected))
        return cls.answers.pop(0)

    @classmethod
    def getOpenFileName(cls, parent, caption, start, filters):
        cls.asked.append(("open", caption, start, filters))
        return cls.answers.pop(0)


@pytest.fixture
def file_dialog(monkeypatch: pytest.MonkeyPatch) -> type[_FileDialog]:
    _FileDialog.answers, _FileDialog.asked = [], []
    monkeypatch.setattr("hearth.ui.views.dialogs.QFileDialog", _FileDialog)
    return _FileDialog


def _list_action(sidebar, text: str):
    return next(a for a in sidebar.list.actions() if a.text() == text)


def test_export_one_export_all_and_import_from_the_sidebar(
    qtbot, stub, make_app, file_dialog, tmp_path: Path
):
    app = make_app(stub.url)
    send_and_wait(qtbot, app, "Tell me about volcanoes")
    volcano = app.chat.chat.id
    app.chat.new_chat()
    send_and_wait(qtbot, app, "Bake sourdough bread")
    sb, toast = app.window.sidebar, app.window.toast

    # Export chat… on the selected chat of the list: its title is the file name offered
    sb.select_chat(volcano)
    one = tmp_path / "volcanoes.json"
    file_dialog.answers.append((str(one), "Hearth chats, JSON (*.json)"))
    _list_action(sb, "Export chat…").trigger()
    assert Path(file_dialog.asked[-1][2]).name == "Tell me about volcanoes.json"
    data = json.loads(one.read_text())
    assert [c["title"] for c in data["chats"]] == ["Tell me about volcanoes"]
    assert [m["role"] for m in data["chats"][0]["messages"]] == ["user", "assistant"]
    assert toast.label.text() == f"Exported 1 chat to {one}"

    # Export all chats… from the chats menu, Markdown picked by its filter (no suffix typed)
    file_dialog.answers.append((str(tmp_path / "all"), "Markdown, for reading (*.md)"))
    sb.act_export_all.trigger()
    md = (tmp_path / "all.md").read_text()
    assert "# Tell me about volcanoes" in md and "# Bake sourdough bread" in md
    assert stub.reply.split()[0] in md
    assert toast.label.text() == f"Exported 2 chats to {tmp_path / 'all.md'}"

    # Import chats…: added beside the others (nothing overwritten), the first one opened
    file_dialog.answers.append((str(one), "Hearth chats, JSON (*.json)"))
    sb.act_import_chats.trigger()
    chats = app.store.chats()
    assert len(chats) == 3 and app.history.model.rowCount() == 3
    imported = app.chat.chat
    assert imported.id not in (volcano,) and imported.title == "Tell me about volcanoes"
    assert [m.content for m in app.store.path(imported.id)] == [
        m.content for m in app.store.path(volcano)
    ]
    assert toast.label.text() == "Imported 1 chat from volcanoes.json"

    # a file that is not an export: a sentence, nothing added
    file_dialog.answers.append((str(tmp_path / "all.md"), ""))
    sb.act_import_chats.trigger()
    assert len(app.store.chats()) == 3
    assert toast.level == "error"
    assert toast.label.text().startswith("Nothing was imported: ")
    assert "is not a Hearth chat export" in toast.label.text()

    # cancelled dialogs do nothing
    file_dialog.answers.extend([("", ""), ("", "")])
    sb.act_export_all.trigger()
    sb.act_import_chats.trigger()
    assert len(app.store.chats()) == 3 and not file_dialog.answers
