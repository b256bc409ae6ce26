"""Tools in the desktop app: Settings → Tools with a real MCP server (tests/ui/mcp_weather.py,
stdio, the mcp SDK), the approval card (allow once / always / deny), the collapsed call in the
transcript, calls stored with the chat and shown again when it is reopened, resent on
regenerate, and the notice for a model that cannot use tools. The model side is the stub
service (stub_server.py) with scripted turns that call the tools."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from PySide6.QtCore import Qt
from stub_server import StubModel, StubServer

from support.ui import ask, send_and_wait, wait_card

WEATHER = Path(__file__).with_name("mcp_weather.py")
MODEL = "qwen3:0.6b"


def weather_config() -> dict:
    return {"mcpServers": {"weather": {"command": sys.executable, "args": [str(WEATHER)]}}}


@pytest.fixture
def tool_stub() -> StubServer:
    server = StubServer(models=[StubModel(MODEL, capabilities=["completion", "tools"])])
    yield server
    server.close()


def tool_app(make_app, stub: StubServer, qtbot, servers: dict | None = None):
    """An app on the stub whose chat uses the weather server."""
    from hearth.agent.config import default_config_path

    path = default_config_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(servers or weather_config()))
    app = make_app(stub.url)
    app.chat.new_chat(MODEL)
    app.chat.set_chat_tool("weather", True)
    return app


def qualified(app, tool: str) -> str:
    """The name the model sees for the weather server's `tool`."""
    specs = app.tools.tools(["weather"])
    return next(s.qualified_name for s in specs if s.name == tool)


def call(name: str, **arguments) -> dict:
    return {"function": {"name": name, "arguments": arguments}}


def roles(app) -> list[str]:
    return [m.role for m in app.store.path(app.chat.chat.id)]


def test_allow_once_runs_the_call_and_the_result_reaches_the_model(make_app, tool_stub, qtbot):
    app = tool_app(make_app, tool_stub, qtbot)
    name = qualified(app, "forecast")
    tool_stub.script = [
        {"content": "Let me look.", "tool_calls": [call(name, city="Lisbon")]},
        {"content": "Tomorrow Lisbon will be sunny."},
    ]
    ask(qtbot, app, "Weather in Lisbon tomorrow?")
    card = wait_card(qtbot, app)
    assert card.tool == "forecast"
    assert '"city": "Lisbon"' in card.arguments.toPlainText()
    assert app.chat.busy  # the loop waits for the user, the window does not
    with qtbot.waitSignal(app.chat.reply_finished, timeout=30_000):
        qtbot.mouseClick(card.allow_btn, Qt.MouseButton.LeftButton)
    assert app.window.chat_page.transcript.approval is None
    # The result went back to the model in Ollama's shape, after the assistant's call.
    sent = [r for r in tool_stub.requests if r["path"] == "/api/chat"][-1]["messages"]
    assert sent[-2]["tool_calls"][0]["function"] == {"name": name, "arguments": {"city": "Lisbon"}}
    assert sent[-1]["role"] == "tool"
    assert sent[-1]["content"] == "Lisbon: sunny, 21 °C, light wind from the west."
    # Stored as it happened: user → assistant (its call) → tool (the result) → assistant.
    path = app.store.path(app.chat.chat.id)
    assert [m.role for m in path] == ["user", "assistant", "tool", "assistant"]
    assert [(c["name"], c["arguments"]) for c in path[1].tool_calls] == [(name, {"city": "Lisbon"})]
    assert path[2].tool["call_id"] == path[1].tool_calls[0]["id"]
    assert path[2].tool["server"] == "weather" and path[2].tool["decision"]
    assert path[3].content == "Tomorrow Lisbon will be sunny."
    assert app.settings.tool_grants == []
    # The call shows collapsed in the transcript, and opens to its arguments and result.
    widget = app.window.chat_page.transcript.widget_for(path[2].id)
    view = widget.tool_view
    assert not view.expanded() and "forecast" in view.toggle.text()
    qtbot.mouseClick(view.toggle, Qt.MouseButton.LeftButton)
    assert view.expanded()
    assert "sunny, 21 °C" in view.result.toPlainText()
    assert '"city": "Lisbon"' in view.arguments.toPlainText()


