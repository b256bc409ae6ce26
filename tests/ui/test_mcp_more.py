"""MCP beyond tools in the desktop app, against a server written with the official SDK
(tests/agent/mcp_more.py, its script written into the test's folder) and the stub service
for the model: "Always allow this server" kept in the settings and asked again once the
server's command changes; a prompt used as `/review code=...` and from its argument form,
its message sent to the model; a resource attached as a document; a server's question during
a call answered in its form, and one declined."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from PySide6.QtCore import Qt
from stub_server import StubModel, StubServer

from support.ui import ask, send_and_wait, wait_card

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "agent"))
from mcp_more import write_server

MODEL = "qwen3:0.6b"


@pytest.fixture
def tool_stub():
    server = StubServer(models=[StubModel(MODEL, capabilities=["completion", "tools"])])
    yield server
    server.close()


def more_app(make_app, stub: StubServer, folder: Path):
    from hearth.agent.config import default_config_path

    script = write_server(folder)
    path = default_config_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    entry = {"command": sys.executable, "args": [str(script)]}
    path.write_text(json.dumps({"mcpServers": {"more": entry}}))
    app = make_app(stub.url)
    app.chat.new_chat(MODEL)
    app.chat.set_chat_tool("more", True)
    return app


def call(name: str, **arguments) -> dict:
    return {"function": {"name": name, "arguments": arguments}}


def chat_requests(stub: StubServer) -> list[dict]:
    return [r for r in stub.requests if r["path"] == "/api/chat"]


def test_always_allow_this_server_is_kept_and_asked_again_when_its_command_changes(
    make_app, tool_stub, qtbot, tmp_path
):
    from hearth.agent.approvals import server_identity
    from hearth.agent.config import ServerConfig
    from hearth.app_settings import load_settings

    app = more_app(make_app, tool_stub, tmp_path)
    tool_stub.script = [
        {"tool_calls": [call("more__echo", text="one")]},
        {"content": "Said one."},
    ]
    ask(qtbot, app, "Say one")
    card = wait_card(qtbot, app)
    assert card.server_btn.text() == "Always allow this server"
    assert '"text": "one"' in card.arguments.toPlainText()  # the arguments are shown
    with qtbot.waitSignal(app.chat.reply_finished, timeout=30_000):
        qtbot.mouseClick(card.server_btn, Qt.MouseButton.LeftButton)
    config = app.tools.servers()["more"]
    grant = {"server": "more", "identity": server_identity(config), "tool": ""}
    qtbot.waitUntil(lambda: load_settings().tool_grants == [grant])  # in settings.json
    labels = app.window.settings_page.tools.allowed
    assert [labels.item(i).text() for i in range(labels.count())] == ["more: every tool"]
    card = app.window.settings_page.tools
    qtbot.waitUntil(lambda: "MCP 2026-07-28" in card.server_item("more").text(1))  # its version
    # Another tool of the server runs without a card.
    tool_stub.script = [{"tool_calls": [call("more__echo", text="two")]}, {"content": "Two."}]
    send_and_wait(qtbot, app, "Say two")
    ran = app.store.path(app.chat.chat.id)[-2]
    assert ran.content == "echo: two" and ran.tool["decision"] == "allow_always"
    # The server's command changes (same name): the grant is dropped, the next call asks.
    moved = write_server(tmp_path, "moved_server.py")
    app.tools.put_server(ServerConfig("more", command=sys.executable, args=(str(moved),)), "more")
    qtbot.waitUntil(lambda: load_settings().tool_grants == [])
    assert labels.count() == 0
    tool_stub.script = [{"tool_calls": [call("more__echo", text="three")]}, {"content": "3."}]
    ask(qtbot, app, "Say three")
    card = wait_card(qtbot, app)
    with qtbot.waitSignal(app.chat.reply_finished, timeout=30_000):
        qtbot.mouseClick(card.deny_btn, Qt.MouseButton.LeftButton)
    assert app.store.path(app.chat.chat.id)[-2].tool["decision"] == "deny"


def test_a_prompt_is_offered_as_a_slash_command_and_its_message_goes_to_the_model(
    make_app, tool_stub, qtbot, tmp_path
):
    app = more_app(make_app, tool_stub, tmp_path)
    mcp, composer = app.mcp, app.window.chat_page.composer
    assert mcp.prompts == [] and app.tools.status()["more"].state == "stopped"  # not started
    # Sent before the prompts are listed: it waits for the listing, then runs as the prompt.
    tool_stub.script = [{"content": "Looks fine."}]
    send_and_wait(qtbot, app, '/review code="x = 1" language=lua')
    assert [p.name for p in mcp.prompts] == ["review"]
    composer.edit.setPlainText("/rev")
    assert "/review code=… language=…?" in composer.hint.text()  # offered while typing
    sent = chat_requests(tool_stub)[-1]["messages"]
    assert sent[-1] == {"role": "user", "content": "Review this lua code:\nx = 1"} or (
        sent[-1]["role"] == "user" and sent[-1]["content"] == "Review this lua code:\nx = 1"
    )
    path = app.store.path(app.chat.chat.id)
    assert [m.role for m in path] == ["user", "assistant"]
    assert path[0].content == "Review this lua code:\nx = 1" and path[1].content == "Looks fine."
    # Without its required argument, the prompt asks for it in a small form.
    ask(qtbot, app, "/review")
    qtbot.waitUntil(lambda: getattr(mcp, "dialog", None) is not None)
    dialog = mcp.dialog
    ok = dialog.buttons.button(dialog.buttons.StandardButton.Ok)
    assert not ok.isEnabled()
    dialog.edits["code"].setText("print(2)")
    assert ok.isEnabled()
    tool_stub.script = [{"content": "Fine too."}]
    with qtbot.waitSignal(app.chat.reply_finished, timeout=30_000):
        ok.click()
    assert app.store.path(app.chat.chat.id)[-2].content == "Review this python code:\nprint(2)"
    # A "/" text that names no prompt goes to the model as typed.
    tool_stub.script = [{"content": "A path."}]
    send_and_wait(qtbot, app, "/usr/bin is a folder")
    assert app.store.path(app.chat.chat.id)[-2].content == "/usr/bin is a folder"


def test_a_resource_is_attached_like_a_document(make_app, tool_stub, qtbot, tmp_path):
    app = more_app(make_app, tool_stub, tmp_path)
    mcp = app.mcp
    app.window.chat_page.composer.mcp.opening.emit()  # the MCP menu opens: listed
    qtbot.waitUntil(lambda: len(mcp.resources) == 2, timeout=30_000)
    note = next(r for r in mcp.resources if r.uri == "notes://today")
    mcp.attach_resource(note)
    docs = app.chat.documents
    qtbot.waitUntil(lambda: bool(docs.pending) and not docs.reading, timeout=30_000)
    assert docs.pending[0].name == "today.md"
    tool_stub.script = [{"content": "The heron, yes."}]
    send_and_wait(qtbot, app, "What is in my notes?")
    sent = json.dumps(chat_requests(tool_stub)[-1]["messages"])
    assert "The heron is back on the pond." in sent


def test_a_servers_question_is_answered_in_a_form_or_declined(make_app, tool_stub, qtbot, tmp_path):
    app = more_app(make_app, tool_stub, tmp_path)
    app.tools.approvals.grant(app.tools.servers()["more"])  # no approval card in the way
    tool_stub.script = [{"tool_calls": [call("more__book", day="Friday")]}, {"content": "Done."}]
    ask(qtbot, app, "Book Friday")
    qtbot.waitUntil(lambda: getattr(app.mcp, "form", None) is not None, timeout=30_000)
    form = app.mcp.form
    assert form.question.message == "Booking a table on Friday: how many seats?"
    form.inputs["seats"].setText("9")  # more than the form allows
    form.send_btn.click()
    assert "'Seats' must be at most 8" in form.error.text()
    form.inputs["seats"].setText("2")
    form.inputs["window"].setChecked(True)
    form.inputs["meal"].setCurrentIndex(form.inputs["meal"].findData("fish"))
    with qtbot.waitSignal(app.chat.reply_finished, timeout=30_000):
        form.send_btn.click()
    result = app.store.path(app.chat.chat.id)[-2]
    assert result.content == "booked 2 seat(s) on Friday, window=True, meal=fish"
    # Declined: the server is told so, and its tool says what it did.
    app.mcp.form = None
    tool_stub.script = [{"tool_calls": [call("more__book", day="Monday")]}, {"content": "No."}]
    ask(qtbot, app, "Book Monday")
    qtbot.waitUntil(lambda: app.mcp.form is not None, timeout=30_000)
    with qtbot.waitSignal(app.chat.reply_finished, timeout=30_000):
        app.mcp.form.decline_btn.click()
    assert app.store.path(app.chat.chat.id)[-2].content == "not booked: the user chose decline"