def test_deny_tells_the_model_and_runs_nothing(make_app, tool_stub, qtbot):
    app = tool_app(make_app, tool_stub, qtbot)
    name = qualified(app, "forecast")
    tool_stub.script = [
        {"tool_calls": [call(name, city="Oslo")]},
        {"content": "I could not check the weather."},
    ]
    ask(qtbot, app, "Weather in Oslo?")
    card = wait_card(qtbot, app)
    with qtbot.waitSignal(app.chat.reply_finished, timeout=30_000):
        qtbot.mouseClick(card.deny_btn, Qt.MouseButton.LeftButton)
    path = app.store.path(app.chat.chat.id)
    assert [m.role for m in path] == ["user", "assistant", "tool", "assistant"]
    denied = path[2]
    assert "sunny" not in denied.content  # the server never ran
    assert "deny" in str(denied.tool["decision"]).lower()
    sent = [r for r in tool_stub.requests if r["path"] == "/api/chat"][-1]["messages"]
    assert sent[-1]["role"] == "tool" and sent[-1]["content"] == denied.content
    view = app.window.chat_page.transcript.widget_for(denied.id).tool_view
    assert "denied" in view.toggle.text()


def test_an_answer_that_is_not_an_allow_denies(make_app, tool_stub, qtbot):
    """Fails closed: a card that answers anything but allow once / always (here a word no
    button sends) denies the call; the server never runs."""
    app = tool_app(make_app, tool_stub, qtbot)
    name = qualified(app, "forecast")
    tool_stub.script = [
        {"tool_calls": [call(name, city="Oslo")]},
        {"content": "I could not check the weather."},
    ]
    ask(qtbot, app, "Weather in Oslo?")
    card = wait_card(qtbot, app)
    with qtbot.waitSignal(app.chat.reply_finished, timeout=30_000):
        card.decided.emit("maybe")
    denied = app.store.path(app.chat.chat.id)[2]
    assert denied.content == f"the user denied the call to '{name}'"
    assert denied.tool["decision"] == "deny"
    assert not app.settings.tool_grants


def weather_grant(app, tool: str = "") -> dict:
    from hearth.agent.approvals import server_identity

    config = app.tools.servers()["weather"]
    return {"server": "weather", "identity": server_identity(config), "tool": tool}


def test_always_allow_is_remembered_per_tool(make_app, tool_stub, qtbot):
    app = tool_app(make_app, tool_stub, qtbot)
    name = qualified(app, "forecast")
    tool_stub.script = [
        {"tool_calls": [call(name, city="Rome")]},
        {"content": "Sunny in Rome."},
    ]
    ask(qtbot, app, "Rome?")
    card = wait_card(qtbot, app)
    with qtbot.waitSignal(app.chat.reply_finished, timeout=30_000):
        qtbot.mouseClick(card.always_btn, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: app.settings.tool_grants == [weather_grant(app, "forecast")])
    from hearth.app_settings import load_settings

    assert load_settings().tool_grants == [weather_grant(app, "forecast")]  # survives a restart
    # `hearth run --tools` grants another tool meanwhile; the app's next save keeps it.
    from hearth.agent.approvals import Grant
    from hearth.cli.terminal_tools import settings_grants

    settings_grants().grant(app.tools.servers()["weather"], "alerts")
    app.settings_ctrl.set_tool_max_steps(9)
    kept = [weather_grant(app, "forecast"), weather_grant(app, "alerts")]
    assert load_settings().tool_grants == kept and load_settings().tool_max_steps == 9
    assert app.tools.approvals.allows(app.tools.servers()["weather"], "alerts")
    app.tools.revoke(Grant.from_json(kept[1]))  # and the app's revoke reaches the file
    qtbot.waitUntil(lambda: app.settings.tool_grants == kept[:1])
    assert load_settings().tool_grants == kept[:1]
    # Next time the same tool runs without a card; another tool still asks.
    chart = qualified(app, "chart")
    tool_stub.script = [
        {"tool_calls": [call(name, city="Paris")]},
        {"tool_calls": [call(chart, city="Paris")]},
        {"content": "Here is the chart."},
    ]
    ask(qtbot, app, "Paris?")
    card = wait_card(qtbot, app)
    assert card.tool == "chart"
    # the forecast ran without asking: its result is in, the next turn asks for the chart
    assert roles(app)[-3:] == ["assistant", "tool", "assistant"]
    ran = app.store.path(app.chat.chat.id)[-2]
    assert "Paris: sunny" in ran.content and ran.tool["decision"] == "allow_always"
    with qtbot.waitSignal(app.chat.reply_finished, timeout=30_000):
        qtbot.mouseClick(card.allow_btn, Qt.MouseButton.LeftButton)
    picture = app.store.path(app.chat.chat.id)[-2]
    assert picture.role == "tool" and picture.images  # the chart's PNG, kept with the chat
    view = app.window.chat_page.transcript.widget_for(picture.id).tool_view
    assert len(view.thumbnails) == 1 and view.thumbnails[0].pixmap() is not None
    # Settings → Tools lists it, and "Ask again" forgets it.
    tools_card = app.window.settings_page.tools
    labels = [tools_card.allowed.item(i).text() for i in range(tools_card.allowed.count())]
    assert labels == ["weather: forecast"]
    qtbot.mouseClick(tools_card.forget_btn, Qt.MouseButton.LeftButton)
    assert app.settings.tool_grants == [] and tools_card.allowed.count() == 0


def test_cancel_while_a_call_waits_denies_it_and_stops(make_app, tool_stub, qtbot):
    app = tool_app(make_app, tool_stub, qtbot)
    name = qualified(app, "forecast")
    tool_stub.script = [{"tool_calls": [call(name, city="Lima")]}, {"content": "never sent"}]
    ask(qtbot, app, "Lima?")
    wait_card(qtbot, app)
    with qtbot.waitSignal(app.chat.reply_finished, timeout=30_000) as finished:
        app.window.act_stop.trigger()
    assert finished.args[1] == "stopped"
    assert app.window.chat_page.transcript.approval is None
    assert not app.chat.busy
    assert len([r for r in tool_stub.requests if r["path"] == "/api/chat"]) == 1
    assert tool_stub.script == [{"content": "never sent"}]


def test_stop_during_a_call_stops_the_call_and_the_chat_goes_on(make_app, tool_stub, qtbot):
    import time

    app = tool_app(make_app, tool_stub, qtbot)
    name = qualified(app, "radar")
    tool_stub.script = [{"tool_calls": [call(name, city="Bergen")]}, {"content": "never sent"}]
    ask(qtbot, app, "Rain in Bergen?")
    card = wait_card(qtbot, app)
    qtbot.mouseClick(card.allow_btn, Qt.MouseButton.LeftButton)
    qtbot.wait(1000)  # the minute-long call is running; the window is not waiting for it
    assert app.chat.busy
    started = time.monotonic()
    with qtbot.waitSignal(app.chat.reply_finished, timeout=20_000) as finished:
        app.window.act_stop.trigger()
    assert time.monotonic() - started < 15
    assert finished.args[1] == "stopped"
    stopped = app.store.path(app.chat.chat.id)[-1]
    assert stopped.role == "tool" and stopped.tool["is_error"]
    assert "no rain" not in stopped.content
    assert tool_stub.script == [{"content": "never sent"}]  # the loop went no further
    # The chat goes on: the next question gets its answer (the server is started again).
    tool_stub.script = [{"content": "Ask me later."}]
    send_and_wait(qtbot, app, "Never mind.")
    assert app.store.path(app.chat.chat.id)[-1].content == "Ask me later."


def test_a_reopened_chat_shows_its_calls_and_regenerate_resends_them(make_app, tool_stub, qtbot):
    app = tool_app(make_app, tool_stub, qtbot)
    name = qualified(app, "forecast")
    tool_stub.script = [
        {"tool_calls": [call(name, city="Kyiv")]},
        {"content": "Sunny in Kyiv."},
    ]
    ask(qtbot, app, "Kyiv?")
    card = wait_card(qtbot, app)
    with qtbot.waitSignal(app.chat.reply_finished, timeout=30_000):
        qtbot.mouseClick(card.allow_btn, Qt.MouseButton.LeftButton)
    chat_id = app.chat.chat.id
    app.shutdown()  # the hub stops its servers with the app

    again = make_app(tool_stub.url)
    again.chat.open_chat(chat_id)
    widgets = again.window.chat_page.transcript.widgets
    assert [w.item.role for w in widgets] == ["user", "assistant", "tool", "assistant"]
    view = widgets[2].tool_view
    assert "forecast" in view.toggle.text() and not view.expanded()
    assert "sunny, 21 °C" in view.result.toPlainText()
    assert again.chat.chat.tools == ["weather"]
    # Regenerate the answer: the call and its result go to the model again.
    tool_stub.script = [{"content": "Still sunny in Kyiv."}]
    with qtbot.waitSignal(again.chat.reply_finished, timeout=30_000):
        again.chat.regenerate()
    sent = [r for r in tool_stub.requests if r["path"] == "/api/chat"][-1]["messages"]
    assert [m["role"] for m in sent] == ["user", "assistant", "tool"]
    assert sent[1]["tool_calls"][0]["function"]["arguments"] == {"city": "Kyiv"}
    assert sent[2]["tool_name"] == name
    assert again.store.path(chat_id)[-1].content == "Still sunny in Kyiv."


def test_a_model_without_tools_is_not_offered_them_and_the_app_says_so(make_app, qtbot):
    stub = StubServer(models=[StubModel("gemma3:270m")])  # no "tools" capability
    try:
        app = tool_app(make_app, stub, qtbot)
        app.chat.set_model("gemma3:270m")
        note = app.window.chat_page.tools_note
        qtbot.waitUntil(lambda: not note.isHidden(), timeout=10_000)
        assert "cannot use tools" in note.text() and "gemma3:270m" in note.text()
        send_and_wait(qtbot, app, "hello")
        body = [r for r in stub.requests if r["path"] == "/api/chat"][-1]
        assert "tools" not in body  # a plain reply
        app.chat.set_chat_tool("weather", False)
        assert note.isHidden()
    finally:
        stub.close()


def test_settings_tools_add_paste_status_and_limits(make_app, stub, qtbot):
    from hearth.agent.config import default_config_path

    app = make_app(stub.url)
    card = app.window.settings_page.tools
    assert card.server_names() == [] and not card.empty.isHidden()
    # Add a server through the dialog (a bad one is refused with a sentence, nothing saved).
    qtbot.mouseClick(card.add_btn, Qt.MouseButton.LeftButton)
    dialog = card.dialog
    dialog.name.setText("weather")
    dialog.accept()
    assert dialog.isVisible() and "command" in dialog.error.text().lower()
    dialog.command.setText(sys.executable)
    dialog.args.setText(str(WEATHER))
    dialog.accept()
    assert not dialog.isVisible()
    assert card.server_names() == ["weather"]
    saved = json.loads(default_config_path().read_text())
    assert saved["mcpServers"]["weather"]["args"] == [str(WEATHER)]
    # Start it: its status and tools show.
    qtbot.mouseClick(card.check_btn, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: card.server_item("weather").childCount() == 3, timeout=30_000)
    item = card.server_item("weather")
    assert "running" in item.text(1)
    listed = sorted(item.child(i).text(0).split(" — ")[0] for i in range(3))
    assert listed == ["chart", "forecast", "radar"]
    # Paste another app's JSON: a broken document says why; a good one adds its servers.
    qtbot.mouseClick(card.paste_btn, Qt.MouseButton.LeftButton)
    paste = card.dialog
    paste.text.setPlainText('{"mcpServers": {"web": {"args": ["x"]}}}')
    paste.accept()
    assert paste.isVisible() and "web" in paste.error.text()
    paste.text.setPlainText(json.dumps({"mcpServers": {"web": {"url": "http://127.0.0.1:9/mcp"}}}))
    paste.accept()
    assert card.server_names() == ["weather", "web"]
    # Edit, then remove.
    card.select_server("web")
    qtbot.mouseClick(card.edit_btn, Qt.MouseButton.LeftButton)
    edit = card.dialog
    assert edit.url.text() == "http://127.0.0.1:9/mcp"
    edit.name.setText("web2")
    edit.accept()
    assert card.server_names() == ["weather", "web2"]
    card.select_server("web2")
    qtbot.mouseClick(card.remove_btn, Qt.MouseButton.LeftButton)
    assert card.server_names() == ["weather"]
    assert list(json.loads(default_config_path().read_text())["mcpServers"]) == ["weather"]
    # The limits: defaults shown, changes saved.
    assert (card.max_steps.value(), card.call_timeout.value()) == (10, 60)
    card.max_steps.setValue(4)
    card.call_timeout.setValue(15)
    assert (app.settings.tool_max_steps, app.settings.tool_call_timeout) == (4, 15)
    # The chat's Tools menu offers the server; checking it keeps it with the chat.
    actions = app.window.chat_page.tool_actions()
    assert list(actions) == ["weather"]
    actions["weather"].trigger()
    assert app.store.chat(app.chat.chat.id).tools == ["weather"]
    assert "1" in app.window.chat_page.tools_btn.text()


def test_the_step_limit_stops_the_loop(make_app, tool_stub, qtbot):
    app = tool_app(make_app, tool_stub, qtbot)
    name = qualified(app, "forecast")
    app.settings_ctrl.set_tool_max_steps(2)
    app.tools.approvals.grant(app.tools.servers()["weather"], "forecast")
    tool_stub.script = [{"tool_calls": [call(name, city=f"C{n}")]} for n in range(5)]
    send_and_wait(qtbot, app, "Loop forever")
    assert len([r for r in tool_stub.requests if r["path"] == "/api/chat"]) == 2
    assert "step limit" in app.window.toast.label.text()


def test_a_repeated_call_stops_the_loop_with_a_notice(make_app, tool_stub, qtbot):
    """The model calls forecast(Lisbon) again after it has the result (as a greedy model
    does): the call is not run again, the reply ends with a notice saying why, and every
    turn was sent with a token cap."""
    from hearth.agent.loop import TURN_TOKENS

    app = tool_app(make_app, tool_stub, qtbot)
    name = qualified(app, "forecast")
    app.tools.approvals.grant(app.tools.servers()["weather"], "forecast")
    tool_stub.script = [{"tool_calls": [call(name, city="Lisbon")]} for _ in range(5)]
    send_and_wait(qtbot, app, "Weather in Lisbon?")
    chats = [r for r in tool_stub.requests if r["path"] == "/api/chat"]
    assert len(chats) == 2  # not the step limit (10)
    assert [r["options"]["num_predict"] for r in chats] == [TURN_TOKENS] * 2
    text = app.window.toast.label.text()
    assert f"the model called {name} again with the same arguments" in text
    path = app.store.path(app.chat.chat.id)
    assert [m.role for m in path] == ["user", "assistant", "tool", "assistant", "tool"]
    assert "sunny" in path[2].content and "not run again" in path[4].content


def test_a_damaged_mcp_json_is_said_and_kept(make_app, stub, qtbot):
    from hearth.agent.config import default_config_path

    path = default_config_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    damaged = '{"mcpServers": {"files": {"command": 42}}}'
    path.write_text(damaged)
    app = make_app(stub.url)
    card = app.window.settings_page.tools
    assert not card.load_error.isHidden()
    assert "files" in card.load_error.text() and str(path) in card.load_error.text()
    # Adding a server writes a new file; the damaged one is kept beside it, word for word.
    qtbot.mouseClick(card.paste_btn, Qt.MouseButton.LeftButton)
    card.dialog.text.setPlainText(json.dumps(weather_config()))
    card.dialog.accept()
    assert card.server_names() == ["weather"] and card.load_error.isHidden()
    assert path.with_name("mcp.json.damaged").read_text() == damaged


def test_an_edited_later_question_resends_the_earlier_calls(tmp_path):
    """chat_body over a branch with a tool round trip before the edited question."""
    from hearth.history import ChatStore
    from hearth.ui.controllers.request import chat_body

    store = ChatStore(tmp_path / "c.db")
    chat = store.create_chat(MODEL, tools=["weather"])
    q = store.add_message(chat.id, None, "user", "Weather in Oslo?")
    calls = [{"id": "c1", "name": "weather__forecast", "arguments": {"city": "Oslo"}}]
    a = store.add_message(chat.id, q.id, "assistant", "", tool_calls=calls)
    record = {"call_id": "c1", "name": "weather__forecast", "server": "weather"}
    t = store.add_message(chat.id, a.id, "tool", "Oslo: snow", images=[b"png"], tool=record)
    a2 = store.add_message(chat.id, t.id, "assistant", "Snow in Oslo.")
    store.add_message(chat.id, a2.id, "user", "And in Rome?")
    edited = store.add_message(chat.id, a2.id, "user", "And in Paris?")  # the edit: a sibling
    store.set_leaf(chat.id, edited.id)
    body = chat_body(store.chat(chat.id), store.path(chat.id), {}, None)
    assert body["messages"] == [
        {"role": "user", "content": "Weather in Oslo?"},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [
                {
                    "id": "c1",
                    "function": {"name": "weather__forecast", "arguments": {"city": "Oslo"}},
                }
            ],
        },
        {
            "role": "tool",
            "content": "Oslo: snow",
            "tool_name": "weather__forecast",
            "tool_call_id": "c1",
            "images": ["cG5n"],
        },
        {"role": "assistant", "content": "Snow in Oslo."},
        {"role": "user", "content": "And in Paris?"},
    ]


def test_a_server_that_does_not_start_is_said_and_the_chat_still_answers(
    make_app, tool_stub, qtbot
):
    broken = {"mcpServers": {"weather": {"command": "/nonexistent/hearth-test-server"}}}
    app = tool_app(make_app, tool_stub, qtbot, servers=broken)
    tool_stub.script = [{"content": "No tools today."}]
    send_and_wait(qtbot, app, "Weather?")
    assert app.store.path(app.chat.chat.id)[-1].content == "No tools today."
    body = [r for r in tool_stub.requests if r["path"] == "/api/chat"][-1]
    assert body["tools"] == []
    said = app.window.toast.label.text()
    assert "weather" in said and "/nonexistent/hearth-test-server" in said


def test_the_card_follows_its_chat_when_the_user_looks_at_another(make_app, tool_stub, qtbot):
    app = tool_app(make_app, tool_stub, qtbot)
    name = qualified(app, "forecast")
    tool_stub.script = [{"tool_calls": [call(name, city="Quito")]}, {"content": "Mild in Quito."}]
    ask(qtbot, app, "Quito?")
    wait_card(qtbot, app)
    asking = app.chat.chat.id
    other = app.store.create_chat(MODEL)
    app.chat.open_chat(other.id)
    transcript = app.window.chat_page.transcript
    assert transcript.approval is None and transcript.widgets == []
    app.chat.open_chat(asking)
    card = wait_card(qtbot, app)
    assert '"city": "Quito"' in card.arguments.toPlainText()
    with qtbot.waitSignal(app.chat.reply_finished, timeout=30_000):
        qtbot.mouseClick(card.allow_btn, Qt.MouseButton.LeftButton)
    assert app.store.path(asking)[-1].content == "Mild in Quito."
